//! Each fault model on a long run against its expected statistics, and
//! each targeting criterion on its own.

use udrma_faults::{
    Direction, FaultError, Jitter, Model, PacketCtx, Rule, RuleSet, Target, Verdict,
};
use udrma_proto::{Duration, Flags, Instant, NodeAddr, Opcode, Repr};

fn ctx(i: u64) -> PacketCtx {
    PacketCtx {
        now: Instant(i * 1_000_000), // one packet per µs
        link: 0,
        direction: Direction::Forward,
        src: NodeAddr(0),
        dst: NodeAddr(1),
        opcode: Some(Opcode::Write),
        flags: Flags::empty(),
        len: 1000,
    }
}

fn rule(model: Model) -> Rule {
    Rule::new(42, "r", Target::any(), model).unwrap()
}

fn run(rule: &mut Rule, n: u64) -> Vec<Verdict> {
    (0..n).map(|i| rule.judge(&ctx(i))).collect()
}

/// |observed − n·p| within 5 standard deviations of a binomial.
fn assert_binomial(observed: u64, n: u64, p: f64, what: &str) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (observed as f64 - mean).abs() <= 5.0 * sd,
        "{what}: {observed} of {n}, expected {mean:.0} ± {:.0}",
        5.0 * sd
    );
}

#[test]
fn random_loss_one_percent_over_100k() {
    let mut r = rule(Model::Loss {
        p: 0.01,
        correlation: 0.0,
    });
    let drops = run(&mut r, 100_000)
        .iter()
        .filter(|v| **v == Verdict::Drop)
        .count() as u64;
    assert_binomial(drops, 100_000, 0.01, "1% loss");
    assert_eq!(r.counters.dropped, drops);
    assert_eq!(r.counters.matched, 100_000);
}

#[test]
fn gilbert_elliott_bursts_have_the_expected_length_and_rate() {
    // p = P(good→bad) = 1%, r = P(bad→good) = 25%: mean burst 1/r = 4
    // packets, stationary bad share p/(p+r) ≈ 3.85%.
    let mut r = rule(Model::GilbertElliott {
        p: 0.01,
        r: 0.25,
        loss_good: 0.0,
        loss_bad: 1.0,
    });
    let v = run(&mut r, 400_000);
    let mut bursts = Vec::new();
    let mut cur = 0u64;
    for x in &v {
        if *x == Verdict::Drop {
            cur += 1;
        } else if cur > 0 {
            bursts.push(cur);
            cur = 0;
        }
    }
    let mean_burst = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
    assert!(
        (mean_burst - 4.0).abs() < 0.3,
        "mean burst {mean_burst:.2}, expected 4"
    );
    let rate = v.iter().filter(|x| **x == Verdict::Drop).count() as f64 / v.len() as f64;
    let expected = 0.01 / 0.26;
    assert!(
        (rate - expected).abs() < expected * 0.12,
        "loss rate {rate:.4}, expected {expected:.4}"
    );
    // Bursts, not scattered losses: random loss at the same rate would
    // have a mean run length of about 1.04.
    assert!(bursts.iter().any(|b| *b >= 10));
}

#[test]
fn duplication_rate_and_copies() {
    let mut r = rule(Model::Duplicate {
        p: 0.05,
        copies: 2,
        correlation: 0.0,
    });
    let v = run(&mut r, 100_000);
    let dups = v.iter().filter(|x| **x == Verdict::Duplicate(2)).count() as u64;
    assert_binomial(dups, 100_000, 0.05, "5% duplication");
    assert!(v
        .iter()
        .all(|x| matches!(x, Verdict::Pass | Verdict::Duplicate(2))));
}

#[test]
fn reorder_with_gap_sends_every_gapth_packet_at_once() {
    // netem `delay 10ms reorder 100% gap 5`: packets 5, 10, 15, ... go at
    // once, the rest are delayed.
    let mut r = rule(Model::Reorder {
        p: 1.0,
        correlation: 0.0,
        gap: 5,
        delay: Duration::from_millis(10),
        limit: None,
    });
    let v = run(&mut r, 100);
    for (i, x) in v.iter().enumerate() {
        let immediate = (i + 1) % 5 == 0;
        assert_eq!(*x == Verdict::Pass, immediate, "packet {}", i + 1);
        if !immediate {
            assert_eq!(*x, Verdict::Delay(Duration::from_millis(10)));
        }
    }
}

#[test]
fn reorder_rate_without_gap() {
    let mut r = rule(Model::Reorder {
        p: 0.25,
        correlation: 0.0,
        gap: 1,
        delay: Duration::from_micros(50),
        limit: None,
    });
    let v = run(&mut r, 100_000);
    let immediate = v.iter().filter(|x| **x == Verdict::Pass).count() as u64;
    assert_binomial(immediate, 100_000, 0.25, "25% reorder");
}

fn delays(model: Model, n: u64) -> Vec<f64> {
    let mut r = rule(model);
    run(&mut r, n)
        .into_iter()
        .map(|v| match v {
            Verdict::Delay(d) => d.as_ps() as f64 / 1e6,
            Verdict::Pass => 0.0,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn mean_sd(x: &[f64]) -> (f64, f64) {
    let m = x.iter().sum::<f64>() / x.len() as f64;
    let var = x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / x.len() as f64;
    (m, var.sqrt())
}

#[test]
fn delay_jitter_distributions() {
    let us = Duration::from_micros;
    // Uniform 100 ± 10 µs: mean 100, sd 10/√3, bounded.
    let u = delays(
        Model::Delay {
            base: us(100),
            jitter: us(10),
            dist: Jitter::Uniform,
            limit: None,
        },
        50_000,
    );
    let (m, sd) = mean_sd(&u);
    assert!((m - 100.0).abs() < 0.2, "uniform mean {m}");
    assert!((sd - 10.0 / 3f64.sqrt()).abs() < 0.2, "uniform sd {sd}");
    assert!(u.iter().all(|d| (90.0..=110.0).contains(d)));
    // Normal 100, σ 10.
    let n = delays(
        Model::Delay {
            base: us(100),
            jitter: us(10),
            dist: Jitter::Normal,
            limit: None,
        },
        50_000,
    );
    let (m, sd) = mean_sd(&n);
    assert!((m - 100.0).abs() < 0.3, "normal mean {m}");
    assert!((sd - 10.0).abs() < 0.3, "normal sd {sd}");
    // Pareto shape 3: never below base, mean extra jitter/2, heavy tail.
    let p = delays(
        Model::Delay {
            base: us(100),
            jitter: us(10),
            dist: Jitter::Pareto,
            limit: None,
        },
        50_000,
    );
    let (m, _) = mean_sd(&p);
    assert!(p.iter().all(|d| *d >= 100.0));
    assert!((m - 105.0).abs() < 0.5, "pareto mean {m}");
    assert!(p.iter().any(|d| *d > 150.0), "heavy tail");
}

#[test]
fn corruption_flips_exactly_k_bits_and_the_icrc_catches_them() {
    let mut r = rule(Model::Corrupt { p: 0.01, bits: 3 });
    let v = run(&mut r, 100_000);
    let hits = v.iter().filter(|x| **x == Verdict::Corrupt(3)).count() as u64;
    assert_binomial(hits, 100_000, 0.01, "1% corruption");
    let packet = udrma_proto::samples::every_kind()[0].to_vec().unwrap();
    for _ in 0..1000 {
        let mut bytes = packet.clone();
        r.corrupt(&mut bytes, 3);
        let flipped: u32 = bytes
            .iter()
            .zip(&packet)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert_eq!(flipped, 3);
        assert!(
            Repr::parse_bytes(&bytes).is_err(),
            "CRC-32 catches every 3-bit error"
        );
    }
}

#[test]
fn rate_shaping_holds_the_rate_and_the_queue_limit_drops() {
    // 1000-byte packets every µs (8 Gb/s offered) into a 1 Gb/s shaper
    // holding at most 10 packets.
    let mut r = rule(Model::Rate {
        bits_per_sec: 1_000_000_000,
        limit: 10,
    });
    let v = run(&mut r, 10_000);
    // A packet takes 8 µs to serialise and one arrives each µs: the first
    // goes at once, the k-th waits 7k µs while the queue has room.
    assert_eq!(v[0], Verdict::Pass);
    for (k, x) in v.iter().enumerate().take(10).skip(1) {
        assert_eq!(
            *x,
            Verdict::Delay(Duration::from_micros(7 * k as u64)),
            "packet {k}"
        );
    }
    let passed = v.iter().filter(|x| !matches!(x, Verdict::Drop)).count();
    // 10 ms at 1 Gb/s is 1250 packets (+ the 10 in the queue at the end).
    assert!((1250..=1262).contains(&passed), "{passed} passed");
    let max_wait = v
        .iter()
        .filter_map(|x| match x {
            Verdict::Delay(d) => Some(d.as_ps()),
            _ => None,
        })
        .max()
        .unwrap();
    assert!(
        max_wait <= Duration::from_micros(80).as_ps(),
        "queue of 10 × 8 µs: {max_wait} ps"
    );
}

#[test]
fn queue_limit_drops_what_the_delay_line_cannot_hold() {
    // netem `delay 100us limit 10`: one packet per µs, each held 100 µs;
    // at most 10 may be held, so 10 of every 100 get through.
    let mut r = rule(Model::Delay {
        base: Duration::from_micros(100),
        jitter: Duration::ZERO,
        dist: Jitter::Uniform,
        limit: Some(10),
    });
    let v = run(&mut r, 1000);
    let delayed = v.iter().filter(|x| matches!(x, Verdict::Delay(_))).count();
    let dropped = v.iter().filter(|x| **x == Verdict::Drop).count();
    assert_eq!((delayed, dropped), (100, 900));
    // Without a limit nothing is dropped.
    let mut r = rule(Model::Delay {
        base: Duration::from_micros(100),
        jitter: Duration::ZERO,
        dist: Jitter::Uniform,
        limit: None,
    });
    assert!(run(&mut r, 1000)
        .iter()
        .all(|x| matches!(x, Verdict::Delay(_))));
}

#[test]
fn down_and_partition() {
    let mut set = RuleSet::new();
    set.push(
        Rule::new(
            1,
            "flap",
            Target::any().window(Instant(10 * 1_000_000), Instant(20 * 1_000_000)),
            Model::Down,
        )
        .unwrap(),
    );
    let v: Vec<_> = (0..30).map(|i| set.judge(&ctx(i)).0).collect();
    assert!(v[..10].iter().all(|x| *x == Verdict::Pass));
    assert!(v[10..20].iter().all(|x| *x == Verdict::Drop));
    assert!(v[20..].iter().all(|x| *x == Verdict::Pass));

    let part = |two_way| {
        Rule::new(
            1,
            "split",
            Target::any(),
            Model::Partition {
                a: vec![NodeAddr(0)],
                b: vec![NodeAddr(1)],
                two_way,
            },
        )
        .unwrap()
    };
    let back = PacketCtx {
        src: NodeAddr(1),
        dst: NodeAddr(0),
        ..ctx(0)
    };
    let mut one = part(false);
    assert_eq!(one.judge(&ctx(0)), Verdict::Drop);
    assert_eq!(one.judge(&back), Verdict::Pass, "one-way partition");
    // Hosts outside the two sides are not cut off from either.
    for (src, dst) in [(0, 2), (2, 1), (2, 0), (1, 2)] {
        let p = PacketCtx {
            src: NodeAddr(src),
            dst: NodeAddr(dst),
            ..ctx(0)
        };
        assert_eq!(one.judge(&p), Verdict::Pass, "h{src} to h{dst}");
    }
    let mut two = part(true);
    assert_eq!(two.judge(&back), Verdict::Drop);
}

// ------------------------------------------------------------- targeting

fn drop_if(target: Target) -> RuleSet {
    let mut set = RuleSet::new();
    set.push(Rule::new(1, "t", target, Model::Down).unwrap());
    set.resolve(
        |n| match n {
            "h0-e0" => Some(0),
            "h1-e0" => Some(1),
            _ => None,
        },
        &["h0-e0", "h1-e0"],
    )
    .unwrap();
    set
}

#[test]
fn targeting_by_link_direction_flow_opcode_flags() {
    let other_link = PacketCtx { link: 1, ..ctx(0) };
    let reverse = PacketCtx {
        direction: Direction::Reverse,
        ..ctx(0)
    };
    let first = PacketCtx {
        flags: Flags::FIRST | Flags::ACK_REQ,
        ..ctx(0)
    };
    let ack = PacketCtx {
        opcode: Some(Opcode::Ack),
        ..ctx(0)
    };
    let from_h2 = PacketCtx {
        src: NodeAddr(2),
        ..ctx(0)
    };

    let mut s = drop_if(Target::any().links(&["h0-e0"]));
    assert_eq!(
        (s.judge(&ctx(0)).0, s.judge(&other_link).0),
        (Verdict::Drop, Verdict::Pass)
    );
    let mut s = drop_if(Target::any().direction(Direction::Forward));
    assert_eq!(
        (s.judge(&ctx(0)).0, s.judge(&reverse).0),
        (Verdict::Drop, Verdict::Pass)
    );
    let mut s = drop_if(Target::any().flow(&[NodeAddr(0)], &[]));
    assert_eq!(
        (s.judge(&ctx(0)).0, s.judge(&from_h2).0),
        (Verdict::Drop, Verdict::Pass)
    );
    let mut s = drop_if(Target::any().opcodes(&[Opcode::Ack]));
    assert_eq!(
        (s.judge(&ack).0, s.judge(&ctx(0)).0),
        (Verdict::Drop, Verdict::Pass)
    );
    let mut s = drop_if(Target::any().flags(Flags::FIRST));
    assert_eq!(
        (s.judge(&first).0, s.judge(&ctx(0)).0),
        (Verdict::Drop, Verdict::Pass)
    );
}

#[test]
fn drop_the_first_packet_of_every_third_write_between_1_and_2_ms() {
    let mut s = drop_if(
        Target::any()
            .opcodes(&[Opcode::Write])
            .flags(Flags::FIRST)
            .window(
                Instant::ZERO + Duration::from_millis(1),
                Instant::ZERO + Duration::from_millis(2),
            )
            .nth(3, 0, None),
    );
    let mut dropped = Vec::new();
    for i in 0..3000u64 {
        // A FIRST packet every 10 µs, others between.
        let p = PacketCtx {
            flags: if i % 10 == 0 {
                Flags::FIRST
            } else {
                Flags::empty()
            },
            ..ctx(i)
        };
        if s.judge(&p).0 == Verdict::Drop {
            dropped.push(i);
        }
    }
    // FIRST packets in [1 ms, 2 ms): i = 1000, 1010, ..., 1990 (100 of
    // them); every third from the first: 1000, 1030, ..., 1990.
    let expected: Vec<u64> = (0..34).map(|j| 1000 + 30 * j).collect();
    assert_eq!(dropped, expected);
}

#[test]
fn nth_with_a_limit_fires_that_many_times() {
    let mut s = drop_if(Target::any().nth(1, 0, Some(2)));
    let drops = (0..10)
        .filter(|i| s.judge(&ctx(*i)).0 == Verdict::Drop)
        .count();
    assert_eq!(drops, 2);
}

#[test]
fn first_non_pass_verdict_wins_in_install_order() {
    let mut set = RuleSet::new();
    set.push(
        Rule::new(
            1,
            "lose-all",
            Target::any(),
            Model::Loss {
                p: 1.0,
                correlation: 0.0,
            },
        )
        .unwrap(),
    );
    set.push(
        Rule::new(
            1,
            "dup-all",
            Target::any(),
            Model::Duplicate {
                p: 1.0,
                copies: 1,
                correlation: 0.0,
            },
        )
        .unwrap(),
    );
    assert_eq!(set.judge(&ctx(0)), (Verdict::Drop, Some(0)));
    assert_eq!(
        set.rules()[1].counters.matched,
        0,
        "later rules are not consulted"
    );
    let mut set = RuleSet::new();
    set.push(
        Rule::new(
            1,
            "lose-none",
            Target::any(),
            Model::Loss {
                p: 0.0,
                correlation: 0.0,
            },
        )
        .unwrap(),
    );
    set.push(
        Rule::new(
            1,
            "dup-all",
            Target::any(),
            Model::Duplicate {
                p: 1.0,
                copies: 1,
                correlation: 0.0,
            },
        )
        .unwrap(),
    );
    assert_eq!(set.judge(&ctx(0)), (Verdict::Duplicate(1), Some(1)));
}

#[test]
fn bad_rules_are_refused_with_the_reason() {
    let err = Rule::new(
        1,
        "lossy",
        Target::any(),
        Model::Loss {
            p: 1.5,
            correlation: 0.0,
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "rule lossy: p = 1.5 is not a probability in [0, 1]"
    );
    let mut set = RuleSet::new();
    set.push(Rule::new(1, "flap", Target::any().links(&["h0-eO"]), Model::Down).unwrap());
    let err = set.resolve(|_| None, &["h0-e0", "h1-e0"]).unwrap_err();
    assert!(matches!(err, FaultError::UnknownLink { .. }));
    assert_eq!(
        err.to_string(),
        r#"rule flap: unknown link "h0-eO" (did you mean "h0-e0"?)"#
    );
    // Nothing close: the message lists the links there are.
    let mut set = RuleSet::new();
    set.push(Rule::new(1, "cut", Target::any().links(&["nope"]), Model::Down).unwrap());
    let names: Vec<String> = (0..8).map(|i| format!("h{i}-e{}", i / 2)).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let err = set.resolve(|_| None, &names).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"rule cut: unknown link "nope"; its links are h0-e0, h1-e0, h2-e1, h3-e1, h4-e2, h5-e2, ... (8 in all)"#
    );
}

#[test]
fn same_seed_same_draws_different_seed_different_draws() {
    let model = Model::Loss {
        p: 0.5,
        correlation: 0.0,
    };
    let a = run(
        &mut Rule::new(7, "x", Target::any(), model.clone()).unwrap(),
        256,
    );
    let b = run(
        &mut Rule::new(7, "x", Target::any(), model.clone()).unwrap(),
        256,
    );
    let c = run(
        &mut Rule::new(8, "x", Target::any(), model.clone()).unwrap(),
        256,
    );
    let d = run(&mut Rule::new(7, "y", Target::any(), model).unwrap(), 256);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, d, "each rule has its own stream");
}

/// (drop rate, P(drop | the previous packet dropped)) over `n` packets.
fn burstiness(model: Model, n: u64) -> (f64, f64) {
    let v = run(&mut rule(model), n);
    let drops = v.iter().filter(|v| **v == Verdict::Drop).count() as f64;
    let pairs = v
        .windows(2)
        .filter(|w| w[0] == Verdict::Drop && w[1] == Verdict::Drop)
        .count() as f64;
    (drops / n as f64, pairs / drops.max(1.0))
}

#[test]
fn correlated_loss_comes_in_bursts_as_with_netem() {
    // netem's correlation mixes each draw with the previous one: losses
    // follow losses, and (a known property of netem's scheme, kept for
    // fidelity) the overall rate falls far below p as the draws' spread
    // narrows: at p = 0.1 and correlation 0.5, about 0.1 % of packets go
    // (measured 0.0011), a tenth of them right after another loss. For
    // bursts at a chosen rate, use gilbert-elliott.
    let n = 200_000;
    let (rate0, after0) = burstiness(
        Model::Loss {
            p: 0.1,
            correlation: 0.0,
        },
        n,
    );
    let (rate5, after5) = burstiness(
        Model::Loss {
            p: 0.1,
            correlation: 0.5,
        },
        n,
    );
    eprintln!("c=0: rate {rate0:.4}, P(drop|drop) {after0:.4}; c=0.5: rate {rate5:.4}, P(drop|drop) {after5:.4}");
    // Uncorrelated: a drop says nothing about the next packet.
    assert!((rate0 - 0.1).abs() < 0.005, "{rate0}");
    assert!((after0 - rate0).abs() < 0.01, "{after0} vs {rate0}");
    // Correlated: the next packet is far likelier to go too, and the rate
    // is a small fraction of p.
    assert!(after5 > 20.0 * rate5, "{after5} vs {rate5}");
    assert!(rate5 > 0.0002 && rate5 < 0.01, "{rate5}");
}

#[test]
fn correlated_duplication_and_reordering_cluster_too() {
    let n = 100_000;
    // Duplication fires when a packet is copied; reordering when a packet
    // goes at once instead of being held.
    let dup = Model::Duplicate {
        p: 0.1,
        copies: 1,
        correlation: 0.6,
    };
    let reorder = Model::Reorder {
        p: 0.1,
        correlation: 0.6,
        gap: 1,
        delay: Duration::from_micros(10),
        limit: None,
    };
    let copied = |x: &Verdict| matches!(x, Verdict::Duplicate(_));
    let at_once = |x: &Verdict| *x == Verdict::Pass;
    for (name, model, hit) in [
        ("duplicate", dup, &copied as &dyn Fn(&Verdict) -> bool),
        ("reorder", reorder, &at_once),
    ] {
        let v = run(&mut rule(model), n);
        let hits = v.iter().filter(|x| hit(x)).count() as f64;
        let pairs = v.windows(2).filter(|w| hit(&w[0]) && hit(&w[1])).count() as f64;
        let (rate, after) = (hits / n as f64, pairs / hits.max(1.0));
        assert!(hits > 0.0, "{name}: never fired");
        assert!(
            after > 2.0 * rate,
            "{name}: {after} after a hit vs {rate} overall"
        );
    }
}

#[test]
fn a_jittered_delay_line_drops_exactly_when_it_is_full() {
    // netem `delay 50us 40us limit 6`: holds of 10-90 µs release out of
    // order. A packet is dropped exactly when `limit` packets are still
    // held at its arrival; a reference count of the releases checks every
    // verdict.
    let limit = 6;
    let mut r = rule(Model::Delay {
        base: Duration::from_micros(50),
        jitter: Duration::from_micros(40),
        dist: Jitter::Uniform,
        limit: Some(limit),
    });
    let mut releases: Vec<Instant> = Vec::new();
    let (mut dropped, mut delayed) = (0, 0);
    for i in 0..5000 {
        let c = ctx(i);
        let held = releases.iter().filter(|t| **t > c.now).count();
        match r.judge(&c) {
            Verdict::Drop => {
                assert_eq!(held, limit as usize, "packet {i} dropped with room");
                dropped += 1;
            }
            Verdict::Delay(d) => {
                assert!(held < limit as usize, "packet {i} held past the limit");
                releases.push(c.now + d);
                delayed += 1;
            }
            v => panic!("packet {i}: {v:?}"),
        }
    }
    assert!(dropped > 1000 && delayed > 300, "{dropped} {delayed}");
    assert_eq!(
        (r.counters.matched, r.counters.dropped, r.counters.delayed),
        (5000, dropped, delayed)
    );
}

#[test]
fn every_fired_verdict_is_counted_once() {
    let mut dup = rule(Model::Duplicate {
        p: 1.0,
        correlation: 0.0,
        copies: 2,
    });
    run(&mut dup, 7);
    let mut corrupt = rule(Model::Corrupt { p: 1.0, bits: 3 });
    run(&mut corrupt, 5);
    let mut delay = rule(Model::Delay {
        base: Duration::from_micros(1),
        jitter: Duration::ZERO,
        dist: Jitter::Uniform,
        limit: None,
    });
    run(&mut delay, 4);
    let c = |r: &Rule| {
        let c = &r.counters;
        (c.matched, c.dropped, c.duplicated, c.delayed, c.corrupted)
    };
    assert_eq!(c(&dup), (7, 0, 7, 0, 0));
    assert_eq!(c(&corrupt), (5, 0, 0, 0, 5));
    assert_eq!(c(&delay), (4, 0, 0, 4, 0));
}

#[test]
fn every_model_limit_is_checked_at_its_edge() {
    let ok = |m: Model| Rule::new(1, "r", Target::any(), m).is_ok();
    let dup = |copies| Model::Duplicate {
        p: 0.5,
        correlation: 0.0,
        copies,
    };
    assert!(ok(dup(1)) && ok(dup(64)));
    assert!(!ok(dup(0)) && !ok(dup(65)));
    let corrupt = |bits| Model::Corrupt { p: 0.5, bits };
    assert!(ok(corrupt(1)) && ok(corrupt(64)));
    assert!(!ok(corrupt(0)) && !ok(corrupt(65)));
    let rate = |bits_per_sec, limit| Model::Rate {
        bits_per_sec,
        limit,
    };
    assert!(ok(rate(1, 1)));
    assert!(!ok(rate(0, 1)) && !ok(rate(1, 0)) && !ok(rate(0, 0)));
    let err = Rule::new(1, "dup", Target::any(), dup(65)).unwrap_err();
    assert_eq!(err.to_string(), "rule dup: copies must be 1..=64");
}

#[test]
fn corruption_reaches_every_part_of_the_packet() {
    let mut r = rule(Model::Corrupt { p: 1.0, bits: 1 });
    let len = 1000;
    let mut hit = vec![false; 10];
    for _ in 0..2000 {
        let mut bytes = vec![0u8; len];
        r.corrupt(&mut bytes, 1);
        let at = bytes.iter().position(|b| *b != 0).unwrap();
        hit[at * 10 / len] = true;
    }
    assert!(hit.iter().all(|h| *h), "every tenth of the packet: {hit:?}");
    // Through the set, with the stream of the rule that said `Corrupt`.
    let mut set = RuleSet::new();
    assert!(set.is_empty());
    set.push(rule(Model::Corrupt { p: 1.0, bits: 5 }));
    assert!(!set.is_empty());
    let mut bytes = vec![0u8; 64];
    set.corrupt(0, &mut bytes, 5);
    assert_eq!(bytes.iter().map(|b| b.count_ones()).sum::<u32>(), 5);
}

#[test]
fn an_unknown_name_is_answered_with_the_nearest_known_one_if_near() {
    use udrma_faults::rule::closest;
    let names = ["h0-e0", "h1-e0", "e0-a1", "s0-s1"];
    // One edit from exactly one name.
    assert_eq!(closest("h1-e9", &names).as_deref(), Some("h1-e0"));
    // An insertion, a deletion and a substitution each count one.
    assert_eq!(closest("h0-e00", &names).as_deref(), Some("h0-e0"));
    assert_eq!(closest("s0s1", &names).as_deref(), Some("s0-s1"));
    assert_eq!(closest("e0-b1", &names).as_deref(), Some("e0-a1"));
    // The nearest wins over one two edits away.
    assert_eq!(
        closest("h1-a0", &["h0-b0", "h1-b0"]).as_deref(),
        Some("h1-b0")
    );
    // Up to half the name's length (at least 3) in edits, no further.
    assert_eq!(closest("abcdef", &["abcxyz"]).as_deref(), Some("abcxyz"));
    assert_eq!(closest("abcdef", &["abwxyz"]), None);
    assert_eq!(closest("zzzz", &names), None);
    // Insertions and deletions count too.
    assert_eq!(closest("abcdef", &["abcdefwxyz"]), None);
    assert_eq!(
        closest("abcdef", &["abcdefwxy"]).as_deref(),
        Some("abcdefwxy")
    );
    assert_eq!(closest("abcdefgh", &["abc"]), None);
    assert_eq!(closest("abcdefgh", &["abcd"]).as_deref(), Some("abcd"));
}

/// Drawing by packet: a key's verdict is the same whatever was judged
/// before it, in any order, and the verdicts over many keys still have
/// the model's statistics; the bits a corruption flips follow the key too.
#[test]
fn a_keyed_verdict_depends_on_its_key_alone() {
    let models = [
        Model::Loss {
            p: 0.3,
            correlation: 0.0,
        },
        Model::Duplicate {
            p: 0.3,
            copies: 2,
            correlation: 0.0,
        },
        Model::Corrupt { p: 0.3, bits: 3 },
        Model::Delay {
            base: Duration::from_micros(1),
            jitter: Duration::from_nanos(500),
            dist: Jitter::Normal,
            limit: None,
        },
        Model::Reorder {
            p: 0.3,
            correlation: 0.0,
            gap: 1,
            delay: Duration::from_micros(2),
            limit: None,
        },
    ];
    for model in models {
        assert!(rule(model.clone()).draws_by_packet(), "{model:?}");
        let keys: Vec<u64> = (0..8_000u64).map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
        let mut forward = rule(model.clone());
        let ahead: Vec<Verdict> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| forward.judge_keyed(&ctx(i as u64), *k))
            .collect();
        let mut backward = rule(model.clone());
        let mut behind: Vec<Verdict> = keys
            .iter()
            .enumerate()
            .rev()
            .map(|(i, k)| backward.judge_keyed(&ctx(i as u64), *k))
            .collect();
        behind.reverse();
        assert_eq!(ahead, behind, "{model:?}: judged in the other order");
        let fired = ahead.iter().filter(|v| **v != Verdict::Pass).count() as u64;
        // A reorder sends 30 % at once and delays the rest.
        match model {
            Model::Delay { .. } => {}
            Model::Reorder { .. } => assert_binomial(fired, 8_000, 0.7, &format!("{model:?}")),
            _ => assert_binomial(fired, 8_000, 0.3, &format!("{model:?}")),
        }
        // A key is not the stream: the stream's verdicts differ.
        assert_ne!(run(&mut rule(model.clone()), 8_000), ahead, "{model:?}");
    }
    let mut a = rule(Model::Corrupt { p: 1.0, bits: 5 });
    let mut b = rule(Model::Corrupt { p: 1.0, bits: 5 });
    let (mut x, mut y) = (vec![0u8; 64], vec![0u8; 64]);
    b.corrupt_keyed(99, &mut [0u8; 64], 5);
    a.corrupt_keyed(7, &mut x, 5);
    b.corrupt_keyed(7, &mut y, 5);
    assert_eq!(x, y, "the same key flips the same bits");
    assert_eq!(x.iter().map(|b| b.count_ones()).sum::<u32>(), 5);
    let mut z = vec![0u8; 64];
    a.corrupt_keyed(8, &mut z, 5);
    assert_ne!(x, z, "another key, other bits");
}

/// A rule whose verdicts depend on the packets before it does not draw
/// by packet: given a key it draws from its stream, as before.
#[test]
fn rules_with_memory_draw_from_their_stream_even_when_keyed() {
    let with_memory = [
        (
            Target::any(),
            Model::GilbertElliott {
                p: 0.1,
                r: 0.25,
                loss_good: 0.0,
                loss_bad: 1.0,
            },
        ),
        (
            Target::any(),
            Model::Loss {
                p: 0.3,
                correlation: 0.5,
            },
        ),
        (
            Target::any(),
            Model::Reorder {
                p: 0.3,
                correlation: 0.0,
                gap: 3,
                delay: Duration::from_micros(2),
                limit: None,
            },
        ),
        (
            Target::any().nth(3, 0, None),
            Model::Loss {
                p: 1.0,
                correlation: 0.0,
            },
        ),
        (
            Target::any(),
            Model::Delay {
                base: Duration::from_micros(1),
                jitter: Duration::ZERO,
                dist: Jitter::Uniform,
                limit: Some(10),
            },
        ),
    ];
    for (target, model) in with_memory {
        let make = || Rule::new(42, "r", target.clone(), model.clone()).unwrap();
        assert!(!make().draws_by_packet(), "{model:?}");
        let (mut keyed, mut plain) = (make(), make());
        for i in 0..2_000 {
            assert_eq!(
                keyed.judge_keyed(&ctx(i), i * 7),
                plain.judge(&ctx(i)),
                "{model:?}, packet {i}"
            );
        }
    }
}

/// A rule set judging by key: the first rule with a verdict other than
/// Pass wins and is named, and the bits it corrupts are the ones its
/// rule draws for that key.
#[test]
fn a_rule_set_judges_by_key_in_install_order() {
    let never = || {
        let model = Model::Loss {
            p: 0.0,
            correlation: 0.0,
        };
        Rule::new(42, "never", Target::any(), model).unwrap()
    };
    let always = || {
        Rule::new(
            42,
            "flip",
            Target::any(),
            Model::Corrupt { p: 1.0, bits: 4 },
        )
        .unwrap()
    };
    let mut set = RuleSet::new();
    set.push(never());
    set.push(always());
    assert_eq!(set.judge_keyed(&ctx(0), 5), (Verdict::Corrupt(4), Some(1)));
    let (mut got, mut want) = ([0u8; 32], [0u8; 32]);
    set.corrupt_keyed(1, 5, &mut got, 4);
    always().corrupt_keyed(5, &mut want, 4);
    assert_eq!(got, want);
    assert_eq!(got.iter().map(|b| b.count_ones()).sum::<u32>(), 4);
    let mut quiet = RuleSet::new();
    quiet.push(never());
    assert_eq!(quiet.judge_keyed(&ctx(0), 5), (Verdict::Pass, None));
}
