//! `udrma bridge serve`: the served region and the echo, as an app
//! ([`ServeApp`]); [`serve`] drives it and prints the stats lines.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

use udrma_app::App;
use udrma_nic::{Access, Event, MrKey, Nic, WorkRequest, WrId};
use udrma_proto::{Instant, NodeAddr};

use super::{pattern, ECHO_EP, SERVE_BASE, SERVE_SEED};
use crate::peers::RemoteRegion;
use crate::{BridgeError, Endpoint};

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

/// The server as a host app: registers, fills and announces the region
/// when it starts, echoes WRITEs to [`ECHO_EP`] back to the writer's
/// announced region, and counts. It never finishes by itself.
#[derive(Debug)]
pub struct ServeApp {
    len: usize,
    mr: Option<MrKey>,
    /// The regions peers announced in their HELLOs.
    regions: BTreeMap<NodeAddr, RemoteRegion>,
    echoes: BTreeSet<WrId>,
    report: ServeReport,
}

impl ServeApp {
    /// A server of a `len`-byte region.
    pub fn new(len: usize) -> ServeApp {
        ServeApp {
            len,
            mr: None,
            regions: BTreeMap::new(),
            echoes: BTreeSet::new(),
            report: ServeReport::default(),
        }
    }

    /// What it did so far (without `seconds` and `peers`, which the
    /// driver knows).
    pub fn report(&self) -> &ServeReport {
        &self.report
    }

    /// Echoes a WRITE that landed at `addr..addr+len` of the served
    /// region to the same offset of the writer's announced region.
    fn echo(
        &self,
        now: Instant,
        nic: &mut Nic,
        from: NodeAddr,
        addr: u64,
        len: u64,
    ) -> Option<WrId> {
        let region = self.regions.get(&from)?;
        let offset = addr.checked_sub(SERVE_BASE)?;
        if offset.checked_add(len)? > region.len {
            return None;
        }
        let wr = WorkRequest::write(from, self.mr?, addr, len, region.rkey, region.addr + offset)
            .endpoints(ECHO_EP, ECHO_EP);
        nic.post(now, wr).ok()
    }
}

impl App for ServeApp {
    fn start(&mut self, _now: Instant, nic: &mut Nic) {
        let mr = nic.register(SERVE_BASE, self.len, Access::ALL);
        if let Some(r) = nic.memory_mut().region_mut(mr) {
            pattern(&mut r.bytes, SERVE_SEED);
        }
        nic.announce(Some(mr));
        self.mr = Some(mr);
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        match event {
            Event::Hello { from, hello, .. } => {
                if hello.rkey != 0 || hello.region_len != 0 {
                    self.regions.insert(
                        from,
                        RemoteRegion {
                            addr: hello.region_addr,
                            len: hello.region_len,
                            rkey: hello.rkey,
                        },
                    );
                } else {
                    self.regions.remove(&from);
                }
            }
            Event::WriteReceived {
                from,
                ep: to_ep,
                addr,
                len,
                ..
            } => {
                self.report.writes_received += 1;
                self.report.bytes_received += len;
                if to_ep == ECHO_EP {
                    if let Some(wr) = self.echo(now, nic, from, addr, len) {
                        self.echoes.insert(wr);
                        self.report.echoes += 1;
                    } else {
                        self.report.echo_failures += 1;
                    }
                }
            }
            Event::Completed { wr, result, .. } => {
                if self.echoes.remove(&wr) && result.is_err() {
                    self.report.echo_failures += 1;
                }
            }
            Event::PeerRestarted { .. } => self.report.peer_restarts += 1,
            Event::DataArrived { .. } | Event::Control { .. } | Event::Credits { .. } => {}
        }
    }

    fn is_done(&self) -> bool {
        false
    }
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
    ep.set_app(Box::new(ServeApp::new(len)));
    let started = std::time::Instant::now();
    let end = opts.duration.map(|d| started + d);
    let mut next_tick = opts.stats_every.map(|d| started + d);
    let mut last = (ep.stats(), 0u64);
    let served = |ep: &Endpoint| {
        ep.app::<ServeApp>()
            .map(|a| a.report().clone())
            .unwrap_or_default()
    };
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
        if let (Some(tick), Some(every)) = (next_tick, opts.stats_every) {
            if std::time::Instant::now() >= tick {
                let r = served(ep);
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
                    r.writes_received,
                    n.read_requests_served,
                    r.echoes,
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
    let mut report = served(ep);
    ep.take_app();
    report.seconds = started.elapsed().as_secs_f64();
    report.peers = ep.peers().len();
    Ok(report)
}
