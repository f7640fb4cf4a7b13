//! A server under a flood of random, forged, stale and replayed datagrams
//! while a legitimate client moves data: everything hostile is counted and
//! dropped, the server's state stays within its bounds, and the honest
//! transfer still lands byte-exact.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use udrma_bridge::tools::{self, ServeOptions, SERVE_BASE};
use udrma_bridge::{BridgeConfig, Endpoint};
use udrma_proto::{Body, Flags, Hello, Repr};

fn header(body: Body<'_>, flags: Flags, msg_id: u32, seg: u32, count: u32, epoch: u32) -> Vec<u8> {
    Repr {
        flags,
        src_ep: 0,
        dst_ep: 0,
        op_num: 0x0001_0000 | seg,
        msg_id,
        seg_index: seg,
        seg_count: count,
        credits: 0,
        epoch,
        body,
    }
    .to_vec()
    .unwrap()
}

/// The attacker: a stranger that never says HELLO, and an admitted peer
/// that says HELLO and then misbehaves.
async fn attack(server: SocketAddr, stop: &AtomicBool) -> (u64, u64) {
    let stranger = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let insider = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(99);
    let epoch = 1000;
    let hello = header(
        Body::Hello(Hello::new(false, 1400, 1)),
        Flags::empty(),
        0,
        0,
        1,
        epoch,
    );
    insider.send_to(&hello, server).await.unwrap();
    // A stranger's ask draws a retry; the insider echoes its cookie, as
    // an honest client does, and is admitted. The reply tells it the rkey.
    let mut buf = vec![0u8; 2048];
    let mut h = loop {
        let n = insider.recv(&mut buf).await.unwrap();
        let Ok(Repr {
            body: Body::Hello(h),
            ..
        }) = Repr::parse_bytes(&buf[..n])
        else {
            panic!("no HELLO reply")
        };
        if !h.retry {
            break h;
        }
        let again = header(
            Body::Hello(Hello {
                cookie: h.cookie,
                ..Hello::new(false, 1400, 1)
            }),
            Flags::empty(),
            0,
            0,
            1,
            epoch,
        );
        insider.send_to(&again, server).await.unwrap();
    };
    h.retry = false;
    let h = h;
    let payload = vec![0xeeu8; 1024];
    let (mut from_stranger, mut from_insider) = (0u64, 0u64);
    let mut round = 0u32;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        for k in 0..64u32 {
            // Random bytes of random length, from both.
            let len = (rng.next_u32() % 1500) as usize;
            let mut junk = vec![0u8; len];
            rng.fill_bytes(&mut junk);
            let _ = stranger.send_to(&junk, server).await;
            let _ = insider.send_to(&junk, server).await;
            // Forged WRITEs into the upper half of the region: never FIRST,
            // not self-describing, fresh message ids (escape channel food).
            let msg = round * 64 + k;
            let remote_addr = SERVE_BASE + (h.region_len / 2) + u64::from(k) * 1024;
            let forged = header(
                Body::Write {
                    remote_addr,
                    rkey: h.rkey,
                    total_len: 0,
                    data: &payload,
                },
                Flags::empty(),
                msg,
                1,
                4,
                epoch,
            );
            let _ = insider.send_to(&forged, server).await;
            // The same packet replayed, and a stranger replaying it.
            let _ = insider.send_to(&forged, server).await;
            let _ = stranger.send_to(&forged, server).await;
            // A packet of the insider's "previous life".
            let stale = header(
                Body::Write {
                    remote_addr,
                    rkey: h.rkey,
                    total_len: 1024,
                    data: &payload,
                },
                Flags::FIRST | Flags::LAST,
                msg,
                0,
                1,
                epoch - 1,
            );
            let _ = insider.send_to(&stale, server).await;
            from_stranger += 2;
            from_insider += 4;
        }
        tokio::task::yield_now().await;
    }
    (from_stranger, from_insider)
}

#[tokio::test(flavor = "current_thread")]
async fn a_flood_of_random_forged_and_replayed_datagrams_is_dropped_within_bounds() {
    let region = 16u64 << 20;
    let mut server = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default())
        .await
        .unwrap();
    let addr = server.local_addr();
    let stop_server = AtomicBool::new(false);
    let stop_attack = AtomicBool::new(false);
    let opts = ServeOptions {
        region,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop_server, |_| {});
    let attacking = attack(addr, &stop_attack);
    let honest = async {
        // Let the flood start first.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let mut c = Endpoint::bind("127.0.0.1:0".parse().unwrap(), BridgeConfig::default())
            .await
            .unwrap();
        let r = tools::put(&mut c, addr, region / 2, true, 11).await;
        stop_attack.store(true, Ordering::Relaxed);
        r
    };
    let stopper = async {
        let (sent, r) = tokio::join!(attacking, honest);
        stop_server.store(true, Ordering::Relaxed);
        (sent, r)
    };
    let (served, ((stranger, insider), put)) = tokio::join!(serving, stopper);
    served.unwrap();
    let put = put.expect("the honest put survives the flood");
    assert!(put.verified);

    let b = server.stats();
    let n = server.nic().stats();
    eprintln!("stranger sent {stranger}, insider sent {insider}\nbridge {b:?}\nengine {n:?}");
    // The stranger never got past the peer table: the engine saw exactly
    // what the table let through.
    assert!(b.unknown_peer > stranger / 2, "{b:?}");
    // (Asks without a valid cookie were answered by the bridge itself.)
    assert_eq!(
        n.rx_datagrams,
        b.rx_datagrams
            - b.unknown_peer
            - b.peers_full
            - b.hello_retries_sent
            - b.hello_rate_limited
    );
    assert_eq!(
        b.hello_retries_sent, 2,
        "the insider's first ask and the client's"
    );
    assert_eq!(server.peers().len(), 2, "the insider and the honest client");
    // The insider's garbage was counted by reason.
    assert!(n.rx_truncated + n.rx_bad_checksum + n.rx_bad_version + n.rx_bad_length > 0);
    assert!(n.stale_epoch > 0, "previous-life packets dropped");
    assert!(n.escape_buffered > 0, "forged non-FIRST packets waited");
    assert!(
        n.escape_expired + n.escape_overflow > 0,
        "and were thrown away"
    );
    // Bounded state, whatever arrived.
    // The server's own memory: the lower half holds the honest put's
    // bytes, and the upper half, which every forged WRITE aimed at, still
    // holds the pattern `serve` started with.
    let bytes = tools::served_bytes(&server).expect("the served region");
    let half = (region / 2) as usize;
    let mut put_bytes = vec![0u8; half];
    tools::pattern(&mut put_bytes, 11);
    assert!(bytes[..half] == put_bytes[..], "the honest put's bytes");
    let untouched = (half as u64..region)
        .all(|i| bytes[i as usize] == tools::pattern_byte(i, tools::SERVE_SEED));
    assert!(untouched, "a forged WRITE changed the upper half");
    let occ = server.nic().occupancy();
    assert_eq!(occ.violation(), None, "{occ:?}");
    assert!(occ.escape_entries.1 <= server.config().nic.escape_capacity);
    assert!(occ.registry.1 <= server.config().nic.registry_capacity);
}
