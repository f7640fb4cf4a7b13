//! One host app, two backends: the same pingpong app code runs on
//! simulated hosts (`udrma::sim`) and on real UDP sockets
//! (`udrma::bridge::Cluster`), through lossy links in both, and does the
//! same work.

use udrma::bridge::{BridgeConfig, Cluster, FaultPlan};
use udrma::faults::{Model, Target};
use udrma::host::app::{from_fn, App};
use udrma::nic::{Access, Event, MrKey, Nic, WorkRequest};
use udrma::proto::{Duration, Instant, NodeAddr};
use udrma::sim::Sim;

const H0: NodeAddr = NodeAddr(0);
const H1: NodeAddr = NodeAddr(1);
const LEN: usize = 2048;
const ROUNDS: usize = 50;

/// WRITE a ping to h1, wait for its WRITE back, `ROUNDS` times.
struct Pinger {
    keys: (MrKey, MrKey),
    rtts: Vec<Duration>,
    sent_at: Option<Instant>,
}

impl Pinger {
    fn ping(&mut self, now: Instant, nic: &mut Nic) {
        let wr = WorkRequest::write(H1, self.keys.0, 0x1000, LEN as u64, self.keys.1 .0, 0x9000);
        nic.post(now, wr).expect("room in the OP table");
        self.sent_at = Some(now);
    }
}

impl App for Pinger {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        self.ping(now, nic);
    }

    fn handle_event(&mut self, now: Instant, nic: &mut Nic, event: Event) {
        if let Event::WriteReceived { from: H1, .. } = event {
            if let Some(at) = self.sent_at.take() {
                self.rtts.push(now - at);
            }
            if self.rtts.len() < ROUNDS {
                self.ping(now, nic);
            }
        }
    }

    fn is_done(&self) -> bool {
        self.rtts.len() == ROUNDS
    }
}

fn apps(keys: [MrKey; 4]) -> (Pinger, impl App) {
    let [src, dst, back, pong] = keys;
    let echo = from_fn(move |now, nic: &mut Nic, event| {
        if let Event::WriteReceived { from: H0, .. } = event {
            let wr = WorkRequest::write(H0, back, 0x1000, LEN as u64, pong.0, 0x9000);
            nic.post(now, wr).expect("room for the pong");
        }
    });
    let pinger = Pinger {
        keys: (src, dst),
        rtts: Vec::new(),
        sent_at: None,
    };
    (pinger, echo)
}

/// The regions, registered host by host in the same order in both
/// backends (so both hand out the same keys): h0's source and pong
/// target, h1's source and ping target.
fn regions(mut register: impl FnMut(NodeAddr, u64) -> MrKey) -> [MrKey; 4] {
    let src = register(H0, 0x1000);
    let pong = register(H0, 0x9000);
    let back = register(H1, 0x1000);
    let dst = register(H1, 0x9000);
    [src, dst, back, pong]
}

#[test]
fn the_same_pingpong_app_runs_in_the_simulator_and_over_sockets() {
    // Simulated: 2 % loss on the link.
    let mut sim = Sim::builder()
        .seed(3)
        .fault(
            "loss",
            Target::any(),
            Model::Loss {
                p: 0.02,
                correlation: 0.0,
            },
        )
        .build()
        .unwrap();
    let keys = regions(|h, at| sim.nic_mut(h).unwrap().register(at, LEN, Access::ALL));
    let (pinger, echo) = apps(keys);
    sim.add_app(H1, echo).unwrap();
    sim.add_app(H0, pinger).unwrap();
    sim.run().assert_invariants();
    let simulated = sim.app::<Pinger>(H0).unwrap().rtts.len();
    assert!(
        sim.world().stats().dropped_total() > 0,
        "the link lost packets"
    );

    // Real sockets on loopback: 2 % loss on each host's egress.
    let faults = |h: NodeAddr| {
        FaultPlan::from_flags(0.02, 0.0, 0.0, std::time::Duration::ZERO, u64::from(h.0)).unwrap()
    };
    let mut cluster = Cluster::loopback(2, &BridgeConfig::default(), faults).unwrap();
    let keys = regions(|h, at| cluster.nic_mut(h).register(at, LEN, Access::ALL));
    let (pinger, echo) = apps(keys);
    cluster.set_app(H1, Box::new(echo)).unwrap();
    cluster.set_app(H0, Box::new(pinger)).unwrap();
    let done = cluster
        .run_apps(std::time::Instant::now() + std::time::Duration::from_secs(20))
        .unwrap();
    assert!(done, "the pinger finished over sockets");
    let real = cluster.app::<Pinger>(H0).unwrap().rtts.len();
    let lost = cluster.fault_stats(H0).dropped + cluster.fault_stats(H1).dropped;
    assert!(lost > 0, "the egress rules lost datagrams");
    assert_eq!((simulated, real), (ROUNDS, ROUNDS));
}
