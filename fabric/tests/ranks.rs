//! Runs on ranks (`run_ranked`, here on threads with `LocalRanks`): what
//! the ranks agree on before they run, and what stops them. Ranks started
//! differently are refused at the start, every rank alike; a rank that
//! ends early stops the others, naming it, instead of leaving them
//! waiting; what a split run cannot carry is refused by name; empty
//! windows are skipped, and counted. (That a run on ranks is the run of
//! one thread is told in `shards.rs`, beside the same runs on threads.)

mod common;

use common::*;
use udrma_fabric::{
    run_ranked, FabricConfig, FabricError, LinkParams, LocalRanks, RankedRun, RankedWorld,
    ShardError, Topology, World,
};
use udrma_faults::RuleSet;
use udrma_proto::{Duration, Instant};

/// A pair where h0 writes to h1 at time zero, and again at `later`.
fn pair(later: Duration) -> Result<World, FabricError> {
    pair_with(later, false)
}

/// The same, and with `back` h1 writes to h0 as well.
fn pair_with(later: Duration, back: bool) -> Result<World, FabricError> {
    let (mut w, keys) = world(
        Topology::pair(LinkParams::default()),
        FabricConfig::default(),
        RuleSet::new(),
        8192,
    );
    write(&mut w, &keys, 0, 1, 4096);
    if back {
        write(&mut w, &keys, 1, 0, 4096);
    }
    let wr = udrma_nic::WorkRequest::write(
        udrma_proto::NodeAddr(1),
        keys[0].0,
        SRC,
        4096,
        keys[1].1 .0,
        DST,
    );
    w.post_at(Instant::ZERO + later, udrma_proto::NodeAddr(0), wr)?;
    Ok(w)
}

/// Every rank of `n` runs `body` with its rank handle, on its own thread;
/// their results by rank.
fn on_ranks<T: Send>(n: usize, body: impl Fn(LocalRanks) -> T + Sync) -> Vec<T> {
    std::thread::scope(|scope| {
        let body = &body;
        let handles: Vec<_> = LocalRanks::group(n)
            .into_iter()
            .map(|r| scope.spawn(move || body(r)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A rank started with another file, seed or build (its identity) is
/// refused at the start: every rank stops with the same error, naming
/// the first rank that differs and both identities.
#[test]
fn ranks_started_differently_are_refused_alike() {
    let ids = ["run.toml seed 1", "run.toml seed 1", "run.toml seed 2"];
    let got = on_ranks(3, |r| {
        let id = ids[udrma_fabric::Ranks::rank(&r)];
        run_ranked(r, id, || pair(Duration::from_micros(5))).map(|_| ())
    });
    for (rank, e) in got.into_iter().enumerate() {
        match e {
            Err(ShardError::Started(2, why)) => assert!(
                why.contains("it runs run.toml seed 2; rank 0 runs run.toml seed 1"),
                "rank {rank}: {why}"
            ),
            other => panic!("rank {rank}: {other:?}"),
        }
    }
}

/// A build that is not the same on every rank (the same identity, but a
/// different world) is refused by its fingerprint, every rank alike.
#[test]
fn a_build_that_differs_between_ranks_is_refused() {
    let got = on_ranks(2, |r| {
        let odd = udrma_fabric::Ranks::rank(&r) == 1;
        run_ranked(r, "same", || pair_with(Duration::from_micros(5), odd)).map(|_| ())
    });
    for (rank, e) in got.into_iter().enumerate() {
        match e {
            Err(ShardError::Differ(1, why)) => assert!(why.contains("against"), "{why}"),
            other => panic!("rank {rank}: {other:?}"),
        }
    }
}

/// A rank that ends in the middle of the run (its process died) stops
/// every other rank at its next exchange, naming it: no rank waits on.
#[test]
fn a_rank_that_ends_stops_the_others_by_name() {
    let got = on_ranks(3, |r| {
        let me = udrma_fabric::Ranks::rank(&r);
        let mut w = RankedWorld::new(pair(Duration::from_micros(50))?, r, "x")?;
        if me == 2 {
            // Runs the first windows, then dies.
            w.run_until(Instant::ZERO + Duration::from_micros(1))?;
            drop(w);
            return Ok(None);
        }
        w.run_until(Instant(u64::MAX))?;
        w.gather()
    });
    let mut got = got.into_iter();
    for rank in 0..2 {
        match got.next().unwrap() {
            Err(ShardError::Stopped(_, why)) => {
                assert_eq!(why, "rank 2 has ended", "rank {rank}")
            }
            other => panic!("rank {rank}: {:?}", other.map(|r| r.is_some())),
        }
    }
    assert!(matches!(got.next(), Some(Ok(None))));
}

/// What a split run cannot carry (here a capture) is refused on every
/// rank by name, before any exchange.
#[test]
fn what_ranks_cannot_carry_is_refused_by_name() {
    let got = on_ranks(2, |r| {
        run_ranked(r, "x", || {
            let mut w = pair(Duration::from_micros(5))?;
            w.tap_all(Box::new(std::io::sink()))?;
            Ok(w)
        })
        .map(|_| ())
    });
    for e in got {
        match e {
            Err(ShardError::Unsupported(why)) => assert!(why.contains("capture"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

/// A second write a millisecond after the first leaves hundreds of
/// windows with nothing in them: the ranks agree on where the next
/// thing is due and jump there, counting the windows they skipped, and
/// the run is still the run of one.
#[test]
fn empty_windows_are_skipped_and_counted() {
    let later = Duration::from_millis(1);
    let mut one = pair(later).unwrap();
    one.set_event_order(udrma_fabric::EventOrder::Windows)
        .unwrap();
    assert!(one.run());
    let got: Vec<Option<RankedRun>> = on_ranks(2, |r| run_ranked(r, "x", || pair(later)).unwrap());
    let run = got.into_iter().next().flatten().unwrap();
    assert_eq!(
        (run.trace_hash, run.trace_events, run.now),
        (one.trace().hash(), one.trace().events(), one.now())
    );
    assert_eq!(&run.stats, one.stats());
    let r0 = &run.ranks[0];
    let span = (run.now - Instant::ZERO).as_ps() / run.window.as_ps();
    // Windows run and skipped cover the run (the last may run stale
    // timers only, past the last event that moved the clock).
    assert!(
        r0.skipped > 900 && r0.windows < 20 && r0.windows + r0.skipped >= span,
        "{r0:?} over {span} windows' span"
    );
    // ... and no more than a few windows past it.
    assert!(
        r0.windows + r0.skipped <= span + span / 10,
        "{r0:?} over {span}"
    );
    assert_eq!(
        run.ranks[1].windows, r0.windows,
        "ranks run windows together"
    );
    assert_eq!(run.ranks[1].skipped, r0.skipped);
}

/// A rank builds only its shard: it holds the states of its own hosts,
/// and a host another rank runs has one only while the build posts on it
/// (its first packet leaves as in the whole world) and gives it back at
/// once (no regions, nothing outstanding); once split, a rank holds no
/// other rank's hosts at all. The run is the whole world's.
#[test]
fn a_rank_holds_no_other_ranks_hosts() {
    use udrma_fabric::shapes::{speed_shape, speed_shape_for};
    let part = udrma_fabric::partition(speed_shape(4, 3).unwrap().topology(), 2);
    let of = |w: &World, h: u32| {
        let node = w.topology().hosts[h as usize];
        usize::from(part[node as usize])
    };
    for me in 0..2 {
        let w = speed_shape_for(4, 3, Some((2, me))).unwrap();
        let (mut mine, mut theirs) = (0, 0);
        for h in 0..16 {
            let nic = w.nic(udrma_proto::NodeAddr(h));
            let regions = nic.memory().regions().count();
            if of(&w, h) == me {
                assert!(regions == 2 && !nic.is_idle(), "h{h}, rank {me}'s own");
                mine += 1;
            } else {
                assert!(regions == 0 && nic.is_idle(), "h{h} on rank {me}");
                theirs += 1;
            }
        }
        assert_eq!((mine, theirs), (8, 8));
        assert_eq!(w.hosts_held(), 16, "its own, and the 8 it posted on");
    }
    let whole = {
        let mut w = speed_shape(4, 3).unwrap();
        assert_eq!(w.hosts_held(), 16);
        w.set_event_order(udrma_fabric::EventOrder::Windows)
            .unwrap();
        assert!(w.run());
        (w.trace().hash(), w.stats().clone())
    };
    let got = on_ranks(2, |r| {
        let me = udrma_fabric::Ranks::rank(&r);
        let mut w =
            RankedWorld::new(speed_shape_for(4, 3, Some((2, me))).unwrap(), r, "x").unwrap();
        w.run_until(Instant(u64::MAX)).unwrap();
        assert_eq!(w.world().hosts_held(), 8, "rank {me} after the split");
        for h in (0..16).map(udrma_proto::NodeAddr) {
            let regions = w.world().nic(h).memory().regions().count();
            assert_eq!(regions > 0, w.is_local(h), "{h} on rank {me} after the run");
        }
        w.gather().unwrap()
    });
    let run = got.into_iter().next().flatten().unwrap();
    assert_eq!((run.trace_hash, run.stats.clone()), whole);
    // A world built whole (as the scenario runner builds it) on three
    // ranks, whose pods go 2, 1, 1: once split, the middle rank holds its
    // one pod's hosts, none of the last rank's.
    let got = on_ranks(3, |r| {
        let mut w = RankedWorld::new(speed_shape(4, 3).unwrap(), r, "x").unwrap();
        w.run_until(Instant(u64::MAX)).unwrap();
        (w.world().hosts_held(), w.gather().unwrap())
    });
    let held: Vec<usize> = got.iter().map(|g| g.0).collect();
    assert_eq!(held, [8, 4, 4]);
    let run = got.into_iter().next().and_then(|g| g.1).unwrap();
    assert_eq!((run.trace_hash, run.stats), whole);
}

/// A run on ranks behind boxes (`Box<dyn Ranks>`, as a scenario runner
/// holds them) stopped at a limit: every rank agrees on when the next
/// thing is due (one world's `peek_time`), and is not idle while a
/// packet or an event waits for it; at the end every rank is idle, and
/// an exchange of the caller's own carries each rank's words to each.
#[test]
fn ranks_behind_boxes_agree_on_what_is_due_and_when_they_are_idle() {
    let limit = Instant::ZERO + Duration::from_micros(2);
    let build = || fat_pair_of_pods();
    let mut one = build().unwrap();
    one.set_event_order(udrma_fabric::EventOrder::Windows)
        .unwrap();
    assert!(!one.run_until(limit));
    let due = one.peek_time();
    assert!(due.is_some());
    assert!(one.run());
    let events_of = |events: &[udrma_fabric::HostEvent], h: u32| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.host.0 == h)
            .map(|e| format!("{:?}", e.event))
            .collect()
    };
    let all = one.take_host_events();
    let got = on_ranks(3, |r| {
        let boxed: Box<dyn udrma_fabric::Ranks> = Box::new(r);
        let (me, size) = (boxed.rank(), boxed.size());
        assert_eq!(size, 3);
        let mut w = RankedWorld::new(build().unwrap(), boxed, "boxed").unwrap();
        assert_eq!((w.rank(), w.size()), (me, 3));
        assert!(!w.run_until(limit).unwrap());
        let next = w.peek_time().unwrap();
        let busy = !w.is_idle_here();
        // A stop exactly at the next event's time runs it.
        let at = next.unwrap();
        w.run_until(at).unwrap();
        let trace_at = (w.trace().hash(), w.trace().events());
        assert!(w.run_until(Instant(u64::MAX)).unwrap());
        let x = w.exchanged().clone();
        let idle = w.is_idle_here();
        let taken = w.take_host_events();
        let events: Vec<(u32, Vec<String>)> = (0..16)
            .filter(|h| w.is_local(udrma_proto::NodeAddr(*h)))
            .map(|h| (h, events_of(&taken, h)))
            .collect();
        assert!(w.take_host_events().is_empty(), "taken once");
        let words: Vec<Vec<u8>> = (0..3).map(|to| vec![me as u8, to as u8]).collect();
        let heard = w.exchange(words).unwrap();
        (next, busy, idle, heard, events, trace_at, x)
    });
    let mut at_due = build().unwrap();
    at_due
        .set_event_order(udrma_fabric::EventOrder::Windows)
        .unwrap();
    at_due.run_until(limit);
    at_due.run_until(due.unwrap());
    let mut hosts = 0;
    for (me, (next, busy, idle, heard, events, trace_at, x)) in got.into_iter().enumerate() {
        if me == 0 {
            assert_eq!(
                trace_at,
                (at_due.trace().hash(), at_due.trace().events()),
                "a stop at the next event's own time runs it, as one world does"
            );
        }
        // Every message that carried packets carried at least one, and
        // some windows handed nothing on.
        assert!(
            x.packets > 0 && x.messages > 0 && x.messages <= x.packets,
            "rank {me}: {x:?}"
        );
        assert!(x.messages < 2 * x.windows, "rank {me}: {x:?}");
        assert!(x.bytes >= 40 * x.packets, "rank {me}: {x:?}");
        for (h, seen) in events {
            assert!(!seen.is_empty(), "h{h} completed its WRITE on rank {me}");
            assert_eq!(seen, events_of(&all, h), "h{h}'s events on rank {me}");
            hosts += 1;
        }
        assert_eq!(next, due, "rank {me}: the next thing due");
        assert!(busy, "rank {me} has work left at the limit");
        assert!(idle, "rank {me} idle at the end");
        let want: Vec<Vec<u8>> = (0..3).map(|from| vec![from as u8, me as u8]).collect();
        assert_eq!(heard, want, "rank {me} hears every rank's words to it");
    }
    assert_eq!(hosts, 16, "every host on one rank");
}

/// A k=4 fat tree in which every host writes to the host eight along
/// (the other half of the pods), so that every rank of up to four has
/// hosts busy and packets to hand on.
fn fat_pair_of_pods() -> Result<World, FabricError> {
    let (mut w, keys) = world(
        Topology::fat_tree(4, LinkParams::default()).unwrap(),
        FabricConfig::default(),
        RuleSet::new(),
        16 * 1024,
    );
    for h in 0..16 {
        write(&mut w, &keys, h, (h + 8) % 16, 16 * 1024);
    }
    Ok(w)
}

/// A run stopped at a limit says what is due next as one process says
/// it, even when that is a packet one rank keeps for another: one host
/// writes across a slow bottleneck with a deep queue, whose far switch
/// another rank runs, and at the limit the head of the bottleneck's line
/// is still kept by its sender (it arrives later than the next window),
/// while no rank has an event due before it.
#[test]
fn what_is_due_next_counts_the_packets_a_rank_keeps() {
    let build = || {
        let edge = LinkParams::default();
        let bottleneck = LinkParams {
            bandwidth_bps: 1_000_000_000,
            latency: Duration::from_micros(5),
            queue_bytes: 1 << 20,
            ..LinkParams::default()
        };
        let (mut w, keys) = world(
            Topology::dumbbell(1, edge, bottleneck),
            FabricConfig::default(),
            RuleSet::new(),
            64 * 1024,
        );
        write(&mut w, &keys, 0, 1, 64 * 1024);
        Ok::<World, FabricError>(w)
    };
    let limit = Instant::ZERO + Duration::from_micros(10);
    let mut one = build().unwrap();
    one.set_event_order(udrma_fabric::EventOrder::Windows)
        .unwrap();
    assert!(!one.run_until(limit));
    let due = one.peek_time();
    let got = on_ranks(2, |r| {
        let mut w = RankedWorld::new(build().unwrap(), r, "x").unwrap();
        assert!(!w.run_until(limit).unwrap());
        let next = w.peek_time().unwrap();
        assert!(w.run_until(Instant(u64::MAX)).unwrap());
        (next, w.is_idle_here())
    });
    assert!(due.is_some());
    for (r, (next, idle)) in got.iter().enumerate() {
        assert_eq!(*next, due, "rank {r}");
        assert!(idle, "rank {r} at the end");
    }
}
