//! Your own host logic on simulated hosts: a pingpong written as an app,
//! run over a lossy, duplicating link, with the invariants checked.
//!
//! ```sh
//! cargo run --release --example custom_app
//! ```
//!
//! It uses only `udrma-sim`, the lean library: the same file runs from a
//! crate of your own with `udrma-sim` as a (dev-)dependency, which CI
//! checks by building it outside the workspace.

use udrma_sim::{
    from_fn, Access, App, Duration, Event, Instant, Model, MrKey, Nic, NodeAddr, Sim, Target,
    WorkRequest,
};

/// Bytes per ping and per pong.
const PING: usize = 4096;
const H0: NodeAddr = NodeAddr(0);
const H1: NodeAddr = NodeAddr(1);

/// h0's side: WRITE a ping, wait for h1's WRITE back, `rounds` times, and
/// keep every round-trip time.
struct Pinger {
    local: MrKey,
    remote: MrKey,
    rounds: usize,
    sent_at: Option<Instant>,
    rtts: Vec<Duration>,
    /// How long a pong may take before the app gives up on it.
    give_up_after: Duration,
    gave_up: bool,
}

impl Pinger {
    fn ping(&mut self, now: Instant, nic: &mut Nic) {
        let wr = WorkRequest::write(H1, self.local, 0x1000, PING as u64, self.remote.0, 0x9000);
        nic.post(now, wr).expect("the OP table has room");
        self.sent_at = Some(now);
    }
}

impl App for Pinger {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        self.ping(now, nic);
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        match event {
            // The pong landed: one round trip.
            Event::WriteReceived { from: H1, .. } => {
                if let Some(at) = self.sent_at.take() {
                    self.rtts.push(now - at);
                }
                if self.rtts.len() < self.rounds {
                    self.ping(now, nic);
                }
            }
            Event::Completed { result: Err(e), .. } => panic!("a ping failed: {e}"),
            _ => {}
        }
    }

    /// A deadline of our own: if a pong is overdue, give up (it never is
    /// here; the engine retransmits what the link loses).
    fn poll_timeout(&self) -> Option<Instant> {
        self.sent_at.map(|at| at + self.give_up_after)
    }

    fn handle_timeout(&mut self, _now: Instant, _nic: &mut Nic) {
        self.gave_up = true;
        self.sent_at = None;
    }

    fn is_done(&self) -> bool {
        self.rtts.len() == self.rounds || self.gave_up
    }
}

fn main() {
    let mut sim = Sim::builder()
        .seed(42)
        .fault(
            "loss",
            Target::any(),
            Model::Loss {
                p: 0.02,
                correlation: 0.0,
            },
        )
        .fault(
            "dup",
            Target::any(),
            Model::Duplicate {
                p: 0.05,
                copies: 1,
                correlation: 0.0,
            },
        )
        .build()
        .expect("valid faults");
    let src = sim
        .nic_mut(H0)
        .expect("h0 exists")
        .register(0x1000, PING, Access::ALL);
    let dst = sim
        .nic_mut(H1)
        .expect("h1 exists")
        .register(0x9000, PING, Access::ALL);
    let back = sim
        .nic_mut(H1)
        .expect("h1 exists")
        .register(0x1000, PING, Access::ALL);
    let pong = sim
        .nic_mut(H0)
        .expect("h0 exists")
        .register(0x9000, PING, Access::ALL);

    // h1's side is three lines: answer every ping with a pong.
    sim.add_app(
        H1,
        from_fn(move |now, nic, event| {
            if let Event::WriteReceived { from: H0, .. } = event {
                let wr = WorkRequest::write(H0, back, 0x1000, PING as u64, pong.0, 0x9000);
                nic.post(now, wr).expect("room for the pong");
            }
        }),
    )
    .expect("h1 exists");
    sim.add_app(
        H0,
        Pinger {
            local: src,
            remote: dst,
            rounds: 1000,
            sent_at: None,
            rtts: Vec::new(),
            give_up_after: Duration::from_millis(10),
            gave_up: false,
        },
    )
    .expect("h0 exists");

    let outcome = sim.run();
    let pinger = sim.app::<Pinger>(H0).expect("h0 runs a Pinger");
    let mut rtts: Vec<u64> = pinger.rtts.iter().map(|d| d.as_nanos()).collect();
    rtts.sort_unstable();
    let pct = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize] as f64 / 1e3;
    let (a, b) = (sim.world().nic(H0).stats(), sim.world().nic(H1).stats());
    println!(
        "{} round trips of {PING} B over a link losing 2 % and duplicating 5 %",
        rtts.len()
    );
    println!(
        "round trip  p50 {:.3} us  p99 {:.3} us  max {:.3} us",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    println!(
        "fabric      copies made {}  packets dropped {}",
        sim.world().stats().duplicated,
        sim.world().stats().dropped_total()
    );
    println!(
        "engines     retransmits {}  duplicates and stale copies dropped {}",
        a.retransmits + b.retransmits,
        a.dup_dropped + a.stale_dropped + b.dup_dropped + b.stale_dropped
    );
    println!(
        "trace       {:016x} (same seed, same hash)",
        outcome.trace_hash
    );
    outcome.assert_invariants();
    assert!(!pinger.gave_up, "no pong was ever overdue");
    println!("invariants  all held");
}
