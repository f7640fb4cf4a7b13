//! Admission over real sockets: strangers' HELLOs cost the server no
//! state (a stateless cookie round trip comes first), a full server says
//! so, and a silent peer leaves the table and the engine.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use udrma_bridge::tools::{self, ServeOptions};
use udrma_bridge::{BridgeConfig, BridgeError, Endpoint};
use udrma_proto::{Body, Hello, Repr};

fn hello_ask(nonce: u32, cookie: [u8; 16]) -> Vec<u8> {
    Repr::hello(
        77,
        Hello {
            cookie,
            ..Hello::new(false, 1400, nonce)
        },
    )
    .to_vec()
    .unwrap()
}

/// From `sources` distinct loopback addresses (127.1.x.y, a fresh port
/// each): a HELLO ask without a cookie, one with a forged cookie, one
/// replaying `stolen` (a cookie minted for someone else), and junk.
async fn strangers(server: SocketAddr, sources: u32, stolen: [u8; 16]) -> u32 {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut sent = 0;
    for i in 0..sources {
        let ip = Ipv4Addr::new(127, 1, (i >> 8) as u8, i as u8);
        let Ok(s) = tokio::net::UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), 0)).await else {
            continue;
        };
        let mut forged = [0u8; 16];
        rng.fill_bytes(&mut forged);
        let mut junk = vec![0u8; (rng.next_u32() % 1400) as usize];
        rng.fill_bytes(&mut junk);
        for d in [
            hello_ask(i, [0; 16]),
            hello_ask(i, forged),
            hello_ask(i, stolen),
            junk,
        ] {
            let _ = s.send_to(&d, server).await;
        }
        sent += 1;
        if i % 64 == 0 {
            tokio::task::yield_now().await;
        }
    }
    sent
}

#[tokio::test(flavor = "current_thread")]
async fn hellos_from_thousands_of_strangers_cost_no_state_and_the_honest_client_gets_in() {
    let region = 8u64 << 20;
    let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default())
        .await
        .unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let opts = ServeOptions {
        region,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop, |_| {});
    let work = async {
        // A cookie the server minted for another address (a first ask
        // from a throwaway socket), for the strangers to replay.
        let thief = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        thief.send_to(&hello_ask(1, [0; 16]), addr).await.unwrap();
        let mut buf = [0u8; 256];
        let n = thief.recv(&mut buf).await.unwrap();
        let Ok(Repr {
            body: Body::Hello(retry),
            ..
        }) = Repr::parse_bytes(&buf[..n])
        else {
            panic!("no answer to a stranger's ask")
        };
        assert!(retry.reply && retry.retry && retry.cookie != [0; 16]);
        assert_eq!(
            n,
            hello_ask(1, [0; 16]).len(),
            "the retry amplifies nothing"
        );
        let flood = strangers(addr, 4000, retry.cookie);
        let honest = async {
            let mut c = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default())
                .await
                .unwrap();
            tools::put(&mut c, addr, region, true, 3).await
        };
        let (sources, put) = tokio::join!(flood, honest);
        stop.store(true, Ordering::Relaxed);
        (sources, put)
    };
    let (served, (sources, put)) = tokio::join!(serving, work);
    served.unwrap();
    let put = put.expect("the honest put gets in during the flood");
    assert!(put.verified);
    let b = server.stats();
    eprintln!(
        "{sources} stranger addresses; bridge {b:?}; rate table {} sources",
        server.admission_sources()
    );
    assert!(
        sources >= 3500,
        "{sources} of 4000 addresses could be bound"
    );
    // No stranger got in: only the honest client is a peer.
    assert_eq!(server.peers().len(), 1);
    // Every stranger's ask was answered statelessly or rate-limited; the
    // forged and stolen cookies did not check out.
    assert!(b.hello_retries_sent + b.hello_rate_limited >= 3 * u64::from(sources));
    assert!(b.bad_cookies >= 2 * u64::from(sources), "{b:?}");
    assert!(b.unknown_peer * 100 >= u64::from(sources) * 99, "the junk");
    assert!(server.admission_sources() <= udrma_bridge::admission::RATE_SOURCES);
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_server_says_so_and_the_client_reports_it() {
    let cfg = BridgeConfig {
        max_peers: 1,
        hello_tries: 3,
        hello_interval: Duration::from_millis(50),
        ..BridgeConfig::default()
    };
    let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), cfg.clone())
        .await
        .unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let serving = tools::serve(&mut server, ServeOptions::default(), &stop, |_| {});
    let work = async {
        let mut a = Endpoint::bind("127.0.0.1:0".parse().unwrap(), cfg.clone())
            .await
            .unwrap();
        let first = a.connect(addr).await.map(|_| ());
        let mut b = Endpoint::bind("127.0.0.1:0".parse().unwrap(), cfg.clone())
            .await
            .unwrap();
        let second = b.connect(addr).await.map(|_| ());
        stop.store(true, Ordering::Relaxed);
        (first, second)
    };
    let (served, (first, second)) = tokio::join!(serving, work);
    served.unwrap();
    first.expect("the first client fits");
    let err = second.expect_err("the table holds one");
    assert!(
        matches!(err, BridgeError::ServerFull(a) if a == addr),
        "{err}"
    );
    assert!(err.to_string().contains("is full"), "{err}");
    assert_eq!(server.stats().refused_full, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_silent_peer_is_evicted_and_the_engine_forgets_it_then_it_can_come_back() {
    let cfg = BridgeConfig {
        peer_idle: Duration::from_millis(200),
        ..BridgeConfig::default()
    };
    let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), cfg)
        .await
        .unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let opts = ServeOptions {
        region: 1 << 20,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop, |_| {});
    let work = async {
        let mut c = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default())
            .await
            .unwrap();
        let first = tools::put(&mut c, addr, 1 << 20, true, 1).await;
        // Silent for more than the idle time and the once-a-second sweep.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let again = tools::put(&mut c, addr, 1 << 20, true, 2).await;
        stop.store(true, Ordering::Relaxed);
        (first, again)
    };
    let (served, (first, again)) = tokio::join!(serving, work);
    served.unwrap();
    assert!(first.expect("first put").verified);
    assert!(again.expect("a new HELLO admits it again").verified);
    let b = server.stats();
    assert!(b.peers_evicted >= 1, "{b:?}");
    assert_eq!(server.peers().len(), 1, "back in once");
}
