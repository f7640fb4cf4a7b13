//! A split world driven the way a scenario runner drives a world: an
//! app on every host, a run to a time limit and then on to the end, and
//! what each host did read from the world that ran it. Split across any
//! number of threads it comes out as one world in windows does: the same
//! trace at the limit and at the end, the same counters and clock, and
//! the same apps' records.

mod common;

use common::*;
use proptest::prelude::*;
use udrma_fabric::{
    EventOrder, FabricConfig, FabricStats, LinkParams, Policy, ShardError, SplitWorld, Topology,
    World,
};
use udrma_faults::RuleSet;
use udrma_host::app::from_fn;
use udrma_host::App;
use udrma_nic::{Event, MrKey, Nic, NicConfig, WorkRequest};
use udrma_proto::{Duration, Instant, NodeAddr};

/// Writes `len` bytes to one host, `rounds` times, each after the last
/// completed and a pause of its own (an app timer); records when each
/// completed.
#[derive(Debug, Clone)]
struct Relay {
    to: u32,
    keys: Vec<(MrKey, MrKey)>,
    me: u32,
    len: u64,
    left: u32,
    pause: Duration,
    wake: Option<Instant>,
    done: Vec<(Instant, bool)>,
}

impl Relay {
    fn post(&mut self, now: Instant, nic: &mut Nic) {
        let wr = WorkRequest::write(
            NodeAddr(self.to),
            self.keys[self.me as usize].0,
            SRC,
            self.len,
            self.keys[self.to as usize].1 .0,
            DST,
        );
        nic.post(now, wr).unwrap();
        self.left -= 1;
    }
}

impl App for Relay {
    fn start(&mut self, now: Instant, nic: &mut Nic) {
        self.post(now, nic);
    }

    fn handle_event(&mut self, now: Instant, _nic: &mut Nic, event: Event) {
        if let Event::Completed { result, .. } = event {
            self.done.push((now, result.is_ok()));
            if self.left > 0 {
                self.wake = Some(now + self.pause);
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.wake
    }

    fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        self.wake = None;
        self.post(now, nic);
    }

    fn is_done(&self) -> bool {
        self.left == 0 && self.wake.is_none()
    }

    fn fork(&self) -> Option<Box<dyn App>> {
        Some(Box::new(self.clone()))
    }
}

const LEN: u64 = 24 * 1024;

/// A k=4 fat tree of trimming switches that serve control packets
/// first, every host's regions registered (part of the build, so every
/// copy has them).
fn fabric() -> (World, Vec<(MrKey, MrKey)>) {
    fabric_seeded(7)
}

fn fabric_seeded(seed: u64) -> (World, Vec<(MrKey, MrKey)>) {
    let params = LinkParams {
        queue_bytes: 24_000,
        ecn_threshold: Some(8_000),
        trim: true,
        control_priority: true,
        ..LinkParams::default()
    };
    let topo = Topology::fat_tree(4, params).unwrap();
    let cfg = FabricConfig {
        routing: Policy::Spray,
        seed,
        nic: NicConfig {
            max_retries: 40,
            ..NicConfig::default()
        },
        ..FabricConfig::default()
    };
    world(topo, cfg, RuleSet::new(), LEN as usize)
}

/// Host `h`'s app: three writes to a host in another pod (an incast on
/// hosts 0 and 1 from half of the others).
fn relay(h: u32, keys: &[(MrKey, MrKey)]) -> Relay {
    relay_to(h, if h % 2 == 0 { (h + 5) % 16 } else { h % 2 }, keys)
}

fn relay_to(h: u32, to: u32, keys: &[(MrKey, MrKey)]) -> Relay {
    Relay {
        to,
        keys: keys.to_vec(),
        me: h,
        len: LEN,
        left: 3,
        pause: Duration::from_nanos(300 + 50 * u64::from(h)),
        wake: None,
        done: Vec::new(),
    }
}

/// What a run shows: trace hash and events, counters, clock.
type Seen = (u64, u64, FabricStats, Instant);

fn seen_one(w: &World) -> Seen {
    (
        w.trace().hash(),
        w.trace().events(),
        w.stats().clone(),
        w.now(),
    )
}

fn seen_split(s: &SplitWorld) -> Seen {
    (s.trace().hash(), s.trace().events(), s.stats(), s.now())
}

fn records(get: impl Fn(NodeAddr) -> Vec<(Instant, bool)>) -> Vec<Vec<(Instant, bool)>> {
    (0..16).map(|h| get(NodeAddr(h))).collect()
}

#[test]
fn a_split_world_with_apps_runs_as_one_world_does() {
    let limit = Instant::ZERO + Duration::from_nanos(6_500);
    let keys = fabric().1;
    let one_world = || {
        let mut one = fabric().0;
        one.set_event_order(EventOrder::Windows).unwrap();
        for h in 0..16 {
            one.set_app(NodeAddr(h), Box::new(relay(h, &keys))).unwrap();
        }
        one
    };
    // A stop exactly at an event's time: that event runs.
    let mut probe = one_world();
    probe.run_until(limit);
    let exact = probe.peek_time().expect("work left at the limit");
    assert!(exact > limit);
    let mut one = one_world();
    assert!(!one.run_until(limit), "work left at the limit");
    let at_limit = seen_one(&one);
    assert!(!one.run_until(exact));
    let at_exact = seen_one(&one);
    assert!(at_exact.1 > at_limit.1, "the event at {exact} ran");
    assert!(one.run_until(Instant(u64::MAX)), "idle at the end");
    let at_end = seen_one(&one);
    let want = records(|h| one.app::<Relay>(h).unwrap().done.clone());
    assert!(want.iter().all(|r| r.len() == 3 && r.iter().all(|d| d.1)));
    let s = &at_end.2;
    assert!(
        s.trimmed > 0 && s.control_ahead > 0,
        "the incast trims and sends control packets ahead: {s:?}"
    );

    for n in 1..=4 {
        let copies = (0..n).map(|_| fabric().0).collect();
        let mut split = SplitWorld::new(copies).unwrap();
        for h in 0..16 {
            split
                .set_app(NodeAddr(h), Box::new(relay(h, &keys)))
                .unwrap();
        }
        assert!(!split.run_until(limit).unwrap());
        assert_eq!(seen_split(&split), at_limit, "{n} threads, at the limit");
        assert!(!split.run_until(exact).unwrap());
        assert_eq!(seen_split(&split), at_exact, "{n} threads, at {exact}");
        if n == 2 {
            // What the runner asks at a limit: when the next thing is due.
            let mut peeked = SplitWorld::new(vec![fabric().0, fabric().0]).unwrap();
            for h in 0..16 {
                peeked
                    .set_app(NodeAddr(h), Box::new(relay(h, &keys)))
                    .unwrap();
            }
            peeked.run_until(limit).unwrap();
            assert_eq!(peeked.peek_time(), Some(exact));
        }
        assert!(!split.is_idle());
        assert!(split.run_until(Instant(u64::MAX)).unwrap());
        assert!(split.is_idle());
        assert_eq!(seen_split(&split), at_end, "{n} threads, at the end");
        let got = records(|h| split.world_of(h).app::<Relay>(h).unwrap().done.clone());
        assert_eq!(got, want, "{n} threads: what the apps saw");
        split.finish().unwrap();
    }
}

#[test]
fn what_a_split_world_cannot_copy_is_refused_by_name() {
    // An app with no copy of itself.
    let mut split = SplitWorld::new(vec![fabric().0, fabric().0]).unwrap();
    let e = split
        .set_app(NodeAddr(3), Box::new(from_fn(|_, _, _| {})))
        .expect_err("refused");
    assert!(e.to_string().contains("h3's app cannot be copied"), "{e}");

    // Work on a NIC from outside its app.
    let (_, keys) = fabric();
    let mut split = SplitWorld::new(vec![fabric().0, fabric().0]).unwrap();
    let wr = WorkRequest::write(NodeAddr(1), keys[5].0, SRC, 64, keys[1].1 .0, DST);
    split.nic_mut(NodeAddr(5)).post(Instant::ZERO, wr).unwrap();
    let e = split.run_until(Instant(u64::MAX)).expect_err("refused");
    assert!(e.to_string().contains("h5's NIC was worked on"), "{e}");

    // Copies that are not the same world.
    let (mut other, keys) = fabric();
    write(&mut other, &keys, 2, 9, 4096);
    let mut split = SplitWorld::new(vec![fabric().0, other]).unwrap();
    match split.run_until(Instant(u64::MAX)) {
        Err(ShardError::Differ(1, why)) => assert!(why.contains("against"), "{why}"),
        other => panic!("{other:?}"),
    }

    // Apps go in before the first run.
    let mut split = SplitWorld::new(vec![fabric().0]).unwrap();
    split.run_until(Instant(u64::MAX)).unwrap();
    let e = split
        .set_app(NodeAddr(0), Box::new(relay(0, &keys)))
        .expect_err("refused");
    assert!(e.to_string().contains("before it first runs"), "{e}");
    assert!(matches!(
        SplitWorld::new(Vec::new()),
        Err(ShardError::Count(0))
    ));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, ..ProptestConfig::default() })]

    /// Whatever the seed, the pairing and the times the run is stopped
    /// at, two and three threads give what one world gives at each stop.
    #[test]
    fn any_split_stopped_anywhere_is_one_world(
        seed in 0u64..1000,
        step in 1u32..16,
        stops in proptest::collection::vec(1u64..40_000, 1..4),
    ) {
        let keys = fabric_seeded(seed).1;
        let apps = |install: &mut dyn FnMut(NodeAddr, Box<dyn App>)| {
            for h in 0..16 {
                install(NodeAddr(h), Box::new(relay_to(h, (h + step) % 16, &keys)));
            }
        };
        let mut stops: Vec<Instant> = stops.iter().map(|ns| Instant::ZERO + Duration::from_nanos(*ns)).collect();
        stops.sort();
        stops.push(Instant(u64::MAX));
        let mut one = fabric_seeded(seed).0;
        one.set_event_order(EventOrder::Windows).unwrap();
        apps(&mut |h, app| one.set_app(h, app).unwrap());
        let want: Vec<(bool, Seen)> = stops.iter().map(|t| (one.run_until(*t), seen_one(&one))).collect();
        for n in [2, 3] {
            let mut split = SplitWorld::new((0..n).map(|_| fabric_seeded(seed).0).collect()).unwrap();
            apps(&mut |h, app| split.set_app(h, app).unwrap());
            for (t, w) in stops.iter().zip(&want) {
                let idle = split.run_until(*t).unwrap();
                prop_assert_eq!(&(idle, seen_split(&split)), w, "{} threads, stop at {}", n, t);
            }
        }
    }
}

/// A world with apps on every host, on one to four ranks (on threads,
/// [`LocalRanks`]), stopped at several times: at each stop rank 0's
/// trace and whether the run is idle are one world's, at the end the
/// gathered counters and clock are too, and every app, read on the rank
/// that ran it, saw what it saw in one world.
#[test]
fn a_world_with_apps_on_ranks_runs_as_one_world_does() {
    use udrma_fabric::{LocalRanks, RankedWorld, Ranks};
    for (seed, step) in [(7, 5), (21, 3), (99, 11)] {
        let keys = fabric_seeded(seed).1;
        let app = |h: u32| Box::new(relay_to(h, (h + step) % 16, &keys));
        let stops: Vec<Instant> = [900, 2_500, 6_000]
            .iter()
            .map(|ns| Instant::ZERO + Duration::from_nanos(*ns))
            .chain([Instant(u64::MAX)])
            .collect();
        let mut one = fabric_seeded(seed).0;
        one.set_event_order(EventOrder::Windows).unwrap();
        for h in 0..16 {
            one.set_app(NodeAddr(h), app(h)).unwrap();
        }
        let want: Vec<(bool, u64, u64)> = stops
            .iter()
            .map(|t| (one.run_until(*t), one.trace().hash(), one.trace().events()))
            .collect();
        let want_apps = records(|h| one.app::<Relay>(h).unwrap().done.clone());
        for n in 1..=4 {
            let got = std::thread::scope(|scope| {
                let handles: Vec<_> = LocalRanks::group(n)
                    .into_iter()
                    .map(|r| {
                        let (stops, app) = (&stops, &app);
                        scope.spawn(move || {
                            let me = r.rank();
                            let mut w = RankedWorld::new(fabric_seeded(seed).0, r, "apps").unwrap();
                            for h in 0..16 {
                                w.set_app(NodeAddr(h), app(h)).unwrap();
                            }
                            let at: Vec<(bool, u64, u64)> = stops
                                .iter()
                                .map(|t| {
                                    let idle = w.run_until(*t).unwrap();
                                    (idle, w.trace().hash(), w.trace().events())
                                })
                                .collect();
                            let apps: Vec<(NodeAddr, Vec<(Instant, bool)>)> = (0..16)
                                .map(NodeAddr)
                                .filter(|h| w.is_local(*h))
                                .map(|h| (h, w.world().app::<Relay>(h).unwrap().done.clone()))
                                .collect();
                            (me, at, apps, w.gather().unwrap())
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            });
            let mut seen_apps = vec![None; 16];
            for (me, at, apps, run) in got {
                if me == 0 {
                    assert_eq!(at, want, "seed {seed}, {n} ranks: trace at each stop");
                    let run = run.expect("rank 0 gathers");
                    assert_eq!(&run.stats, one.stats(), "seed {seed}, {n} ranks");
                    assert_eq!(run.now, one.now(), "seed {seed}, {n} ranks");
                } else {
                    assert!(run.is_none());
                }
                for (h, done) in apps {
                    assert!(
                        seen_apps[h.0 as usize].replace(done).is_none(),
                        "{h} on one rank"
                    );
                }
            }
            let seen: Vec<Vec<(Instant, bool)>> =
                seen_apps.into_iter().map(Option::unwrap).collect();
            assert_eq!(seen, want_apps, "seed {seed}, {n} ranks: what the apps saw");
        }
    }
}

/// Hosts without apps queue their NICs' events for the caller: a split
/// world hands them over in the order one world does, from the writes
/// every copy was built with.
#[test]
fn host_events_without_apps_come_in_one_world_order() {
    let built = || {
        let (mut w, keys) = fabric_seeded(11);
        for h in 0..16 {
            write(&mut w, &keys, h, (h + 3) % 16, LEN);
        }
        w
    };
    let mut one = built();
    one.set_event_order(EventOrder::Windows).unwrap();
    assert!(one.run_until(Instant(u64::MAX)));
    let want = one.take_host_events();
    assert!(want.len() >= 32, "{} events", want.len());
    for n in [1, 2, 3] {
        let mut split = SplitWorld::new((0..n).map(|_| built()).collect()).unwrap();
        assert!(split.run_until(Instant(u64::MAX)).unwrap());
        assert_eq!(seen_split(&split), seen_one(&one), "{n} threads");
        assert_eq!(split.take_host_events(), want, "{n} threads");
        assert!(split.take_host_events().is_empty());
    }
}

/// A write posted for later leaves every NIC idle and the world not:
/// until it has run, the split world is not idle either. After a run,
/// work on a NIC from outside its app lands on the NIC of the thread
/// that ran the host (and the next run is refused).
#[test]
fn idle_means_nothing_left_and_a_nic_is_worked_on_where_it_ran() {
    let built = || {
        let (mut w, keys) = fabric_seeded(5);
        let wr = WorkRequest::write(NodeAddr(14), keys[2].0, SRC, 4096, keys[14].1 .0, DST);
        w.post_at(Instant::ZERO + Duration::from_micros(3), NodeAddr(2), wr)
            .unwrap();
        w
    };
    let mut split = SplitWorld::new(vec![built(), built()]).unwrap();
    assert!(!split.is_idle(), "a post is due");
    assert!(split.run_until(Instant(u64::MAX)).unwrap());
    assert!(split.is_idle());
    let h = NodeAddr(15);
    let key = split
        .nic_mut(h)
        .register(0x7000_0000, 64, udrma_nic::Access::ALL);
    assert!(split.world_of(h).nic(h).memory().region(key).is_some());
    assert!(split.run_until(Instant(u64::MAX)).is_err());
}
