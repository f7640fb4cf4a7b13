//! The authenticated mode over real sockets: an attacker in the middle
//! forwards an honest transfer and, for every datagram it carries, also
//! replays it, sends a modified copy and a forgery of its own. None of
//! them changes anything: the transfer lands byte-exact and every hostile
//! datagram is counted by reason.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use udrma_bridge::secure::KeyRing;
use udrma_bridge::tools::{self, ServeOptions};
use udrma_bridge::{BridgeConfig, Endpoint};

const KEYS: &str = "\
1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f
";

fn secured() -> BridgeConfig {
    let mut cfg = BridgeConfig {
        keys: Some(KeyRing::parse(KEYS, "test keys").unwrap()),
        ..BridgeConfig::default()
    };
    cfg.nic.mtu_payload = 1400 - udrma_proto::secure::OVERHEAD as u32;
    cfg
}

/// What the attacker sent besides what it forwarded.
#[derive(Debug, Default)]
struct Sent {
    replays: u64,
    modified: u64,
    forged: u64,
}

/// Forwards between `client` (learnt from its first datagram) and
/// `server`; for every datagram carried, to the same side: the datagram
/// again (a replay), a copy with one byte flipped, and a forgery (a
/// security header with a fresh sequence number and key id 1, then
/// random bytes).
async fn man_in_the_middle(
    listen: tokio::net::UdpSocket,
    server: SocketAddr,
    stop: &AtomicBool,
) -> Sent {
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut sent = Sent::default();
    let mut client: Option<SocketAddr> = None;
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let r = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            listen.recv_from(&mut buf),
        )
        .await;
        let Ok(Ok((n, from))) = r else {
            continue;
        };
        let to = if from == server {
            match client {
                Some(c) => c,
                None => continue,
            }
        } else {
            client = Some(from);
            server
        };
        let d = &buf[..n];
        let _ = listen.send_to(d, to).await;
        if rng.next_u32() % 4 != 0 {
            continue;
        }
        let _ = listen.send_to(d, to).await;
        sent.replays += 1;
        let mut m = d.to_vec();
        let i = (rng.next_u32() as usize) % m.len();
        m[i] ^= 1 << (rng.next_u32() % 8);
        let _ = listen.send_to(&m, to).await;
        sent.modified += 1;
        let mut f = vec![0u8; d.len()];
        rng.fill_bytes(&mut f);
        f[0] = udrma_proto::secure::MARKER;
        f[1] = 1;
        f[16..24].copy_from_slice(&(1u64 << 40 | u64::from(rng.next_u32())).to_be_bytes());
        // A real packet's header after it, so that it parses that far.
        f[24..26].copy_from_slice(&d[24..26.min(d.len())]);
        let _ = listen.send_to(&f, to).await;
        sent.forged += 1;
    }
    sent
}

#[tokio::test(flavor = "current_thread")]
async fn replayed_modified_and_forged_datagrams_change_nothing() {
    let region = 8u64 << 20;
    let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), secured())
        .await
        .unwrap();
    let server_addr = server.local_addr();
    let middle = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let middle_addr = middle.local_addr().unwrap();
    let (stop_server, stop_mitm) = (AtomicBool::new(false), AtomicBool::new(false));
    let opts = ServeOptions {
        region,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop_server, |_| {});
    let attacking = man_in_the_middle(middle, server_addr, &stop_mitm);
    let honest = async {
        let mut c = Endpoint::bind("127.0.0.1:0".parse().unwrap(), secured())
            .await
            .unwrap();
        let r = tools::put(&mut c, middle_addr, region, true, 21).await;
        stop_mitm.store(true, Ordering::Relaxed);
        (r, c.security_stats().unwrap())
    };
    let driving = async {
        let (sent, r) = tokio::join!(attacking, honest);
        stop_server.store(true, Ordering::Relaxed);
        (sent, r)
    };
    let (served, (sent, (put, client_sec))) = tokio::join!(serving, driving);
    served.unwrap();
    let put = put.expect("the honest put survives the attacker");
    assert!(put.verified);
    let s = server.security_stats().unwrap();
    eprintln!("attacker {sent:?}\nserver {s:?}\nclient {client_sec:?}");
    assert!(sent.replays > 100 && sent.modified > 100 && sent.forged > 100);
    // Every hostile datagram toward either side was rejected by reason.
    let rejected = |x: udrma_bridge::secure::SecStats| {
        x.replayed + x.bad_tag + x.malformed + x.unknown_key + x.unsealed
    };
    assert_eq!(
        rejected(s) + rejected(client_sec),
        sent.replays + sent.modified + sent.forged,
        "server {s:?} client {client_sec:?}"
    );
    assert!(s.replayed > 0 && s.bad_tag > 0);
    // The server's memory holds exactly what the client put.
    let bytes = tools::served_bytes(&server).expect("the served region");
    let mut want = vec![0u8; region as usize];
    tools::pattern(&mut want, 21);
    assert!(bytes == want, "the served region differs from the put");
}

#[tokio::test(flavor = "current_thread")]
async fn keys_rotate_mid_transfer_without_a_lost_datagram() {
    // The server holds keys 1 and 2. The client seals a 4 MiB WRITE with
    // key 1 and moves to key 2 once 500 datagrams have left: datagrams of
    // both keys are in flight at once, and every one opens.
    let len = 4u64 << 20;
    let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), secured())
        .await
        .unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let opts = ServeOptions {
        region: len,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop, |_| {});
    let work = async {
        let mut c = Endpoint::bind("127.0.0.1:0".parse().unwrap(), secured())
            .await
            .unwrap();
        let peer = c.connect(addr).await.unwrap();
        let region = peer.region.expect("the server announces its region");
        let mr = c
            .nic_mut()
            .register(0x1000, len as usize, udrma_nic::Access::ALL);
        let mut data = vec![0u8; len as usize];
        tools::pattern(&mut data, 5);
        c.nic_mut().memory_mut().region_mut(mr).unwrap().bytes = data.into();
        let wr = c
            .post(udrma_nic::WorkRequest::write(
                peer.node,
                mr,
                0x1000,
                len,
                region.rkey,
                region.addr,
            ))
            .unwrap();
        let (mut switched_at, mut done) = (None, None);
        while done.is_none() {
            let until = std::time::Instant::now() + std::time::Duration::from_millis(5);
            c.turn(Some(until)).await.unwrap();
            let sealed = c.security_stats().unwrap().sealed;
            if switched_at.is_none() && sealed >= 500 {
                c.set_send_key(2).unwrap();
                switched_at = Some(sealed);
            }
            while let Some(e) = c.poll_event() {
                if let udrma_nic::Event::Completed { wr: w, result, .. } = e {
                    if w == wr {
                        done = Some(result);
                    }
                }
            }
        }
        // Let the last acknowledgements drain before stopping.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(20);
        while std::time::Instant::now() < until {
            c.turn(Some(until)).await.unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        (done.unwrap(), switched_at, c.security_stats().unwrap())
    };
    let (served, (result, switched_at, client)) = tokio::join!(serving, work);
    served.unwrap();
    assert_eq!(result, Ok(()));
    let switched_at = switched_at.expect("the key changed mid-transfer");
    assert!(
        switched_at < client.sealed,
        "datagrams left under both keys"
    );
    let s = server.security_stats().unwrap();
    assert_eq!(
        s.bad_tag + s.unknown_key + s.replayed + s.malformed,
        0,
        "{s:?}"
    );
    assert_eq!(
        client.bad_tag + client.unknown_key + client.replayed,
        0,
        "{client:?}"
    );
    let bytes = tools::served_bytes(&server).expect("the served region");
    let mut want = vec![0u8; len as usize];
    tools::pattern(&mut want, 5);
    assert!(
        bytes == want,
        "the WRITE landed byte-exact across the rotation"
    );
}
