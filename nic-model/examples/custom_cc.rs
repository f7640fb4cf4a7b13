//! A congestion controller of your own, in a few dozen lines: additive
//! increase (one packet per window acknowledged), multiplicative decrease
//! (halve, at most once per window) on an ECN echo or a loss. It is handed
//! to the engine with `Nic::set_controller_factory` and driven over a
//! two-NIC wire whose "queue" marks every packet sent while more than 40
//! packets' worth of bytes are in flight.
//!
//! Run: `cargo run -p udrma-nic --example custom_cc`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use udrma_nic::cc::{AckSample, CongestionControl, LossCause};
use udrma_nic::pair::{Pair, Verdict};
use udrma_nic::{Access, Duration, Event, Instant, NicConfig, WorkRequest};
use udrma_proto::NodeAddr;

const PACKET: u64 = 1_100;

#[derive(Debug)]
struct Aimd {
    window: u64,
    /// Bytes acknowledged since the window last grew.
    acked: u64,
    /// No second cut before this (one window's worth of time).
    calm_until: Instant,
    /// Shared with `main`, to print.
    shown: Arc<AtomicU64>,
}

impl Aimd {
    fn cut(&mut self, now: Instant) {
        if now >= self.calm_until {
            self.window = (self.window / 2).max(PACKET);
            self.calm_until = now + Duration::from_micros(4);
        }
    }
}

impl CongestionControl for Aimd {
    fn on_send(&mut self, _: Instant, _: u64) {}
    fn on_ack(&mut self, now: Instant, ack: AckSample) {
        if ack.ce {
            self.cut(now);
        } else {
            self.acked += ack.bytes;
            if self.acked >= self.window {
                self.acked = 0;
                self.window += PACKET;
            }
        }
        self.shown.store(self.window, Ordering::Relaxed);
    }
    fn on_loss(&mut self, now: Instant, _: u64, _: LossCause) {
        self.cut(now);
    }
    fn window(&self) -> u64 {
        self.window
    }
    fn next_send_time(&self) -> Option<Instant> {
        None
    }
    fn name(&self) -> &'static str {
        "aimd"
    }
}

fn main() {
    let mut pair = Pair::new(NicConfig {
        mtu_payload: 1000,
        ..NicConfig::default()
    });
    let window = Arc::new(AtomicU64::new(10 * PACKET));
    let shown = window.clone();
    pair.nics[0].set_controller_factory(move |_peer: NodeAddr| {
        Box::new(Aimd {
            window: 10 * PACKET,
            acked: 0,
            calm_until: Instant::ZERO,
            shown: shown.clone(),
        })
    });
    let src = pair.nics[0].register(0x1000, 8 << 20, Access::ALL);
    let dst = pair.nics[1].register(0x100_0000, 8 << 20, Access::ALL);
    let wr = WorkRequest::write(NodeAddr(1), src, 0x1000, 8 << 20, dst.0, 0x100_0000);
    pair.nics[0].post(pair.now, wr).unwrap();

    // The wire marks a data packet when the sender has over 40 packets in
    // flight at the moment it leaves (a queue past its ECN threshold).
    let mut in_flight = 0i64;
    pair.set_filter(move |w| match w.repr {
        Some(r) if r.kind_name().starts_with("WRITE") => {
            in_flight += 1;
            if in_flight > 40 {
                Verdict::MarkCe(Duration::ZERO)
            } else {
                Verdict::Deliver
            }
        }
        Some(r) if r.kind_name() == "ACK" => {
            in_flight -= 1;
            Verdict::Deliver
        }
        _ => Verdict::Deliver,
    });
    let mut next_report = Duration::ZERO;
    while pair.step() {
        if pair.now >= Instant::ZERO + next_report {
            let w = window.load(Ordering::Relaxed);
            println!(
                "t = {:>6.1} us  window {:>3} packets",
                pair.now.as_ps() as f64 / 1e6,
                w / PACKET
            );
            next_report = next_report + Duration::from_micros(100);
        }
    }
    let done = pair
        .events_of(0)
        .find_map(|e| match e {
            Event::Completed { result, at, .. } => Some((*result, *at)),
            _ => None,
        })
        .expect("the WRITE completes");
    let s = pair.nics[0].stats();
    println!(
        "8 MiB WRITE: {:?} at {:.1} us; {} acknowledgements echoed a mark; {} retransmits",
        done.0,
        done.1.as_ps() as f64 / 1e6,
        s.ecn_echoes,
        s.retransmits
    );
}
