//! What `udrma bridge serve/put/get` and `udrma perf latency/bandwidth`
//! do, as library functions over an [`Endpoint`] (so tests run them
//! in-process).
//!
//! Conventions between the two sides, all in-band:
//! - the server registers one region at [`SERVE_BASE`], fills it with
//!   [`pattern`] (seed [`SERVE_SEED`]) and announces it in its HELLO reply;
//! - a client registers its own region at [`CLIENT_BASE`] and announces it
//!   in its HELLO ask;
//! - endpoint 0 is plain memory; a WRITE to endpoint [`ECHO_EP`] is echoed:
//!   the server WRITEs the same bytes back to the same offset of the
//!   client's announced region the moment its registry sees the WRITE
//!   complete (the pingpong of `perf latency`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use udrma_nic::{Access, Event, MrKey, WorkRequest, WrId};
use udrma_proto::NodeAddr;

use crate::peers::RemoteRegion;
use crate::{BridgeError, Endpoint};

/// Address of the region `serve` registers.
pub const SERVE_BASE: u64 = 0x1_0000_0000;
/// Address of the region clients register.
pub const CLIENT_BASE: u64 = 0x2_0000_0000;
/// The endpoint whose WRITEs the server echoes.
pub const ECHO_EP: u16 = 1;
/// Seed of the pattern `serve` fills its region with.
pub const SERVE_SEED: u64 = 0;

/// The test pattern: byte `i` of a buffer filled with `seed` (a
/// SplitMix64 of the 8-byte word index, so every offset and seed differ).
pub fn pattern_byte(i: u64, seed: u64) -> u8 {
    let mut z = (i / 8)
        .wrapping_add(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    z.to_le_bytes()[(i % 8) as usize]
}

/// Fills `buf` (standing at offset 0) with the pattern of `seed`.
pub fn pattern(buf: &mut [u8], seed: u64) {
    for (w, chunk) in buf.chunks_mut(8).enumerate() {
        let base = w as u64 * 8;
        for (j, b) in chunk.iter_mut().enumerate() {
            *b = pattern_byte(base + j as u64, seed);
        }
    }
}

/// Compares `got` with `expected`; the error names the first difference.
pub fn compare(expected: &[u8], got: &[u8]) -> Result<(), BridgeError> {
    if expected == got {
        return Ok(());
    }
    let mut first = None;
    let mut count = 0u64;
    for (i, (e, g)) in expected.iter().zip(got).enumerate() {
        if e != g {
            count += 1;
            first.get_or_insert((i as u64, *e, *g));
        }
    }
    count += expected.len().abs_diff(got.len()) as u64;
    let (offset, expected, got) = first.unwrap_or((expected.len().min(got.len()) as u64, 0, 0));
    Err(BridgeError::Mismatch {
        offset,
        count,
        expected,
        got,
    })
}

/// How `serve` runs.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Bytes of the served region.
    pub region: u64,
    /// Stop after this long (`None`: until stopped).
    pub duration: Option<std::time::Duration>,
    /// Print a stats line this often (`None`: quiet).
    pub stats_every: Option<std::time::Duration>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            region: 64 << 20,
            duration: None,
            stats_every: None,
        }
    }
}

/// What a `serve` run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ServeReport {
    /// Seconds served.
    pub seconds: f64,
    /// Peers admitted.
    pub peers: usize,
    /// WRITE operations received (registry completions).
    pub writes_received: u64,
    /// Bytes they carried.
    pub bytes_received: u64,
    /// Echo WRITEs sent back.
    pub echoes: u64,
    /// Echo WRITEs that failed.
    pub echo_failures: u64,
    /// Peers seen to restart.
    pub peer_restarts: u64,
}

/// Registers and announces the served region, then serves WRITE, READ and
/// echo requests until `stop` is set or `duration` passes. `out` receives
/// one stats line per `stats_every`.
pub async fn serve(
    ep: &mut Endpoint,
    opts: ServeOptions,
    stop: &AtomicBool,
    mut out: impl FnMut(&str),
) -> Result<ServeReport, BridgeError> {
    let len = usize::try_from(opts.region)
        .ok()
        .filter(|l| *l > 0)
        .ok_or_else(|| {
            BridgeError::BadInput(format!("--region {}: must be 1 B or more", opts.region))
        })?;
    let mr = ep.nic_mut().register(SERVE_BASE, len, Access::ALL);
    if let Some(r) = ep.nic_mut().memory_mut().region_mut(mr) {
        pattern(&mut r.bytes, SERVE_SEED);
    }
    ep.nic_mut().announce(Some(mr));
    let started = std::time::Instant::now();
    let end = opts.duration.map(|d| started + d);
    let mut next_tick = opts.stats_every.map(|d| started + d);
    let mut report = ServeReport::default();
    let mut last = (ep.stats(), 0u64);
    let mut echoes: std::collections::BTreeSet<WrId> = Default::default();
    while !stop.load(Ordering::Relaxed) {
        let now = std::time::Instant::now();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        // Wake at least every 100 ms to notice `stop`.
        let until = [
            end,
            next_tick,
            Some(now + std::time::Duration::from_millis(100)),
        ]
        .into_iter()
        .flatten()
        .min();
        ep.turn(until).await?;
        while let Some(e) = ep.poll_event() {
            match e {
                Event::WriteReceived {
                    from,
                    ep: to_ep,
                    addr,
                    len,
                    ..
                } => {
                    report.writes_received += 1;
                    report.bytes_received += len;
                    if to_ep == ECHO_EP {
                        if let Some(wr) = echo(ep, mr, from, addr, len) {
                            echoes.insert(wr);
                            report.echoes += 1;
                        } else {
                            report.echo_failures += 1;
                        }
                    }
                }
                Event::Completed { wr, result, .. } if echoes.remove(&wr) && result.is_err() => {
                    report.echo_failures += 1;
                }
                Event::PeerRestarted { .. } => report.peer_restarts += 1,
                _ => {}
            }
        }
        if let (Some(tick), Some(every)) = (next_tick, opts.stats_every) {
            if std::time::Instant::now() >= tick {
                let s = ep.stats();
                let n = ep.nic().stats();
                let secs = every.as_secs_f64();
                let rx_mbps = (s.rx_bytes - last.0.rx_bytes) as f64 * 8.0 / secs / 1e6;
                let tx_mbps = (s.tx_bytes - last.0.tx_bytes) as f64 * 8.0 / secs / 1e6;
                let dropped = s.unknown_peer
                    + s.peers_full
                    + n.rx_truncated
                    + n.rx_bad_checksum
                    + n.rx_bad_version
                    + n.rx_bad_length
                    + n.stale_epoch;
                out(&format!(
                    "[{:7.1}s] peers {} | rx {:8} dgrams {:9.1} Mb/s | tx {:8} dgrams {:9.1} Mb/s | writes {} reads {} echoes {} | dup {} retx {} | dropped {} (+{})",
                    started.elapsed().as_secs_f64(),
                    ep.peers().len(),
                    s.rx_datagrams - last.0.rx_datagrams,
                    rx_mbps,
                    s.tx_datagrams - last.0.tx_datagrams,
                    tx_mbps,
                    report.writes_received,
                    n.read_requests_served,
                    report.echoes,
                    n.dup_dropped + n.stale_dropped,
                    n.retransmits,
                    dropped,
                    dropped - last.1,
                ));
                last = (s, dropped);
                next_tick = Some(tick + every);
            }
        }
    }
    report.seconds = started.elapsed().as_secs_f64();
    report.peers = ep.peers().len();
    Ok(report)
}

/// Echoes a WRITE that landed at `addr..addr+len` of the served region to
/// the same offset of the writer's announced region.
fn echo(ep: &mut Endpoint, mr: MrKey, from: NodeAddr, addr: u64, len: u64) -> Option<WrId> {
    let region = ep.peer(from)?.region?;
    let offset = addr.checked_sub(SERVE_BASE)?;
    if offset.checked_add(len)? > region.len {
        return None;
    }
    let wr = WorkRequest::write(from, mr, addr, len, region.rkey, region.addr + offset)
        .endpoints(ECHO_EP, ECHO_EP);
    ep.post(wr).ok()
}

/// A client's connection: its own region and the peer's.
struct Session {
    node: NodeAddr,
    local: MrKey,
    remote: RemoteRegion,
}

impl Session {
    /// A WRITE of the first `size` local bytes to `offset` in the peer's
    /// region.
    fn write(&self, size: u64, offset: u64) -> WorkRequest {
        WorkRequest::write(
            self.node,
            self.local,
            CLIENT_BASE,
            size,
            self.remote.rkey,
            self.remote.addr + offset,
        )
    }

    /// A READ of the first `size` bytes of the peer's region into `local`
    /// at `local_addr`.
    fn read(&self, size: u64, local: MrKey, local_addr: u64) -> WorkRequest {
        WorkRequest::read(
            self.node,
            local,
            local_addr,
            size,
            self.remote.rkey,
            self.remote.addr,
        )
    }
}

/// Turns a failed completion into the error that names the request.
fn failed(what: impl Into<String>) -> impl FnOnce(udrma_nic::WcError) -> BridgeError {
    let what = what.into();
    move |error| BridgeError::Transfer { what, error }
}

/// Registers a client region of `len` bytes filled with `seed`'s pattern,
/// announces it, and says HELLO to `peer`.
async fn open(
    ep: &mut Endpoint,
    peer: SocketAddr,
    len: u64,
    seed: u64,
) -> Result<Session, BridgeError> {
    let n = usize::try_from(len.max(1))
        .map_err(|_| BridgeError::BadInput(format!("--size {len}: too large for this host")))?;
    let local = ep.nic_mut().register(CLIENT_BASE, n, Access::ALL);
    if let Some(r) = ep.nic_mut().memory_mut().region_mut(local) {
        pattern(&mut r.bytes, seed);
    }
    ep.nic_mut().announce(Some(local));
    let p = ep.connect(peer).await?;
    let remote = p.region.ok_or(BridgeError::NoRegion(peer))?;
    if len > remote.len {
        return Err(BridgeError::TooLarge {
            size: len,
            region: remote.len,
        });
    }
    Ok(Session {
        node: p.node,
        local,
        remote,
    })
}

/// Drives the endpoint until `wr` completes; other events are dropped.
async fn wait(ep: &mut Endpoint, wr: WrId, what: &str) -> Result<(), BridgeError> {
    loop {
        while let Some(e) = ep.poll_event() {
            if let Event::Completed { wr: w, result, .. } = e {
                if w == wr {
                    return result.map_err(failed(what));
                }
            }
        }
        ep.turn(None).await?;
    }
}

/// What a put or get did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TransferReport {
    /// "put" or "get".
    pub op: &'static str,
    /// The peer.
    pub peer: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds the transfer took (verification excluded).
    pub seconds: f64,
    /// Goodput in Gb/s.
    pub gbps: f64,
    /// Whether the bytes were verified (and matched: a mismatch is an error).
    pub verified: bool,
    /// Data packets sent again.
    pub retransmits: u64,
    /// Retransmit timer expiries.
    pub timeouts: u64,
    /// NACKs received (by syndrome name).
    pub nacks: std::collections::BTreeMap<String, u64>,
    /// Duplicate packets the receiver dropped here.
    pub dup_dropped: u64,
    /// What the egress fault rules did.
    pub faults: crate::EgressStats,
}

fn report(
    ep: &Endpoint,
    op: &'static str,
    peer: SocketAddr,
    bytes: u64,
    secs: f64,
    verified: bool,
) -> TransferReport {
    TransferReport {
        op,
        peer: peer.to_string(),
        bytes,
        seconds: secs,
        gbps: bytes as f64 * 8.0 / secs.max(1e-9) / 1e9,
        verified,
        retransmits: ep.nic().stats().retransmits,
        timeouts: ep.nic().stats().timeouts,
        nacks: ep
            .nic()
            .stats()
            .nacks_received
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
        dup_dropped: ep.nic().stats().dup_dropped,
        faults: ep.fault_stats(),
    }
}

/// WRITEs `size` bytes of `seed`'s pattern to offset 0 of the peer's
/// region; with `verify`, READs them back and compares.
pub async fn put(
    ep: &mut Endpoint,
    peer: SocketAddr,
    size: u64,
    verify: bool,
    seed: u64,
) -> Result<TransferReport, BridgeError> {
    let s = open(ep, peer, size, seed).await?;
    let t0 = std::time::Instant::now();
    let wr = ep.post(s.write(size, 0))?;
    wait(ep, wr, "WRITE").await?;
    let secs = t0.elapsed().as_secs_f64();
    if verify {
        let n = size as usize;
        let back = ep
            .nic_mut()
            .register(CLIENT_BASE + (1 << 40), n.max(1), Access::ALL);
        let wr = ep.post(s.read(size, back, CLIENT_BASE + (1 << 40)))?;
        wait(ep, wr, "READ (verification)").await?;
        let mem = ep.nic().memory();
        let sent = &mem.region(s.local).map(|r| &r.bytes[..n]).unwrap_or(&[]);
        let got = &mem.region(back).map(|r| &r.bytes[..n]).unwrap_or(&[]);
        compare(sent, got)?;
    }
    Ok(report(ep, "put", peer, size, secs, verify))
}

/// READs `size` bytes from offset 0 of the peer's region; with `verify`,
/// compares them with the pattern `serve` filled the region with (so it
/// fails if the region was written since the server started).
pub async fn get(
    ep: &mut Endpoint,
    peer: SocketAddr,
    size: u64,
    verify: bool,
) -> Result<TransferReport, BridgeError> {
    let s = open(ep, peer, size, 1).await?;
    let t0 = std::time::Instant::now();
    let wr = ep.post(s.read(size, s.local, CLIENT_BASE))?;
    wait(ep, wr, "READ").await?;
    let secs = t0.elapsed().as_secs_f64();
    if verify {
        let n = size as usize;
        let mut expected = vec![0u8; n];
        pattern(&mut expected, SERVE_SEED);
        let got = ep
            .nic()
            .memory()
            .region(s.local)
            .map(|r| &r.bytes[..n])
            .unwrap_or(&[]);
        compare(&expected, got)?;
    }
    Ok(report(ep, "get", peer, size, secs, verify))
}

/// One row of `perf latency`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LatencyRow {
    /// Message size in bytes.
    pub size: u64,
    /// Round trips timed.
    pub iterations: u32,
    /// Mean one-way latency (half the round trip), µs.
    pub avg_us: f64,
    /// Median one-way latency, µs.
    pub p50_us: f64,
    /// 99th percentile one-way latency, µs.
    pub p99_us: f64,
    /// Smallest one-way latency, µs.
    pub min_us: f64,
}

/// One row of `perf bandwidth`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BandwidthRow {
    /// Message size in bytes.
    pub size: u64,
    /// WRITEs outstanding at once.
    pub window: u32,
    /// Windows timed.
    pub iterations: u32,
    /// Seconds for all of them.
    pub seconds: f64,
    /// MB/s (10^6 bytes per second), as OSU prints.
    pub mb_per_s: f64,
    /// Gb/s.
    pub gbps: f64,
    /// Data packets retransmitted during the row.
    pub retransmits: u64,
}

/// Pingpong over the echo endpoint: for each size, `warmup` untimed and
/// `iterations` timed round trips of a WRITE to the server and its echo.
pub async fn perf_latency(
    ep: &mut Endpoint,
    peer: SocketAddr,
    sizes: &[u64],
    iterations: u32,
    warmup: u32,
) -> Result<Vec<LatencyRow>, BridgeError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let s = open(ep, peer, max, 3).await?;
    let mut rows = Vec::new();
    for &size in sizes {
        // Fewer round trips for large messages (as OSU does).
        let iters = if size > 64 << 10 {
            iterations.div_ceil(10).max(1)
        } else {
            iterations.max(1)
        };
        let mut samples = Vec::with_capacity(iters as usize);
        let mut outstanding = std::collections::BTreeSet::new();
        for i in 0..warmup + iters {
            let t0 = std::time::Instant::now();
            let wr = ep.post(s.write(size, 0).endpoints(ECHO_EP, ECHO_EP))?;
            outstanding.insert(wr);
            let mut echoed = 0u64;
            while echoed < size {
                ep.turn(None).await?;
                while let Some(e) = ep.poll_event() {
                    match e {
                        Event::WriteReceived {
                            from,
                            ep: e_ep,
                            len,
                            ..
                        } if from == s.node && e_ep == ECHO_EP => {
                            echoed += len;
                        }
                        Event::Completed { wr, result, .. } => {
                            outstanding.remove(&wr);
                            result.map_err(failed(format!("pingpong WRITE of {size} B")))?;
                        }
                        _ => {}
                    }
                }
            }
            if i >= warmup {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
        }
        // Let the last WRITEs' completions arrive before the next size.
        while !outstanding.is_empty() {
            let w = *outstanding.iter().next().expect("not empty");
            wait(ep, w, "pingpong WRITE").await?;
            outstanding.remove(&w);
        }
        samples.sort_by(f64::total_cmp);
        let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
        rows.push(LatencyRow {
            size,
            iterations: iters,
            avg_us: samples.iter().sum::<f64>() / samples.len() as f64,
            p50_us: pick(0.5),
            p99_us: pick(0.99),
            min_us: samples[0],
        });
    }
    Ok(rows)
}

/// Window bandwidth (osu_bw's shape): for each size, `window` WRITEs
/// posted back to back, then wait for all; repeated until about `bytes`
/// have moved.
pub async fn perf_bandwidth(
    ep: &mut Endpoint,
    peer: SocketAddr,
    sizes: &[u64],
    window: u32,
    bytes: u64,
) -> Result<Vec<BandwidthRow>, BridgeError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let s = open(ep, peer, max, 5).await?;
    let mut rows = Vec::new();
    let window = window.max(1);
    for &size in sizes {
        let per_window = size * u64::from(window);
        let iters = bytes.div_ceil(per_window).max(1) as u32;
        let slots = (s.remote.len / size.max(1)).max(1);
        let retx0 = ep.nic().stats().retransmits;
        let t0 = std::time::Instant::now();
        for _ in 0..iters {
            let mut pending = std::collections::BTreeSet::new();
            for k in 0..u64::from(window) {
                let wr = ep.post(s.write(size, (k % slots) * size))?;
                pending.insert(wr);
            }
            while !pending.is_empty() {
                ep.turn(None).await?;
                while let Some(e) = ep.poll_event() {
                    if let Event::Completed { wr, result, .. } = e {
                        if pending.remove(&wr) {
                            result.map_err(failed(format!("bandwidth WRITE of {size} B")))?;
                        }
                    }
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64();
        let moved = per_window * u64::from(iters);
        rows.push(BandwidthRow {
            size,
            window,
            iterations: iters,
            seconds: secs,
            mb_per_s: moved as f64 / secs / 1e6,
            gbps: moved as f64 * 8.0 / secs / 1e9,
            retransmits: ep.nic().stats().retransmits - retx0,
        });
    }
    Ok(rows)
}

/// Powers of two from `lo` to `hi` inclusive.
pub fn sizes(lo: u64, hi: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = lo.max(1);
    while s <= hi {
        v.push(s);
        s *= 2;
    }
    v
}
