//! `udrma bridge serve/put/get` and `udrma perf latency/bandwidth`: the
//! engine over real UDP sockets (crate `udrma-bridge`).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::{Args, Subcommand};
use udrma_bridge::tools::{self, ServeOptions};
use udrma_bridge::{BridgeConfig, BridgeError, Endpoint, FaultPlan};
use udrma_scenarios::file::units::{parse_size, parse_time};

/// `println!` that does not panic when the reader has gone
/// (`udrma perf latency | head`).
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// Flags every bridge command shares.
#[derive(Debug, Args, Clone)]
pub struct Common {
    /// Drop this fraction of the datagrams this process sends (a `loss`
    /// fault rule, as in scenario files).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Send this fraction of datagrams twice (a `duplicate` rule).
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Hold back this fraction of datagrams, so later ones overtake them
    /// (a `reorder` rule).
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// How long a reordered datagram is held.
    #[arg(long, default_value = "500us", value_parser = duration)]
    reorder_delay: std::time::Duration,
    /// Seed of the fault rules' decisions.
    #[arg(long, alias = "shim-seed", default_value_t = 1)]
    fault_seed: u64,
    /// Largest data payload per datagram (bytes; the datagram adds up to
    /// 68 bytes of udrma header and ICRC).
    #[arg(long, default_value_t = 1400)]
    mtu: u32,
    /// Data packets in flight at once (the engine's OP table; without
    /// `--cc` it is the only window, so match it to the path's queue).
    #[arg(long, default_value_t = 256)]
    inflight: u16,
    /// READ response bytes asked for and not yet received.
    #[arg(long, default_value = "256KiB", value_parser = size)]
    read_window: u64,
    /// HELLO asks before a peer is declared unreachable.
    #[arg(long, default_value_t = 8)]
    hello_tries: u32,
    /// Congestion controller: none, nscc, dcqcn or rccc (as `[nic] cc`).
    #[arg(long, default_value = "none")]
    cc: String,
    /// The path's bottleneck rate, told to the controller (`1Gbps`).
    #[arg(long, default_value = "10Gbps", value_parser = rate)]
    cc_rate: u64,
    /// The path's unloaded round trip, told to the controller.
    #[arg(long, default_value = "1ms", value_parser = duration)]
    cc_rtt: std::time::Duration,
    /// Restart a timed-out packet's clock when the peer acknowledged a
    /// packet sent no earlier within its timeout (as `[nic] rto_restart`):
    /// a packet only queued behind others is not resent.
    #[arg(long)]
    rto_restart: bool,
    /// Probe an operation's last packet out after two smoothed RTTs of
    /// silence, so a loss at its end costs a few round trips rather than
    /// an RTO (as `[nic] tail_probe`). On by default over sockets; the
    /// later of this and `--no-tail-probe` wins.
    #[arg(long, overrides_with = "no_tail_probe")]
    tail_probe: bool,
    /// Do not probe: every loss that no later packet reveals waits for
    /// the timer (the simulator's default).
    #[arg(long, overrides_with = "tail_probe")]
    no_tail_probe: bool,
    /// Send every packet whose timer comes due, even while the peer has
    /// answered nothing since an earlier timeout's copy (by default only
    /// that copy goes, and the rest wait for its answer: `[nic]
    /// timeout_hold`, on over sockets).
    #[arg(long)]
    no_timeout_hold: bool,
    /// Send datagrams not ECN-capable (by default they carry ECT(0), so an
    /// ECN-marking queue marks them instead of dropping them).
    #[arg(long)]
    no_ecn: bool,
    /// Send from this many consecutive UDP ports, one per entropy, so a
    /// router that hashes ports spreads the datagrams over its paths
    /// (at most 64; 1: one port, no spreading).
    #[arg(long, default_value_t = 1)]
    paths: u16,
    /// How packets take the paths when `--paths` is above 1: `reps`
    /// (reuse ports whose packets came back clean, abandon ones that saw
    /// loss or a CE mark) or `spray` (every port in turn).
    #[arg(long, default_value = "reps")]
    multipath: String,
    /// Most peers admitted at once; a stranger's valid HELLO beyond that
    /// is answered "full".
    #[arg(long, default_value_t = 256)]
    max_peers: usize,
    /// A peer admitted by its HELLO that has been silent this long, with
    /// no work in flight, is evicted.
    #[arg(long, default_value = "60s", value_parser = duration)]
    peer_idle: std::time::Duration,
    /// Authenticated mode: seal every datagram with a key from this file
    /// (lines `ID HEX`: a key id and 64 hex digits) and accept only
    /// datagrams sealed with one of its keys. The seal takes 36 bytes, so
    /// the data payload per datagram shrinks by as much.
    #[arg(long)]
    key: Option<std::path::PathBuf>,
    /// The key id to seal with (default: the file's first).
    #[arg(long)]
    key_id: Option<u8>,
    /// Spin on the socket instead of sleeping until a datagram arrives:
    /// lower latency (no scheduler wake-up), one core kept busy.
    #[arg(long)]
    busy_poll: bool,
}

impl Common {
    fn config(&self) -> Result<BridgeConfig, BridgeError> {
        let faults = FaultPlan::from_flags(
            self.loss,
            self.dup,
            self.reorder,
            self.reorder_delay,
            self.fault_seed,
        )
        .map_err(BridgeError::BadInput)?;
        if self.max_peers == 0 {
            return Err(BridgeError::BadInput(
                "--max-peers 0: must admit at least one peer".into(),
            ));
        }
        let mut cfg = BridgeConfig {
            faults,
            hello_tries: self.hello_tries,
            max_peers: self.max_peers,
            peer_idle: self.peer_idle,
            busy_poll: self.busy_poll,
            ..BridgeConfig::default()
        };
        cfg.nic.mtu_payload = self.mtu;
        cfg.nic.op_table_capacity = self.inflight;
        cfg.nic.read_window = self.read_window;
        cfg.ecn = !self.no_ecn;
        match (&self.key, self.key_id) {
            (Some(path), id) => {
                let mut ring = udrma_bridge::secure::KeyRing::load(path)?;
                if let Some(id) = id {
                    ring.set_send(id)?;
                }
                cfg.keys = Some(ring);
                let overhead = udrma_proto::secure::OVERHEAD as u32;
                if self.mtu <= overhead {
                    return Err(BridgeError::BadInput(format!(
                        "--mtu {}: the authenticated mode needs more than {overhead} bytes of it",
                        self.mtu
                    )));
                }
                cfg.nic.mtu_payload = self.mtu - overhead;
            }
            (None, Some(_)) => {
                return Err(BridgeError::BadInput("--key-id needs --key FILE".into()));
            }
            (None, None) => {}
        }
        if self.paths == 0 || self.paths > udrma_bridge::sockets::MAX_PATHS {
            return Err(BridgeError::BadInput(format!(
                "--paths {}: must be between 1 and {}",
                self.paths,
                udrma_bridge::sockets::MAX_PATHS
            )));
        }
        cfg.paths = self.paths;
        if self.paths > 1 {
            cfg.nic.multipath = match self.multipath.as_str() {
                "reps" => udrma_nic::Multipath::Reps,
                "spray" => udrma_nic::Multipath::Spray,
                other => {
                    return Err(BridgeError::BadInput(format!(
                        "--multipath {other:?}: expected reps or spray"
                    )))
                }
            };
            cfg.nic.entropies = self.paths;
        }
        let algorithm = udrma_nic::CcAlgorithm::parse(&self.cc).ok_or_else(|| {
            let known: Vec<&str> = udrma_nic::CcAlgorithm::ALL
                .iter()
                .map(|a| a.name())
                .collect();
            BridgeError::BadInput(format!(
                "--cc {:?}: unknown controller; known: {}",
                self.cc,
                known.join(", ")
            ))
        })?;
        cfg.nic.rto_restart = self.rto_restart;
        cfg.nic.tail_probe = !self.no_tail_probe;
        cfg.nic.timeout_hold = !self.no_timeout_hold;
        cfg.nic.cc = udrma_nic::CcConfig {
            algorithm,
            line_rate_bps: self.cc_rate,
            base_rtt: udrma_nic::Duration::from_nanos(
                self.cc_rtt.as_nanos().min(u128::from(u64::MAX)) as u64,
            ),
            target_delay: udrma_nic::Duration::ZERO,
            mtu_bytes: u64::from(self.mtu) + 68,
            unscheduled: 0,
            pace_slack: udrma_nic::Duration::from_millis(2),
        };
        Ok(cfg)
    }
}

fn size(s: &str) -> Result<u64, String> {
    parse_size(s)
}

fn rate(s: &str) -> Result<u64, String> {
    udrma_scenarios::file::units::parse_rate(s)
}

/// `HOST:PORT`, where HOST is an address or a name the system resolves
/// (`localhost:18791`); an IPv4 address is preferred when a name has both,
/// since the default local bind is IPv4.
pub(crate) fn host_port(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    if !s.contains(':') {
        return Err(format!(
            "{s:?} has no port: expected HOST:PORT, e.g. localhost:18791"
        ));
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(s)
        .map_err(|e| format!("cannot resolve {s:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

fn duration(s: &str) -> Result<std::time::Duration, String> {
    parse_time(s).map(|d| std::time::Duration::from_nanos(d.as_ps() / 1000))
}

/// `udrma bridge ...`
#[derive(Debug, Subcommand)]
pub enum Bridge {
    /// Register a region, announce it to peers in-band (HELLO), serve
    /// WRITE/READ and echo requests, print stats every second.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0:18791", value_parser = host_port)]
        bind: SocketAddr,
        /// Size of the served region.
        #[arg(long, default_value = "64MiB", value_parser = size)]
        region: u64,
        /// Stop after this long (default: until Ctrl-C).
        #[arg(long, value_parser = duration)]
        duration: Option<std::time::Duration>,
        /// No per-second stats lines.
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        common: Common,
    },
    /// WRITE SIZE bytes to the peer's region (and READ them back with
    /// --verify).
    Put {
        #[command(flatten)]
        client: Client,
        /// Seed of the pattern written.
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// READ SIZE bytes from the peer's region (and compare them with the
    /// pattern `serve` fills it with, with --verify).
    Get {
        #[command(flatten)]
        client: Client,
    },
}

/// Flags of put and get.
#[derive(Debug, Args, Clone)]
pub struct Client {
    /// The server.
    #[arg(long, value_parser = host_port)]
    peer: SocketAddr,
    /// Bytes to move.
    #[arg(long, value_parser = size)]
    size: u64,
    /// Prove the bytes equal (exit 1 if they do not).
    #[arg(long)]
    verify: bool,
    /// Local address to bind.
    #[arg(long, default_value = "0.0.0.0:0", value_parser = host_port)]
    bind: SocketAddr,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

/// `udrma perf ...`
#[derive(Debug, Subcommand)]
pub enum Perf {
    /// Pingpong (WRITE to the server's echo endpoint and back): one-way
    /// latency per size, like osu_latency.
    Latency {
        /// The server (`udrma bridge serve`).
        #[arg(long, value_parser = host_port)]
        peer: SocketAddr,
        /// Smallest size.
        #[arg(long, default_value = "1B", value_parser = size)]
        min_size: u64,
        /// Largest size (sizes double from the smallest).
        #[arg(long, default_value = "1MiB", value_parser = size)]
        max_size: u64,
        /// Timed round trips per size (a tenth above 64 KiB).
        #[arg(long, default_value_t = 1000)]
        iterations: u32,
        /// Untimed round trips first.
        #[arg(long, default_value_t = 100)]
        warmup: u32,
        /// Local address to bind.
        #[arg(long, default_value = "0.0.0.0:0", value_parser = host_port)]
        bind: SocketAddr,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// A window of WRITEs in flight, then wait for all: bandwidth per size,
    /// like osu_bw.
    Bandwidth {
        /// The server (`udrma bridge serve`).
        #[arg(long, value_parser = host_port)]
        peer: SocketAddr,
        /// Smallest size.
        #[arg(long, default_value = "4KiB", value_parser = size)]
        min_size: u64,
        /// Largest size (sizes double from the smallest).
        #[arg(long, default_value = "4MiB", value_parser = size)]
        max_size: u64,
        /// WRITEs outstanding at once.
        #[arg(long, default_value_t = 64)]
        window: u32,
        /// Bytes to move per size (whole windows).
        #[arg(long, default_value = "256MiB", value_parser = size)]
        bytes: u64,
        /// Local address to bind.
        #[arg(long, default_value = "0.0.0.0:0", value_parser = host_port)]
        bind: SocketAddr,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Turns a bridge failure into its exit code, with the message on stderr.
fn finish<T>(r: Result<T, BridgeError>, ok: impl FnOnce(T)) -> ExitCode {
    match r {
        Ok(v) => {
            ok(v);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// A wildcard client bind talks to a loopback peer from loopback.
fn client_bind(bind: SocketAddr, peer: SocketAddr) -> SocketAddr {
    if bind.ip().is_unspecified() && peer.ip().is_loopback() {
        SocketAddr::new(peer.ip(), bind.port())
    } else {
        bind
    }
}

/// `udrma bridge ...`
pub fn bridge(cmd: Bridge) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        Ok(match cmd {
            Bridge::Serve {
                bind,
                region,
                duration,
                quiet,
                common,
            } => {
                let stop = Arc::new(AtomicBool::new(false));
                let flag = stop.clone();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        flag.store(true, Ordering::Relaxed);
                    }
                });
                let r = async {
                    let mut ep = Endpoint::bind(bind, common.config()?).await?;
                    say!(
                        "serving {} B at {} (epoch {:#010x}, GSO {} segments, GRO {}); Ctrl-C stops",
                        region,
                        ep.local_addr(),
                        ep.nic().config().epoch,
                        ep.gso_segments(),
                        ep.gro_segments()
                    );
                    let opts = ServeOptions {
                        region,
                        duration,
                        stats_every: (!quiet).then_some(std::time::Duration::from_secs(1)),
                    };
                    let report = tools::serve(&mut ep, opts, &stop, |line| say!("{line}")).await?;
                    Ok::<_, BridgeError>((report, ep.stats(), ep.nic().stats().clone(), ep.security_stats()))
                }
                .await;
                finish(r, |(report, s, n, sec)| {
                    if let Some(x) = sec {
                        say!(
                            "authenticated: {} opened, {} sealed; rejected {} unsealed, {} malformed, {} unknown key, {} bad tag, {} replayed",
                            x.opened, x.sealed, x.unsealed, x.malformed, x.unknown_key, x.bad_tag, x.replayed
                        );
                    }
                    say!(
                        "served {:.1} s: {} peers, {} WRITEs ({} B), {} echoes, {} READs; dropped {} from unknown peers, {} bad datagrams, {} of previous lives; admission: {} retries sent, {} bad cookies, {} rate-limited, {} refused full, {} evicted",
                        report.seconds,
                        report.peers,
                        report.writes_received,
                        report.bytes_received,
                        report.echoes,
                        n.read_requests_served,
                        s.unknown_peer + s.peers_full,
                        n.rx_truncated + n.rx_bad_checksum + n.rx_bad_version + n.rx_bad_length,
                        n.stale_epoch,
                        s.hello_retries_sent,
                        s.bad_cookies,
                        s.hello_rate_limited,
                        s.refused_full,
                        s.peers_evicted
                    )
                })
            }
            Bridge::Put { client, seed } => {
                let c = client.clone();
                let r = async {
                    let mut ep = Endpoint::bind(client_bind(c.bind, c.peer), c.common.config()?).await?;
                    tools::put(&mut ep, c.peer, c.size, c.verify, seed).await
                }
                .await;
                finish(r, |rep| print_transfer(&rep, client.json))
            }
            Bridge::Get { client } => {
                let c = client.clone();
                let r = async {
                    let mut ep = Endpoint::bind(client_bind(c.bind, c.peer), c.common.config()?).await?;
                    tools::get(&mut ep, c.peer, c.size, c.verify).await
                }
                .await;
                finish(r, |rep| print_transfer(&rep, client.json))
            }
        })
    })
}

fn print_transfer(r: &tools::TransferReport, json: bool) {
    if json {
        say!("{}", serde_json::to_string_pretty(r).unwrap_or_default());
        return;
    }
    let probes = if r.tail_probes > 0 {
        format!(
            " ({} tail probes, {} spurious)",
            r.tail_probes, r.spurious_tail_probes
        )
    } else {
        String::new()
    };
    say!(
        "{} {} B {} {} in {:.3} s: {:.3} Gb/s, {} retransmits{probes}{}",
        r.op,
        r.bytes,
        if r.op == "put" { "to" } else { "from" },
        r.peer,
        r.seconds,
        r.gbps,
        r.retransmits,
        if r.verified {
            ", verified byte-exact"
        } else {
            ""
        }
    );
    let s = r.faults;
    if s.dropped + s.duplicated + s.delayed + s.corrupted > 0 {
        say!(
            "fault rules: dropped {}, duplicated {}, held back {}, corrupted {}",
            s.dropped,
            s.duplicated,
            s.delayed,
            s.corrupted
        );
    }
}

fn check_sizes(lo: u64, hi: u64) -> anyhow::Result<Vec<u64>> {
    if lo == 0 || lo > hi {
        return Err(crate::BadInput(format!(
            "--min-size {lo} / --max-size {hi}: need 1 <= min <= max"
        ))
        .into());
    }
    Ok(tools::sizes(lo, hi))
}

/// `udrma perf ...`
pub fn perf(cmd: Perf) -> anyhow::Result<ExitCode> {
    let rt = runtime()?;
    rt.block_on(async move {
        Ok(match cmd {
            Perf::Latency {
                peer,
                min_size,
                max_size,
                iterations,
                warmup,
                bind,
                json,
                common,
            } => {
                let sizes = check_sizes(min_size, max_size)?;
                let r = async {
                    let mut ep = Endpoint::bind(client_bind(bind, peer), common.config()?).await?;
                    tools::perf_latency(&mut ep, peer, &sizes, iterations, warmup).await
                }
                .await;
                finish(r, |rows| {
                    if json {
                        say!(
                            "{}",
                            serde_json::to_string_pretty(&rows).unwrap_or_default()
                        );
                        return;
                    }
                    say!("# udrma perf latency (WRITE pingpong via echo endpoint) to {peer}");
                    say!(
                        "# {:>10} {:>12} {:>12} {:>12} {:>12}",
                        "Size",
                        "Avg (us)",
                        "p50 (us)",
                        "p99 (us)",
                        "Min (us)"
                    );
                    for r in rows {
                        say!(
                            "{:>12} {:>12.2} {:>12.2} {:>12.2} {:>12.2}",
                            r.size,
                            r.avg_us,
                            r.p50_us,
                            r.p99_us,
                            r.min_us
                        );
                    }
                })
            }
            Perf::Bandwidth {
                peer,
                min_size,
                max_size,
                window,
                bytes,
                bind,
                json,
                common,
            } => {
                let sizes = check_sizes(min_size, max_size)?;
                let r = async {
                    let mut ep = Endpoint::bind(client_bind(bind, peer), common.config()?).await?;
                    tools::perf_bandwidth(&mut ep, peer, &sizes, window, bytes).await
                }
                .await;
                finish(r, |rows| {
                    if json {
                        say!(
                            "{}",
                            serde_json::to_string_pretty(&rows).unwrap_or_default()
                        );
                        return;
                    }
                    say!("# udrma perf bandwidth (window {window} WRITEs) to {peer}");
                    say!(
                        "# {:>10} {:>14} {:>10} {:>12}",
                        "Size",
                        "Bandwidth (MB/s)",
                        "Gb/s",
                        "Retransmits"
                    );
                    for r in rows {
                        say!(
                            "{:>12} {:>16.2} {:>10.3} {:>12}",
                            r.size,
                            r.mb_per_s,
                            r.gbps,
                            r.retransmits
                        );
                    }
                })
            }
        })
    })
}
