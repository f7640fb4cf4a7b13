//! The scenario workloads as per-host apps on simulated hosts: what each
//! host does by itself (land, answer, reuse, post receive buffers, run
//! its side of an OSU loop), told as stories over virtual time.

use std::sync::Arc;

use udrma_fabric::sim::{Outcome, Sim};
use udrma_faults::{Model, Target};
use udrma_host::messaging::{Messenger, MsgConfig};
use udrma_host::workload::msg::{MsgApp, MsgKind, MsgWorkload};
use udrma_host::workload::rdma::{OpKind, RdmaApp, RdmaPlan, Reuse, When};
use udrma_host::App;
use udrma_proto::{Duration, Instant, NodeAddr};

const H0: NodeAddr = NodeAddr(0);
const H1: NodeAddr = NodeAddr(1);

fn loss(p: f64) -> Model {
    Model::Loss {
        p,
        correlation: 0.0,
    }
}

fn us(n: u64) -> Instant {
    Instant::ZERO + Duration::from_micros(n)
}

/// A plan of operations between h0 and h1, laid out back to back in each
/// host's regions.
fn plan(ops: &[(OpKind, NodeAddr, u64, When)], reuses: Vec<Reuse>) -> RdmaPlan {
    let mut p = RdmaPlan::new(2, false);
    p.reuses = reuses;
    for &(kind, poster, size, when) in ops {
        let recv_at = match when {
            When::At(t) => t,
            _ => Instant::ZERO,
        };
        p.add(0, kind, poster, NodeAddr(1 - poster.0), size, when, recv_at);
    }
    p
}

fn run_plan(p: RdmaPlan, fault: Option<Model>) -> (Sim, Outcome) {
    let mut b = Sim::builder().seed(3).time_limit(Duration::from_millis(50));
    if let Some(m) = fault {
        b = b.fault("f", Target::any(), m);
    }
    let mut sim = b.build().unwrap();
    let p = Arc::new(p);
    for h in [H0, H1] {
        sim.add_app(h, RdmaApp::new(h, p.clone())).unwrap();
    }
    let out = sim.run();
    (sim, out)
}

fn app(sim: &Sim, h: NodeAddr) -> &RdmaApp {
    sim.app::<RdmaApp>(h).unwrap()
}

#[test]
fn a_write_of_many_messages_lands_once_all_of_them_have() {
    // 1 MiB is cut into 64 KiB segment operations, each with its own
    // receiver completion; the target host counts the operation as landed
    // (and checks its bytes) once, when the last one is in.
    let (sim, out) = run_plan(
        plan(&[(OpKind::Write, H0, 1 << 20, When::At(us(0)))], vec![]),
        Some(loss(0.02)),
    );
    out.assert_invariants();
    let h1 = app(&sim, H1);
    assert_eq!(h1.landed().len(), 1, "landed once");
    assert!(h1.bytes_ok(), "{:?}", h1.notes());
    let done = app(&sim, H0).records()[&0];
    assert_eq!(done.ok, Some(true));
    assert!(
        h1.landed()[&0] <= done.done_at.unwrap(),
        "the receiver knows no later than the sender"
    );
}

#[test]
fn a_pingpong_reply_leaves_when_the_whole_write_it_answers_has_landed() {
    // Three rounds of 300 KiB (five messages each) under loss: each reply
    // is posted by the host the WRITE landed on, never before the last
    // of its messages.
    let mut ops = Vec::new();
    for i in 0..6usize {
        let poster = if i % 2 == 0 { H0 } else { H1 };
        let when = if i == 0 {
            When::At(us(0))
        } else {
            When::AfterLanded(i - 1)
        };
        ops.push((OpKind::Write, poster, 300 << 10, when));
    }
    let (sim, out) = run_plan(plan(&ops, vec![]), Some(loss(0.01)));
    out.assert_invariants();
    for i in 1..6usize {
        let (poster, target) = if i % 2 == 0 { (H0, H1) } else { (H1, H0) };
        let landed = app(&sim, poster).landed()[&(i - 1)];
        let posted = app(&sim, poster).records()[&i].posted_at.unwrap();
        assert_eq!(
            posted,
            landed,
            "reply {i} leaves when write {} lands",
            i - 1
        );
        assert!(app(&sim, target).landed().contains_key(&i));
    }
    for h in [H0, H1] {
        assert!(app(&sim, h).bytes_ok(), "{:?}", app(&sim, h).notes());
    }
}

#[test]
fn reuse_overwrites_only_what_has_landed() {
    // h1 reuses its buffers twice: at 1 µs, before the WRITE can have
    // landed (nothing to overwrite), and at 5 ms, after (the target gets
    // the reuse's bytes, and the end check expects those).
    let ops = [(OpKind::Write, H0, 64 << 10, When::At(us(0)))];
    let early = Reuse {
        at: us(1),
        host: H1,
        tag: 1,
    };
    let (sim, _) = run_plan(plan(&ops, vec![early]), None);
    assert!(app(&sim, H1).reused().is_empty());
    let late = Reuse {
        at: us(5_000),
        host: H1,
        tag: 2,
    };
    let (sim, out) = run_plan(plan(&ops, vec![late]), None);
    out.assert_invariants();
    assert_eq!(app(&sim, H1).reused().len(), 1);
    assert!(app(&sim, H1).is_done());
}

#[test]
fn a_send_finds_the_buffer_its_receiver_posted_at_its_time() {
    let ops = [
        (OpKind::Send, H0, 10_000, When::At(us(10))),
        (OpKind::Send, H0, 10_000, When::At(us(20))),
    ];
    let (sim, out) = run_plan(
        plan(&ops, vec![]),
        Some(Model::Duplicate {
            p: 0.2,
            copies: 1,
            correlation: 0.0,
        }),
    );
    out.assert_invariants();
    assert_eq!(app(&sim, H1).filled(), &[(0, 10_000), (10_000, 10_000)]);
    for i in 0..2 {
        assert_eq!(app(&sim, H0).records()[&i].ok, Some(true));
    }
}

#[test]
fn a_window_keeps_its_size_in_flight() {
    // Ten READs, three at a time: the fourth is posted when the first
    // completes, and never more than three are outstanding.
    let mut ops = Vec::new();
    for i in 0..10 {
        let when = if i < 3 { When::At(us(0)) } else { When::Window };
        ops.push((OpKind::Read, H0, 32 << 10, when));
    }
    let mut p = plan(&ops, vec![]);
    p.windows.push(((0..10).collect(), 3));
    let (sim, out) = run_plan(p, None);
    out.assert_invariants();
    let recs = app(&sim, H0).records();
    for i in 3..10 {
        let posted = recs[&i].posted_at.unwrap();
        let in_flight = (0..i).filter(|j| recs[j].done_at.unwrap() > posted).count();
        assert_eq!(in_flight, 2, "op {i} joins two still in flight");
    }
    assert!(app(&sim, H0).bytes_ok());
}

#[test]
fn both_sides_of_an_osu_latency_loop_run_on_their_own() {
    let w = MsgWorkload {
        kind: MsgKind::Latency,
        a: H0,
        b: H1,
        sizes: vec![8, 64 << 10],
        warmup: 1,
        count: 5,
        window: 1,
        start: us(0),
    };
    let mut sim = Sim::builder()
        .seed(5)
        .fault("f", Target::any(), loss(0.01))
        .build()
        .unwrap();
    for (me, peer) in [(H0, H1), (H1, H0)] {
        let mut m = Messenger::new(MsgConfig::default(), sim.world().nic(me)).unwrap();
        m.connect(Instant::ZERO, sim.nic_mut(me).unwrap(), peer)
            .unwrap();
        sim.service(me).unwrap();
        sim.add_app(me, MsgApp::new(me, m, vec![w.clone()]))
            .unwrap();
    }
    let out = sim.run();
    out.assert_invariants();
    let (a, b) = (
        sim.app::<MsgApp>(H0).unwrap(),
        sim.app::<MsgApp>(H1).unwrap(),
    );
    // 2 sizes × 6 round trips each way; rows from side a only.
    assert_eq!((a.sent().len(), b.sent().len()), (12, 12));
    assert_eq!((a.received().len(), b.received().len()), (12, 12));
    assert_eq!(a.rows().len(), 2);
    assert!(b.rows().is_empty());
    for app in [a, b] {
        assert!(app.is_done() && app.bytes_ok() && app.in_order() && app.exactly_once());
        assert!(app.credits_ok(), "{:?}", app.notes());
    }
}
