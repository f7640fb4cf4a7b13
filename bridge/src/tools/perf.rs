//! `udrma perf latency/bandwidth`: OSU-shaped loops against a server, as
//! apps ([`LatencyApp`], [`BandwidthApp`]) the client's endpoint drives.
//! They time with the engine's `now`, which on the bridge is real time.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use udrma_app::App;
use udrma_nic::{Event, Nic, WcError, WrId};
use udrma_proto::{Duration, Instant};

use super::{drive, open, Session, ECHO_EP};
use crate::{BridgeError, Endpoint};

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

fn micros(d: Duration) -> f64 {
    d.as_ps() as f64 / 1e6
}

/// A failed WRITE, named.
fn failed(size: u64, what: &str, error: WcError) -> BridgeError {
    BridgeError::Transfer {
        what: format!("{what} of {size} B"),
        error,
    }
}

/// Ping-pong over the echo endpoint: for each size, untimed and timed
/// round trips of a WRITE to the server and its echo back.
#[derive(Debug)]
pub struct LatencyApp {
    s: Session,
    sizes: Vec<u64>,
    iterations: u32,
    warmup: u32,
    /// Which size, which round trip of it.
    size_i: usize,
    round: u32,
    /// This round trip's start and the echoed bytes so far.
    t0: Instant,
    echoed: u64,
    /// WRITEs not yet completed (a size ends when they all have).
    outstanding: BTreeSet<WrId>,
    samples: Vec<f64>,
    rows: Vec<LatencyRow>,
    error: Option<BridgeError>,
}

impl LatencyApp {
    fn new(s: Session, sizes: &[u64], iterations: u32, warmup: u32) -> LatencyApp {
        LatencyApp {
            s,
            sizes: sizes.to_vec(),
            iterations,
            warmup,
            size_i: 0,
            round: 0,
            t0: Instant::ZERO,
            echoed: 0,
            outstanding: BTreeSet::new(),
            samples: Vec::new(),
            rows: Vec::new(),
            error: None,
        }
    }

    /// Round trips of the current size: fewer for large messages (as OSU
    /// does).
    fn rounds(&self) -> u32 {
        let size = self.sizes.get(self.size_i).copied().unwrap_or(0);
        if size > 64 << 10 {
            self.iterations.div_ceil(10).max(1)
        } else {
            self.iterations.max(1)
        }
    }

    fn ping(&mut self, now: Instant, nic: &mut Nic) {
        let Some(&size) = self.sizes.get(self.size_i) else {
            return;
        };
        self.t0 = now;
        self.echoed = 0;
        match nic.post(now, self.s.write(size, 0).endpoints(ECHO_EP, ECHO_EP)) {
            Ok(wr) => {
                self.outstanding.insert(wr);
            }
            Err(e) => self.error = Some(e.into()),
        }
    }

    /// The echo is back: records the sample, then the next round trip,
    /// or (once the size's WRITEs all completed) the row.
    fn echoed(&mut self, now: Instant, nic: &mut Nic) {
        if self.round >= self.warmup {
            self.samples.push(micros(now - self.t0) / 2.0);
        }
        self.round += 1;
        if self.round < self.warmup + self.rounds() {
            self.ping(now, nic);
        } else {
            self.next_size(now, nic);
        }
    }

    fn next_size(&mut self, now: Instant, nic: &mut Nic) {
        let rounds = self.warmup + self.rounds();
        if self.round < rounds || !self.outstanding.is_empty() {
            return;
        }
        let mut samples = std::mem::take(&mut self.samples);
        samples.sort_by(f64::total_cmp);
        let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
        self.rows.push(LatencyRow {
            size: self.sizes[self.size_i],
            iterations: self.rounds(),
            avg_us: samples.iter().sum::<f64>() / samples.len() as f64,
            p50_us: pick(0.5),
            p99_us: pick(0.99),
            min_us: samples[0],
        });
        self.size_i += 1;
        self.round = 0;
        self.ping(now, nic);
    }
}

impl App for LatencyApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        self.ping(now, nic);
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        let size = self.sizes.get(self.size_i).copied().unwrap_or(0);
        match event {
            Event::WriteReceived { from, ep, len, .. } if from == self.s.node && ep == ECHO_EP => {
                self.echoed += len;
                if self.echoed >= size {
                    self.echoed(now, nic);
                }
            }
            Event::Completed { wr, result, .. } if self.outstanding.remove(&wr) => {
                if let Err(e) = result {
                    self.error = Some(failed(size, "pingpong WRITE", e));
                    return;
                }
                // Let the last WRITEs' completions arrive before the next
                // size.
                self.next_size(now, nic);
            }
            _ => {}
        }
    }

    fn is_done(&self) -> bool {
        self.error.is_some() || self.size_i >= self.sizes.len()
    }
}

/// Window bandwidth (osu_bw's shape): for each size, `window` WRITEs
/// posted back to back, then a wait for all; repeated until about
/// `bytes` have moved.
#[derive(Debug)]
pub struct BandwidthApp {
    s: Session,
    sizes: Vec<u64>,
    window: u32,
    bytes: u64,
    size_i: usize,
    /// Windows left of this size.
    windows_left: u32,
    pending: BTreeSet<WrId>,
    t0: Instant,
    retx0: u64,
    rows: Vec<BandwidthRow>,
    error: Option<BridgeError>,
}

impl BandwidthApp {
    fn new(s: Session, sizes: &[u64], window: u32, bytes: u64) -> BandwidthApp {
        BandwidthApp {
            s,
            sizes: sizes.to_vec(),
            window: window.max(1),
            bytes,
            size_i: 0,
            windows_left: 0,
            pending: BTreeSet::new(),
            t0: Instant::ZERO,
            retx0: 0,
            rows: Vec::new(),
            error: None,
        }
    }

    fn windows(&self, size: u64) -> u32 {
        self.bytes.div_ceil(size * u64::from(self.window)).max(1) as u32
    }

    /// Starts the current size.
    fn begin(&mut self, now: Instant, nic: &mut Nic) {
        let Some(&size) = self.sizes.get(self.size_i) else {
            return;
        };
        self.windows_left = self.windows(size);
        self.t0 = now;
        self.retx0 = nic.stats().retransmits;
        self.post_window(now, nic);
    }

    fn post_window(&mut self, now: Instant, nic: &mut Nic) {
        let size = self.sizes[self.size_i];
        let slots = (self.s.remote.len / size.max(1)).max(1);
        self.windows_left -= 1;
        for k in 0..u64::from(self.window) {
            match nic.post(now, self.s.write(size, (k % slots) * size)) {
                Ok(wr) => {
                    self.pending.insert(wr);
                }
                Err(e) => {
                    self.error = Some(e.into());
                    return;
                }
            }
        }
    }

    fn window_done(&mut self, now: Instant, nic: &mut Nic) {
        if self.windows_left > 0 {
            self.post_window(now, nic);
            return;
        }
        let size = self.sizes[self.size_i];
        let iters = self.windows(size);
        let secs = micros(now - self.t0) / 1e6;
        let moved = size * u64::from(self.window) * u64::from(iters);
        self.rows.push(BandwidthRow {
            size,
            window: self.window,
            iterations: iters,
            seconds: secs,
            mb_per_s: moved as f64 / secs / 1e6,
            gbps: moved as f64 * 8.0 / secs / 1e9,
            retransmits: nic.stats().retransmits - self.retx0,
        });
        self.size_i += 1;
        self.begin(now, nic);
    }
}

impl App for BandwidthApp {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        self.begin(now, nic);
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        let Event::Completed { wr, result, .. } = event else {
            return;
        };
        if !self.pending.remove(&wr) {
            return;
        }
        if let Err(e) = result {
            let size = self.sizes[self.size_i];
            self.error = Some(failed(size, "bandwidth WRITE", e));
            return;
        }
        if self.pending.is_empty() {
            self.window_done(now, nic);
        }
    }

    fn is_done(&self) -> bool {
        self.error.is_some() || self.size_i >= self.sizes.len()
    }
}

/// Runs [`LatencyApp`] against the server at `peer`.
pub async fn perf_latency(
    ep: &mut Endpoint,
    peer: SocketAddr,
    sizes: &[u64],
    iterations: u32,
    warmup: u32,
) -> Result<Vec<LatencyRow>, BridgeError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let s = open(ep, peer, max, 3).await?;
    let app = drive(ep, LatencyApp::new(s, sizes, iterations, warmup)).await?;
    match app.error {
        Some(e) => Err(e),
        None => Ok(app.rows),
    }
}

/// Runs [`BandwidthApp`] against the server at `peer`.
pub async fn perf_bandwidth(
    ep: &mut Endpoint,
    peer: SocketAddr,
    sizes: &[u64],
    window: u32,
    bytes: u64,
) -> Result<Vec<BandwidthRow>, BridgeError> {
    let max = sizes.iter().copied().max().unwrap_or(1);
    let s = open(ep, peer, max, 5).await?;
    let app = drive(ep, BandwidthApp::new(s, sizes, window, bytes)).await?;
    match app.error {
        Some(e) => Err(e),
        None => Ok(app.rows),
    }
}
