//! Lookahead windows (`EventOrder::Windows`): the same stories as in time
//! order, told node by node within windows as wide as the shortest link
//! latency. Every event a node schedules inside its window is checked to
//! be its own (the loop stops otherwise), so each story here also checks
//! that nothing in it reaches another node sooner than a link allows.

mod common;

use common::*;
use udrma_fabric::{EventOrder, FabricConfig, LinkParams, Policy, Topology, WindowError, World};
use udrma_faults::{Jitter, Model, Rule, RuleSet, Target};
use udrma_nic::NicConfig;
use udrma_proto::{Duration, Instant};

/// The messy rules (loss, duplication, corruption) and an unlimited
/// jittered delay on every link: draws, copies, rebuilt packets and
/// packets re-entering a queue later.
fn messy(seed: u64) -> RuleSet {
    let mut set = messy_rules(seed, 0.02);
    let jitter = Model::Delay {
        base: Duration::from_nanos(200),
        jitter: Duration::from_nanos(300),
        dist: Jitter::Uniform,
        limit: None,
    };
    set.push(Rule::new(seed, "jitter", Target::any(), jitter).unwrap());
    set
}

/// Sixteen WRITEs of 200 KiB across a sprayed k=4 fat tree whose links
/// lose, duplicate, corrupt and delay, with a tap on one link: returns
/// the trace hash and the capture's frame times, after checking that
/// every WRITE completed and landed byte for byte.
fn messy_fat_tree(order: EventOrder) -> (u64, Vec<u64>) {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let cfg = FabricConfig {
        seed: 11,
        routing: Policy::Spray,
        nic: NicConfig {
            max_retries: 20,
            ..NicConfig::default()
        },
        ..FabricConfig::default()
    };
    let (mut w, keys) = world(topo, cfg, messy(11), 256 * 1024);
    let width = w.set_event_order(order).unwrap();
    assert_eq!(
        width,
        (order == EventOrder::Windows).then(|| Duration::from_micros(1)),
        "windows as wide as the 1 us links"
    );
    let pcap = Shared::default();
    w.tap(&["h0-e0"], Box::new(pcap.clone())).unwrap();
    let wrs: Vec<_> = (0..16)
        .map(|h| write(&mut w, &keys, h, (h + 5) % 16, 200 * 1024))
        .collect();
    assert!(w.run());
    w.finish().unwrap();
    for (h, wr) in wrs.into_iter().enumerate() {
        let h = h as u32;
        assert_eq!(completions(&w, h, wr), vec![true], "h{h}, {order:?}");
        assert!(landed(&w, &keys, h, (h + 5) % 16, 200 * 1024), "h{h}");
    }
    let s = w.stats();
    assert!(
        s.duplicated > 0 && s.corrupted > 0 && s.delayed > 0,
        "{s:?}"
    );
    // Every hop is an event, and the events are counted in both orders.
    assert!(s.packet_hops > 0 && s.events > s.packet_hops, "{s:?}");
    let frames: Vec<u64> = udrma_proto::pcap::PcapSource::new(&pcap.bytes()[..])
        .unwrap()
        .map(|f| f.unwrap().time_ns)
        .collect();
    (w.trace().hash(), frames)
}

/// The messy fat tree in windows: every WRITE lands, the capture stays in
/// time order (frames are written once no window can add an earlier one),
/// the same seed gives the same hash, and that hash is the golden one in
/// debug and release alike. It differs from time order's: the order of a
/// window's events is part of what the trace records.
#[test]
fn the_messy_fat_tree_lands_every_write_in_windows_too() {
    let (hash, frames) = messy_fat_tree(EventOrder::Windows);
    assert!(frames.len() > 100, "{} frames", frames.len());
    assert!(
        frames.windows(2).all(|p| p[0] <= p[1]),
        "capture in time order"
    );
    assert_eq!(messy_fat_tree(EventOrder::Windows).0, hash, "deterministic");
    let (time_hash, time_frames) = messy_fat_tree(EventOrder::Time);
    assert_ne!(time_hash, hash);
    assert!(time_frames.windows(2).all(|p| p[0] <= p[1]));
    let golden = include_str!("golden/k4-messy-windows-seed11.hash").trim();
    assert_eq!(
        format!("{hash:016x}"),
        golden,
        "trace hash in windows changed"
    );
}

/// NICs that take time for every packet: their receive side delivers
/// through the cost model's own events (a host's, carrying the packet),
/// which windows must keep at that host. Sixteen WRITEs across a k=4 fat
/// tree complete and land in both orders. (A link flap and a host pause
/// run in both orders in `tests/world.rs`.)
#[test]
fn costed_nics_deliver_through_their_own_events_in_windows() {
    for order in [EventOrder::Time, EventOrder::Windows] {
        let cfg = FabricConfig {
            nic: costed_nics(150),
            ..FabricConfig::default()
        };
        let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let (mut w, keys) = world(topo, cfg, RuleSet::new(), 256 * 1024);
        w.set_event_order(order).unwrap();
        let wrs: Vec<_> = (0..16)
            .map(|h| write(&mut w, &keys, h, (h + 3) % 16, 100 * 1024))
            .collect();
        assert!(w.run());
        for (h, wr) in wrs.into_iter().enumerate() {
            let h = h as u32;
            assert_eq!(completions(&w, h, wr), vec![true], "h{h}, {order:?}");
            assert!(landed(&w, &keys, h, (h + 3) % 16, 100 * 1024));
        }
    }
}

/// `run_until` stops at its limit in windows too: nothing later has run,
/// the clock is not past it, and the run picks up from there.
#[test]
fn windows_stop_exactly_at_the_limit() {
    let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
    let (mut w, keys) = world(topo, FabricConfig::default(), RuleSet::new(), 1 << 20);
    w.set_event_order(EventOrder::Windows).unwrap();
    let wr = write(&mut w, &keys, 0, 9, 512 * 1024);
    // 2.5 us: half way through a window.
    let limit = Instant::ZERO + Duration::from_nanos(2_500);
    assert!(!w.run_until(limit));
    assert!(w.now() <= limit && w.now() > Instant::ZERO, "{}", w.now());
    assert!(completions(&w, 0, wr).is_empty());
    let at = w.peek_time().expect("more to come");
    assert!(at > limit, "the next event ({at}) is past the limit");
    // A limit exactly at an event's time runs that event.
    assert!(!w.run_until(at));
    assert!(w.peek_time().is_some_and(|next| next > at));
    assert!(w.run());
    assert_eq!(completions(&w, 0, wr), vec![true]);
    assert!(landed(&w, &keys, 0, 9, 512 * 1024));
}

/// Windows are the same model as time order, not the same run: ties at
/// one node's picosecond and the draws several nodes share come in
/// another order. Over eight seeds of a sprayed permutation of 1 MiB
/// WRITEs on a k=4 fat tree, the two orders finish within 3 % of each
/// other on average, and no seed's runs differ by more than 10 % (nor
/// their counts of events pending at most by a factor of two).
#[test]
fn windows_and_time_order_finish_alike() {
    let finish = |seed: u64, order: EventOrder| {
        let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let cfg = FabricConfig {
            seed,
            routing: Policy::Spray,
            ..FabricConfig::default()
        };
        let (mut w, keys) = world(topo, cfg, RuleSet::new(), 1 << 20);
        w.set_event_order(order).unwrap();
        let to: Vec<u32> = permutation(16, seed);
        for h in 0..16 {
            write(&mut w, &keys, h, to[h as usize], 1 << 20);
        }
        assert!(w.run());
        (w.now().as_ps() as f64, w.stats().max_event_queue)
    };
    let mut sum = (0.0, 0.0);
    for seed in 1..=8 {
        let ((t, tq), (win, wq)) = (
            finish(seed, EventOrder::Time),
            finish(seed, EventOrder::Windows),
        );
        assert!(
            (win / t - 1.0).abs() < 0.10,
            "seed {seed}: {t} ps against {win} ps"
        );
        // The pending count is taken at other moments, not of other things.
        assert!(
            wq * 2 > tq && wq < tq * 2,
            "seed {seed}: {tq} events pending at most against {wq}"
        );
        sum = (sum.0 + t, sum.1 + win);
    }
    let ratio = sum.1 / sum.0;
    assert!(
        (ratio - 1.0).abs() < 0.03,
        "mean finish, windows over time: {ratio}"
    );
}

/// A permutation of `n` hosts with no fixed point, from `seed`.
fn permutation(n: u32, seed: u64) -> Vec<u32> {
    let shift = 1 + (seed as u32 % (n - 1));
    (0..n).map(|h| (h + shift) % n).collect()
}

/// What would break a window's promise is refused, naming why: a rate
/// shaper (its backlog needs packets in time order), a delay with a
/// queue limit, and a link without latency. The world keeps time order.
#[test]
fn windows_are_refused_where_they_would_change_the_model() {
    let with = |model: Model| {
        let topo = Topology::fat_tree(4, LinkParams::default()).unwrap();
        let mut w = World::new(
            topo,
            FabricConfig::default(),
            rules(1, vec![("r", Target::any(), model)]),
        )
        .unwrap();
        let got = w.set_event_order(EventOrder::Windows);
        (got, w.event_order())
    };
    let rate = Model::Rate {
        bits_per_sec: 10_000_000_000,
        limit: 100,
    };
    assert_eq!(
        with(rate),
        (Err(WindowError::TimedRule("r".into())), EventOrder::Time)
    );
    let held = Model::Delay {
        base: Duration::from_micros(1),
        jitter: Duration::ZERO,
        dist: Jitter::Uniform,
        limit: Some(10),
    };
    assert!(with(held).0.is_err());
    let free = Model::Delay {
        base: Duration::from_micros(1),
        jitter: Duration::ZERO,
        dist: Jitter::Uniform,
        limit: None,
    };
    assert_eq!(
        with(free),
        (Ok(Some(Duration::from_micros(1))), EventOrder::Windows)
    );
    let instant = LinkParams {
        latency: Duration::ZERO,
        ..LinkParams::default()
    };
    let mut w = World::new(
        Topology::pair(instant),
        FabricConfig::default(),
        RuleSet::new(),
    )
    .unwrap();
    let err = w.set_event_order(EventOrder::Windows).unwrap_err();
    assert_eq!(err, WindowError::ZeroLatency);
    assert!(err.to_string().contains("zero latency"));
    assert_eq!(w.set_event_order(EventOrder::Time), Ok(None));
}

/// `run_for` runs in slices of events and returns between them: in time
/// order and in windows, a run in slices has the trace, counters and
/// clock of the run in one go, to a time limit and then to the end.
#[test]
fn a_run_in_slices_is_the_run_in_one_go() {
    use udrma_fabric::Ran;
    for order in [EventOrder::Time, EventOrder::Windows] {
        let build = || {
            let mut w = udrma_fabric::shapes::speed_shape(4, 5).unwrap();
            w.set_event_order(order).unwrap();
            w
        };
        let limit = Instant::ZERO + Duration::from_micros(40);
        let mut whole = build();
        assert!(!whole.run_until(limit), "{order:?}: the limit comes first");
        let mut sliced = build();
        let mut slices = 0;
        loop {
            match sliced.run_for(limit, 1000) {
                Ran::Budget => slices += 1,
                Ran::Limit => break,
                Ran::Idle => panic!("{order:?}: idle before the limit"),
            }
        }
        assert!(slices > 10, "{order:?}: {slices} slices");
        let same = |a: &World, b: &World| {
            assert_eq!(a.trace().hash(), b.trace().hash(), "{order:?}");
            assert_eq!(a.stats().events, b.stats().events, "{order:?}");
            assert_eq!(a.stats().delivered, b.stats().delivered, "{order:?}");
            assert_eq!(a.now(), b.now(), "{order:?}");
        };
        same(&whole, &sliced);
        assert!(whole.run());
        while sliced.run_for(Instant(u64::MAX), 5000) == Ran::Budget {}
        same(&whole, &sliced);
    }
}
