//! Two bridge endpoints on loopback, in one process: the engine over real
//! sockets, with the simulator's fault rules damaging both directions.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use udrma_bridge::tools::{self, ServeOptions};
use udrma_bridge::{BridgeConfig, BridgeError, Endpoint, FaultPlan};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// 5 % loss, 5 % duplication, 20 % held back 500 µs: the flags of
/// `udrma bridge`, as fault rules.
fn faults(seed: u64) -> FaultPlan {
    FaultPlan::from_flags(
        0.05,
        0.05,
        0.20,
        std::time::Duration::from_micros(500),
        seed,
    )
    .unwrap()
}

/// The bytes of the region `serve` registered, read from the server's
/// own memory (not back through the engine under test).
fn served_bytes(server: &Endpoint) -> Vec<u8> {
    tools::served_bytes(server)
        .expect("the served region")
        .to_vec()
}

/// Runs `client` against a server until it returns, then stops the server;
/// gives back the client's result, the server's report and the served
/// region's bytes at the end.
async fn with_server<T>(
    server_cfg: BridgeConfig,
    region: u64,
    client: impl AsyncFnOnce(SocketAddr) -> T,
) -> (T, tools::ServeReport) {
    let (r, served, _) = with_server_memory(server_cfg, region, client).await;
    (r, served)
}

async fn with_server_memory<T>(
    server_cfg: BridgeConfig,
    region: u64,
    client: impl AsyncFnOnce(SocketAddr) -> T,
) -> (T, tools::ServeReport, Vec<u8>) {
    let mut server = Endpoint::bind(loopback(), server_cfg).await.unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let opts = ServeOptions {
        region,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop, |_| {});
    let driving = async {
        let r = client(addr).await;
        stop.store(true, Ordering::Relaxed);
        r
    };
    let (served, r) = tokio::join!(serving, driving);
    (r, served.unwrap(), served_bytes(&server))
}

#[tokio::test(flavor = "current_thread")]
async fn put_64_mib_byte_exact_through_loss_duplication_and_reordering() {
    let size = 64u64 << 20;
    let server_cfg = BridgeConfig {
        faults: faults(1),
        ..BridgeConfig::default()
    };
    let (report, served, memory) = with_server_memory(server_cfg, size, async |addr| {
        let mut client = Endpoint::bind(
            loopback(),
            BridgeConfig {
                faults: faults(2),
                ..BridgeConfig::default()
            },
        )
        .await
        .unwrap();
        let r = tools::put(&mut client, addr, size, true, 42).await;
        (r, client.fault_stats(), client.nic().stats().clone())
    })
    .await;
    let (r, fault_stats, nic) = report;
    let r = r.expect("64 MiB put --verify through the fault rules");
    assert!(r.verified);
    assert_eq!(r.bytes, size);
    // The rules really damaged the traffic, and the engine really repaired it.
    assert!(fault_stats.dropped > 1000, "{fault_stats:?}");
    assert!(fault_stats.duplicated > 1000, "{fault_stats:?}");
    assert!(fault_stats.delayed > 5000, "{fault_stats:?}");
    assert!(nic.retransmits > 1000, "{nic:?}");
    assert!(served.bytes_received >= size);
    // The server's own memory holds what the client wrote (put --verify
    // read it back through the same engine; this does not trust it).
    let mut expected = vec![0u8; size as usize];
    tools::pattern(&mut expected, 42);
    assert!(
        memory == expected,
        "the server's region differs from the bytes put"
    );
    eprintln!(
        "64 MiB: {:.2} s, {:.2} Gb/s, {} retransmits, faults {:?}",
        r.seconds, r.gbps, r.retransmits, fault_stats
    );
}

#[tokio::test(flavor = "current_thread")]
async fn get_verifies_the_served_pattern_and_latency_and_bandwidth_run() {
    let (r, _) = with_server(BridgeConfig::default(), 4 << 20, async |addr| {
        let mut c = Endpoint::bind(loopback(), BridgeConfig::default())
            .await
            .unwrap();
        let got = tools::get(&mut c, addr, 3 << 20, true).await.unwrap();
        let mut c = Endpoint::bind(loopback(), BridgeConfig::default())
            .await
            .unwrap();
        let lat = tools::perf_latency(&mut c, addr, &tools::sizes(1, 1 << 20), 20, 2)
            .await
            .unwrap();
        let mut c = Endpoint::bind(loopback(), BridgeConfig::default())
            .await
            .unwrap();
        let bw = tools::perf_bandwidth(&mut c, addr, &[4096, 1 << 20], 16, 8 << 20)
            .await
            .unwrap();
        (got, lat, bw)
    })
    .await;
    let (got, lat, bw) = r;
    assert!(got.verified);
    assert_eq!(lat.len(), 21);
    assert!(lat
        .iter()
        .all(|row| row.p50_us > 0.0 && row.p99_us >= row.p50_us));
    assert_eq!(bw.len(), 2);
    assert!(bw.iter().all(|row| row.gbps > 0.0));
}

#[tokio::test(flavor = "current_thread")]
async fn an_unreachable_peer_is_reported_after_bounded_hellos() {
    // A bound socket that never answers.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut c = Endpoint::bind(
        loopback(),
        BridgeConfig {
            hello_tries: 3,
            hello_interval: std::time::Duration::from_millis(20),
            ..BridgeConfig::default()
        },
    )
    .await
    .unwrap();
    let t0 = std::time::Instant::now();
    let err = tools::put(&mut c, addr, 4096, true, 1).await.unwrap_err();
    assert!(
        matches!(err, BridgeError::Unreachable { tries: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("unreachable"));
    assert_eq!(err.exit_code(), 1);
    assert!(t0.elapsed() < std::time::Duration::from_secs(5));
}

#[tokio::test(flavor = "current_thread")]
async fn a_put_larger_than_the_served_region_is_refused_as_bad_input() {
    let (r, _) = with_server(BridgeConfig::default(), 1 << 20, async |addr| {
        let mut c = Endpoint::bind(loopback(), BridgeConfig::default())
            .await
            .unwrap();
        tools::put(&mut c, addr, 2 << 20, false, 1).await
    })
    .await;
    let err = r.unwrap_err();
    assert!(matches!(err, BridgeError::TooLarge { .. }), "{err}");
    assert_eq!(err.exit_code(), 2);
}

#[tokio::test(flavor = "current_thread")]
async fn a_client_restarted_on_the_same_port_is_a_new_life_not_a_stale_one() {
    let mut server = Endpoint::bind(loopback(), BridgeConfig::default())
        .await
        .unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let serving = tools::serve(&mut server, ServeOptions::default(), &stop, |_| {});
    let driving = async {
        let mut cfg = BridgeConfig::default();
        cfg.nic.epoch = 500;
        let mut first = Endpoint::bind(loopback(), cfg.clone()).await.unwrap();
        let port = first.local_addr();
        tools::put(&mut first, addr, 1 << 20, true, 1)
            .await
            .unwrap();
        drop(first);
        // The same address, a new life: its message ids start at 1 again,
        // and the server's tombstones for the old life must not eat them.
        cfg.nic.epoch = 501;
        let mut second = Endpoint::bind(port, cfg).await.unwrap();
        let r = tools::put(&mut second, addr, 1 << 20, true, 2).await;
        stop.store(true, Ordering::Relaxed);
        r
    };
    let (served, r) = tokio::join!(serving, driving);
    assert!(
        r.unwrap().verified,
        "the second life's bytes landed and read back"
    );
    let served = served.unwrap();
    assert_eq!(served.peer_restarts, 1);
    assert_eq!(server.nic().stats().peer_restarts, 1);
}

#[tokio::test(flavor = "current_thread")]
async fn a_put_over_four_source_ports_uses_them_all_and_the_server_knows_them() {
    // The client sends from 4 consecutive ports (one per entropy, REPS);
    // its HELLO says so, and the server takes datagrams from all 4 as the
    // same peer. Loss on both sides makes REPS abandon and reuse ports.
    let size = 8u64 << 20;
    let server_cfg = BridgeConfig {
        faults: faults(3),
        ..BridgeConfig::default()
    };
    let mut client_cfg = BridgeConfig {
        faults: faults(4),
        paths: 4,
        ..BridgeConfig::default()
    };
    client_cfg.nic.multipath = udrma_nic::Multipath::Reps;
    client_cfg.nic.entropies = 4;
    let mut server = Endpoint::bind(loopback(), server_cfg).await.unwrap();
    let addr = server.local_addr();
    let stop = AtomicBool::new(false);
    let opts = ServeOptions {
        region: size,
        ..ServeOptions::default()
    };
    let serving = tools::serve(&mut server, opts, &stop, |_| {});
    let driving = async {
        let mut client = Endpoint::bind(loopback(), client_cfg).await.unwrap();
        let ports = client.local_ports();
        let r = tools::put(&mut client, addr, size, true, 7).await;
        stop.store(true, Ordering::Relaxed);
        (r, ports, client.tx_by_path().to_vec())
    };
    let (served, report) = tokio::join!(serving, driving);
    assert_eq!(served.unwrap().peers, 1, "4 ports, one peer");
    let stats = server.stats();
    assert_eq!(stats.alias_ports, 3, "{stats:?}");
    assert_eq!(stats.unknown_peer, 0, "{stats:?}");
    let memory = served_bytes(&server);
    let (r, ports, per_path) = report;
    let r = r.expect("8 MiB put --verify over 4 ports");
    assert!(r.verified);
    assert_eq!(r.paths, 4);
    assert_eq!(ports.len(), 4);
    assert!(ports.windows(2).all(|w| w[1] == w[0] + 1), "{ports:?}");
    // Every port carried a fair share of the data.
    let total: u64 = per_path.iter().sum();
    assert!(
        per_path.iter().all(|n| *n * 8 > total),
        "each of 4 ports carries more than 1/8: {per_path:?}"
    );
    assert!(r.entropies_abandoned > 0, "loss abandons ports: {r:?}");
    let mut expected = vec![0u8; size as usize];
    tools::pattern(&mut expected, 7);
    assert!(memory == expected, "the server's region differs");
}

/// `--busy-poll` on both sides: the spinning driver reads the socket
/// behind the runtime's back, so this is the story that it still sees
/// every datagram and every deadline (retransmits through 5 % loss, and a
/// pingpong that needs each reply to be noticed).
#[tokio::test(flavor = "current_thread")]
async fn busy_polling_endpoints_put_byte_exact_through_faults_and_pingpong() {
    let size = 4u64 << 20;
    let busy = |f: FaultPlan| BridgeConfig {
        faults: f,
        busy_poll: true,
        ..BridgeConfig::default()
    };
    let (report, _, memory) = with_server_memory(busy(faults(3)), size, async |addr| {
        let mut client = Endpoint::bind(loopback(), busy(faults(4))).await.unwrap();
        let r = tools::put(&mut client, addr, size, true, 7).await;
        let lat = tools::perf_latency(&mut client, addr, &[1, 64], 50, 5).await;
        (r, lat, client.fault_stats(), client.nic().stats().clone())
    })
    .await;
    let (r, lat, fault_stats, nic) = report;
    let r = r.expect("4 MiB put --verify, busy-polling");
    assert!(r.verified);
    assert!(fault_stats.dropped > 10, "{fault_stats:?}");
    assert!(nic.retransmits > 10, "{nic:?}");
    let mut expected = vec![0u8; size as usize];
    tools::pattern(&mut expected, 7);
    // (The pingpong then wrote its 64 bytes over the start.)
    assert!(
        memory[64..] == expected[64..],
        "the server's region differs"
    );
    let lat = lat.expect("pingpong, busy-polling");
    assert_eq!(lat.len(), 2);
}

/// A WRITE gathered from three blocks, on a NIC whose cost model prices a
/// DMA setup per extra block at 20 ms: the datagram leaves the socket
/// only once its gather is done, as it leaves the fabric's port (the
/// timer rule, docs/engine.md). Sent at once, its ACK came back before
/// the engine counted it as gone, and the round trip was taken as zero.
#[tokio::test(flavor = "current_thread")]
async fn a_gathered_write_leaves_the_socket_only_once_its_gather_is_done() {
    use udrma_nic::{Access, CostModel, Event, Sge, Sgl, WorkRequest};
    let setup = std::time::Duration::from_millis(20);
    let ((took, srtt), _) = with_server(BridgeConfig::default(), 1 << 20, async |addr| {
        let mut cfg = BridgeConfig::default();
        cfg.nic.cost = CostModel {
            dma_setup: udrma_nic::Duration::from_nanos(setup.as_nanos() as u64),
            ..CostModel::ZERO
        };
        let mut client = Endpoint::bind(loopback(), cfg).await.unwrap();
        let peer = client.connect(addr).await.unwrap();
        let region = peer.region.expect("the server announced its region");
        let base = 1 << 30;
        let key = client.nic_mut().register(base, 4096, Access::ALL);
        let blocks = (0..3)
            .map(|i| Sge {
                key,
                addr: base + 1000 * i,
                len: 100,
            })
            .collect();
        let wr = WorkRequest::write(
            peer.node,
            udrma_nic::MrKey(0),
            0,
            0,
            region.rkey,
            region.addr,
        )
        .gather(Sgl::new(blocks).unwrap());
        let posted = std::time::Instant::now();
        let id = client.post(wr).unwrap();
        loop {
            client
                .turn(Some(std::time::Instant::now() + setup))
                .await
                .unwrap();
            let mut done = None;
            while let Some(e) = client.poll_event() {
                if let Event::Completed { wr, result, .. } = e {
                    if wr == id {
                        done = Some(result);
                    }
                }
            }
            if let Some(result) = done {
                result.expect("the WRITE completed");
                break;
            }
        }
        let srtt = client
            .nic()
            .rtt(peer.node)
            .and_then(|r| r.srtt())
            .expect("a round trip was sampled");
        // Held for its NIC, not by a fault rule.
        assert_eq!(client.fault_stats().delayed, 0);
        (posted.elapsed(), srtt)
    })
    .await;
    assert!(took >= 2 * setup, "completed {took:?} after posting");
    assert!(srtt > udrma_nic::Duration::ZERO, "a round trip of {srtt:?}");
}
