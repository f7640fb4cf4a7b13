//! Host apps on simulated hosts: the calling rules of `udrma_host::app`
//! hold in the fabric, runs are deterministic, and the invariants `Sim`
//! checks fail when they should.

use udrma_fabric::sim::Sim;
use udrma_faults::{Model, Target};
use udrma_host::app::{from_fn, App};
use udrma_nic::{Access, Event, MrKey, Nic, WorkRequest};
use udrma_proto::{Duration, Instant, NodeAddr};

const H0: NodeAddr = NodeAddr(0);
const H1: NodeAddr = NodeAddr(1);

/// Posts one WRITE of `len` bytes at `at` (its own deadline), then records
/// when it completed and how.
struct TimedWriter {
    at: Instant,
    len: u64,
    keys: (MrKey, MrKey),
    posted: Option<Instant>,
    done: Option<(Instant, bool)>,
    timeouts: u32,
}

impl TimedWriter {
    fn new(at: Instant, len: u64, keys: (MrKey, MrKey)) -> TimedWriter {
        TimedWriter {
            at,
            len,
            keys,
            posted: None,
            done: None,
            timeouts: 0,
        }
    }
}

impl App for TimedWriter {
    fn handle_event(&mut self, now: Instant, _nic: &mut Nic, event: Event) {
        if let Event::Completed { result, .. } = event {
            self.done = Some((now, result.is_ok()));
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.posted.is_none().then_some(self.at)
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        self.timeouts += 1;
        let wr = WorkRequest::write(H1, self.keys.0, 0x1000, self.len, self.keys.1 .0, 0x9000);
        nic.post(now, wr).unwrap();
        self.posted = Some(now);
    }

    fn is_done(&self) -> bool {
        self.done.is_some()
    }
}

fn writer_sim(seed: u64, model: Option<Model>, at: Instant) -> Sim {
    let mut b = Sim::builder()
        .seed(seed)
        .time_limit(Duration::from_millis(20));
    if let Some(m) = model {
        b = b.fault("f", Target::any(), m);
    }
    let mut sim = b.build().unwrap();
    let src = sim
        .nic_mut(H0)
        .unwrap()
        .register(0x1000, 1 << 20, Access::ALL);
    let dst = sim
        .nic_mut(H1)
        .unwrap()
        .register(0x9000, 1 << 20, Access::ALL);
    sim.nic_mut(H0)
        .unwrap()
        .memory_mut()
        .region_mut(src)
        .unwrap()
        .bytes
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = (i * 7 % 251) as u8);
    sim.add_app(H0, TimedWriter::new(at, 256 << 10, (src, dst)))
        .unwrap();
    sim
}

#[test]
fn an_app_deadline_wakes_the_host_and_its_write_lands() {
    let at = Instant::ZERO + Duration::from_micros(5);
    let mut sim = writer_sim(1, None, at);
    let outcome = sim.run();
    outcome.assert_invariants();
    let w = sim.app::<TimedWriter>(H0).unwrap();
    assert_eq!(w.timeouts, 1, "handle_timeout once, at its deadline");
    assert_eq!(
        w.posted,
        Some(at),
        "posted at the app's deadline, not before"
    );
    let (done, ok) = w.done.unwrap();
    assert!(ok && done > at);
    let src = sim
        .world()
        .nic(H0)
        .memory()
        .regions()
        .next()
        .unwrap()
        .1
        .bytes[..256 << 10]
        .to_vec();
    let dst = sim
        .world()
        .nic(H1)
        .memory()
        .regions()
        .next()
        .unwrap()
        .1
        .bytes[..256 << 10]
        .to_vec();
    assert_eq!(src, dst, "byte-exact");
}

#[test]
fn same_seed_same_hash_with_apps() {
    let at = Instant::ZERO + Duration::from_micros(1);
    let loss = || {
        Some(Model::Loss {
            p: 0.05,
            correlation: 0.0,
        })
    };
    let hash = |seed| writer_sim(seed, loss(), at).run().trace_hash;
    assert_eq!(hash(3), hash(3));
    assert_ne!(hash(3), hash(4));
}

#[test]
fn a_link_that_never_comes_back_fails_liveness_and_completion() {
    let at = Instant::ZERO + Duration::from_micros(1);
    let mut sim = writer_sim(1, Some(Model::Down), at);
    let outcome = sim.run();
    assert!(!outcome.passed());
    let text = outcome.violations.join("\n");
    // The WRITE gives up after its retries: completed, in error; the app
    // saw it, so it is done, and nothing is outstanding.
    let w = sim.app::<TimedWriter>(H0).unwrap();
    match w.done {
        Some((_, ok)) => assert!(!ok, "a WRITE over a dead link cannot succeed"),
        None => assert!(
            text.contains("h0: 1 requests never completed")
                && text.contains("h0: its app is not done"),
            "{text}"
        ),
    }
}

#[test]
fn an_unfinished_app_is_a_violation() {
    // Posts at 50 ms, after the 20 ms limit: never done.
    let at = Instant::ZERO + Duration::from_millis(50);
    let mut sim = writer_sim(1, None, at);
    let outcome = sim.run();
    assert_eq!(
        outcome.violations,
        vec![
            "work left at the time limit (20.000ms)".to_string(),
            "h0: its app is not done".to_string()
        ]
    );
}

#[test]
fn events_reach_the_app_not_the_host_event_queue() {
    let mut sim = Sim::builder().build().unwrap();
    let src = sim.nic_mut(H0).unwrap().register(0x1000, 4096, Access::ALL);
    let dst = sim.nic_mut(H1).unwrap().register(0x9000, 4096, Access::ALL);
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = seen.clone();
    sim.add_app(
        H1,
        from_fn(move |_, _, event| {
            if matches!(event, Event::WriteReceived { .. }) {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }),
    )
    .unwrap();
    sim.post(H0, WorkRequest::write(H1, src, 0x1000, 4096, dst.0, 0x9000))
        .unwrap();
    sim.run().assert_invariants();
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 1);
    let queued: Vec<_> = sim.world_mut().take_host_events();
    assert!(
        queued.iter().all(|e| e.host == H0),
        "h1's events went to its app: {queued:?}"
    );
    assert!(queued
        .iter()
        .any(|e| matches!(e.event, Event::Completed { .. })));
}

#[test]
fn a_host_the_topology_lacks_is_an_error_not_a_panic() {
    let mut sim = Sim::builder().build().unwrap();
    let e = sim.nic_mut(NodeAddr(7)).err().unwrap().to_string();
    assert_eq!(e, "no host h7 (the topology has 2)");
    let e = sim.nic_mut("host1").err().unwrap().to_string();
    assert_eq!(e, "no host named \"host1\": hosts are named h0, h1, ...");
    assert!(sim
        .post("h2", WorkRequest::read(H0, MrKey(1), 0, 8, 1, 0))
        .is_err());
    assert!(sim.service("h9").is_err());
    assert!(sim.nic_mut("h1").is_ok());
}

#[test]
fn a_failed_request_fails_the_run_unless_failures_are_expected() {
    // A READ of a key h1 never registered completes `BadRkey`: every
    // invariant of the engine holds, but the run did not do its work.
    for expect in [false, true] {
        let mut sim = Sim::builder().expect_failures(expect).build().unwrap();
        let local = sim
            .nic_mut("h0")
            .unwrap()
            .register(0x1000, 4096, Access::ALL);
        sim.post("h0", WorkRequest::read(H1, local, 0x1000, 4096, 77, 0x9000))
            .unwrap();
        let out = sim.run();
        if expect {
            out.assert_invariants();
        } else {
            assert_eq!(out.violations.len(), 1, "{:?}", out.violations);
            let v = &out.violations[0];
            assert!(
                v.starts_with("1 request failed, first h0 request WrId(")
                    && v.contains("(all-succeeded; SimBuilder::expect_failures"),
                "{v}"
            );
        }
    }
}
