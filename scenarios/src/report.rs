//! What a run reports: the JSON object of `udrma run --json` and the
//! human summary table; its children draw pictures:
//! - [`drops`]: every packet lost, by cause;
//! - [`families`]: what each workload family adds (messaging's per-size
//!   rows, the collective study's sides, the non-contiguous figures);
//! - [`ladder`]: ladder (sequence) diagrams of the packets between two
//!   hosts;
//! - [`osu`]: a collective by one of MPI's algorithms as an OSU-shaped
//!   table;
//! - [`pfc`]: what PFC did in a run, and a lossless fabric's own checks;
//! - [`svg`]: SVG drawings as plain text (sweep plots and ladders);
//! - [`timeline`]: the run as a Chrome trace-event timeline.

pub mod drops;
pub mod families;
pub mod ladder;
pub mod osu;
pub mod pfc;
pub mod svg;
pub mod timeline;

pub use drops::{Drops, RuleDrops};
pub use families::{
    CollectiveReport, CollectiveSide, MessagingReport, NoncontigReport, SizeRow, Spread,
};
use pfc::lossless_checks;
pub use pfc::{PfcDeadlockReport, PfcPortReport, PfcReport};

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use udrma_proto::{Duration, Instant};

use crate::backend::Backend;
use crate::file::checks::CHECKS;
use crate::plan::resolved::Plan;

/// Packet counters.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Packets {
    /// Datagrams the NICs sent.
    pub sent: u64,
    /// Datagrams handed to a NIC.
    pub delivered: u64,
    /// Dropped by the fabric (faults, full queues, MTU, no route).
    pub dropped: u64,
    /// Extra copies made by duplicate faults.
    pub duplicated: u64,
    /// Delivered after a later packet of the same flow.
    pub reordered: u64,
    /// Corrupted by faults.
    pub corrupted: u64,
    /// Marked Congestion Experienced on the way.
    pub ecn_marked: u64,
    /// Payloads cut off by trimming switches (their headers went on and
    /// were NACKed; not counted in `dropped`).
    pub trimmed: u64,
}

/// Operation counters.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Ops {
    /// Posted (or refused at post).
    pub posted: u64,
    /// Completed successfully.
    pub completed: u64,
    /// Completed in error or refused.
    pub failed: u64,
}

/// Post-to-completion times.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

/// Escape channel counters, summed over hosts.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Escape {
    /// Packets parked.
    pub buffered: u64,
    /// Applied when their operation registered.
    pub drained: u64,
    /// Dropped at their timer.
    pub expired: u64,
    /// Dropped because the channel was full.
    pub overflow: u64,
}

/// One run's results (`udrma run --json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Seed used.
    pub seed: u64,
    /// Where the packets went: `sim` (the simulated fabric) or `udp` (real
    /// sockets on loopback, in real time).
    pub backend: String,
    /// Trace hash, 16 hex digits (real-time runs have none).
    pub trace_hash: String,
    /// Simulated time at the end.
    pub sim_time_ns: u64,
    /// Wall-clock seconds (filled in by the CLI; the runner has no clock).
    pub wall_s: f64,
    /// Events processed.
    pub events: u64,
    /// Link crossings.
    pub packet_hops: u64,
    /// Link crossings per wall second (filled in with `wall_s`).
    pub packet_hops_per_s: f64,
    /// Packet counters.
    pub packets: Packets,
    /// Every packet lost, by cause (adding up to its total).
    pub lost: Drops,
    /// Operation counters.
    pub ops: Ops,
    /// Post-to-completion times in ns.
    pub completion_ns: Latency,
    /// Bytes of successful operations over the time from the first post
    /// to the last completion.
    pub goodput_gbps: f64,
    /// The congestion controller (`none`, `nscc`, `dcqcn`, `rccc`).
    pub cc: String,
    /// Acknowledged packets whose receiver echoed a CE mark.
    pub ecn_echoes: u64,
    /// Retransmissions (all hosts; reduce packets included).
    pub retransmits: u64,
    /// Packets judged lost because a later packet of their operation was
    /// acknowledged first, counted as they are judged: one acknowledged
    /// before its copy leaves is not sent again, so this can exceed
    /// `retransmits`.
    pub fast_retransmits: u64,
    /// Of those, found not needed: answered too soon to be the copy's, or
    /// reported a duplicate by the receiver after their own ACK (flag
    /// `DUP`; docs/congestion.md).
    pub spurious_fast_retransmits: u64,
    /// Of them, tail loss probes (`[nic] tail_probe`).
    pub tail_probes: u64,
    /// Retransmit timer expiries (all hosts; reduce packets included).
    pub timeouts: u64,
    /// Duplicates dropped by registry masks (and by reduce branch slots).
    pub dup_dropped: u64,
    /// Escape channel.
    pub escape: Escape,
    /// NACKs sent.
    pub nacks: u64,
    /// Check name → passed.
    pub checks: BTreeMap<String, bool>,
    /// Why checks failed, and other findings.
    pub notes: Vec<String>,
    /// The caller's observer stopped the run before its end (Ctrl-C in
    /// the CLI): what it reports is the run so far. In the JSON only
    /// when true.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// The messaging layer's counters and per-size table (messaging
    /// scenarios only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messaging: Option<MessagingReport>,
    /// The non-contiguous ping-pong's figures (noncontig scenarios only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noncontig: Option<NoncontigReport>,
    /// The collective study's figures (collective scenarios only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveReport>,
    /// A collective by one of MPI's algorithms: the OSU-shaped table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled: Option<osu::OsuReport>,
    /// The flow workloads' completion times and slowdown (`flows`
    /// workloads only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flows: Option<crate::plan::flows::FlowStats>,
    /// A lossless fabric's pauses and deadlock (`[topology] pfc = true`
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pfc: Option<PfcReport>,
    /// A run on ranks: how many ran, and what each exchanged (like the
    /// wall time, not part of what a run on ranks shares with one
    /// process's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<RankFigures>>,
    /// The ladder diagram, when one was asked for.
    #[serde(skip)]
    pub ladder_svg: Option<String>,
    /// The timeline (Chrome trace-event JSON), when one was asked for.
    #[serde(skip)]
    pub timeline_json: Option<String>,
    /// The RDMA operations' spans, while the timeline is being made.
    #[serde(skip)]
    pub(crate) op_spans: Vec<timeline::OpSpan>,
    /// The retransmit timeouts the NICs recorded (host, picoseconds,
    /// message id), while the timeline is being made.
    #[serde(skip)]
    pub(crate) timeout_marks: Vec<(u32, u64, u32)>,
    /// Every packet presented to the fault rules, in judging order, when
    /// the run's options asked (`RunOptions::egress_log`; the simulated
    /// fabric only).
    #[serde(skip)]
    pub egress: Option<Vec<udrma_fabric::Egress>>,
    /// Before each event, the packets judged so far and the state's
    /// fingerprint, when the run's options asked
    /// (`RunOptions::fingerprints`; the `fingerprint` feature, the
    /// simulated fabric, one thread); with why they stopped, if they did.
    #[serde(skip)]
    pub fingerprints: Option<udrma_fabric::FingerprintLog>,
}

impl Report {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.values().all(|v| *v)
    }

    /// Sets the wall time and what follows from it.
    pub fn set_wall(&mut self, wall_s: f64) {
        self.wall_s = wall_s;
        self.packet_hops_per_s = if wall_s > 0.0 {
            (self.packet_hops as f64 / wall_s).round()
        } else {
            0.0
        };
    }

    /// The human summary.
    pub fn table(&self) -> String {
        let mut s = String::new();
        self.head(&mut s);
        self.counts(&mut s);
        self.noncontig_lines(&mut s);
        self.collective_lines(&mut s);
        if let Some(o) = &self.scheduled {
            o.lines(&mut s);
        }
        self.messaging_lines(&mut s);
        self.fabric_lines(&mut s);
        self.rank_lines(&mut s);
        self.check_lines(&mut s);
        s
    }

    /// A run on ranks: one line per rank.
    fn rank_lines(&self, s: &mut String) {
        let Some(ranks) = &self.ranks else {
            return;
        };
        let _ = writeln!(
            s,
            "ranks       {} (windows run and skipped, and what each sent the others)",
            ranks.len()
        );
        for (r, x) in ranks.iter().enumerate() {
            let _ = writeln!(
                s,
                "  rank {r}    {} windows, {} skipped; {} packets in {} messages, {} bytes",
                x.windows, x.skipped, x.packets, x.messages, x.bytes
            );
        }
    }

    /// The first lines: what ran, and how long it took.
    fn head(&self, s: &mut String) {
        if self.backend == "sim" {
            let _ = writeln!(
                s,
                "scenario    {}  (seed {}, trace {})",
                self.scenario, self.seed, self.trace_hash
            );
            let _ = writeln!(
                s,
                "simulated   {:.3} us in {} events, {} packet-hops ({:.3} s wall, {:.2} M hops/s)",
                self.sim_time_ns as f64 / 1e3,
                self.events,
                self.packet_hops,
                self.wall_s,
                self.packet_hops_per_s / 1e6
            );
        } else {
            let _ = writeln!(
                s,
                "scenario    {}  (seed {}, {} backend: real sockets, real time, no trace hash)",
                self.scenario, self.seed, self.backend
            );
            let _ = writeln!(
                s,
                "ran         {:.3} us of real time ({:.3} s wall)",
                self.sim_time_ns as f64 / 1e3,
                self.wall_s
            );
        }
    }

    /// Packets, operations, completion times, congestion and the protocol's counters.
    fn counts(&self, s: &mut String) {
        let p = &self.packets;
        let _ = writeln!(
            s,
            "packets     sent {}  delivered {}  dropped {}  duplicated {}  reordered {}  corrupted {}",
            p.sent, p.delivered, p.dropped, p.duplicated, p.reordered, p.corrupted
        );
        self.lost.line(s);
        let _ = writeln!(
            s,
            "ops         posted {}  completed {}  failed {}",
            self.ops.posted, self.ops.completed, self.ops.failed
        );
        let c = &self.completion_ns;
        // A collective moves no RDMA operation's bytes of its own: no
        // goodput to show; a scheduled one's completions are its first
        // size's (its table has every size).
        let tail = if self.scheduled.is_some() {
            "   (the first size's iterations; the table below has each size)".to_string()
        } else if self.collective.is_some() {
            String::new()
        } else if self.ops.failed > 0 {
            // Percentiles are over the completed operations only.
            format!(
                "   goodput {:.2} Gb/s   (over the {} completed)",
                self.goodput_gbps, self.ops.completed
            )
        } else {
            format!("   goodput {:.2} Gb/s", self.goodput_gbps)
        };
        if self.ops.completed == 0 && self.ops.posted > 0 && self.scheduled.is_none() {
            let _ = writeln!(
                s,
                "completion  none of the {} operations completed",
                self.ops.posted
            );
        } else if self.scheduled.is_some() && c.max == 0 {
            let _ = writeln!(
                s,
                "completion  none of the first size's iterations finished (the table below has each size)"
            );
        } else {
            let _ = writeln!(
                s,
                "completion  p50 {:.3} us  p99 {:.3} us  max {:.3} us{tail}",
                c.p50 as f64 / 1e3,
                c.p99 as f64 / 1e3,
                c.max as f64 / 1e3,
            );
        }
        if self.cc != "none" || p.ecn_marked > 0 || p.trimmed > 0 {
            let _ = writeln!(
                s,
                "congestion  cc {}  ecn-marked {}  echoed {}  trimmed {}",
                self.cc, p.ecn_marked, self.ecn_echoes, p.trimmed
            );
        }
        let e = &self.escape;
        let probes = if self.tail_probes > 0 {
            format!(", probes {}", self.tail_probes)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "protocol    retransmits {} (fast {}{probes})  timeouts {}  dup-dropped {}  nacks {}  escape {}/{}/{}/{} (buffered/drained/expired/overflow)",
            self.retransmits, self.fast_retransmits, self.timeouts, self.dup_dropped, self.nacks, e.buffered, e.drained, e.expired, e.overflow
        );
    }

    /// A non-contiguous workload's method, layout and figures.
    fn noncontig_lines(&self, s: &mut String) {
        if let Some(n) = &self.noncontig {
            let _ = writeln!(
                s,
                "noncontig   {} {} ({} requested), {} layout, {}/{} blocks, {} B: one-way p50 {:.3} us, {:.1} MB/s",
                n.method, n.form, n.requested, n.layout, n.blocks[0], n.blocks[1], n.bytes,
                n.latency_p50_us, n.bandwidth_mbs
            );
            let est: Vec<String> = n
                .estimates_us
                .iter()
                .map(|(m, t)| format!("{m} {t:.3}"))
                .collect();
            let _ = writeln!(
                s,
                "            per transfer: {} work requests, {} B copied; keys created {}; translation {} hit / {} fetched; estimates (us) {}",
                n.work_requests, n.bytes_copied, n.keys_created, n.translation[0], n.translation[1], est.join(", ")
            );
            if !n.measured_us.is_empty() {
                let m: Vec<String> = n
                    .measured_us
                    .iter()
                    .map(|(m, t)| {
                        t.map_or(format!("{m} did not finish"), |t| format!("{m} {t:.3}"))
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "            auto: one-way p50 (us) of each method, run first: {}",
                    m.join(", ")
                );
            }
        }
    }

    /// A collective's trees, and each version's times.
    fn collective_lines(&self, s: &mut String) {
        if let Some(c) = &self.collective {
            // The trees of the versions that ran (`method` picks them).
            let mut trees = Vec::new();
            if c.nic.is_some() {
                trees.push(format!(
                    "NIC tree radix {} (root fan-in {}, depth {})",
                    c.radix, c.fan_in, c.depth
                ));
            }
            if c.host.is_some() {
                trees.push(format!("host tree binomial (depth {})", c.host_depth));
            }
            let _ = writeln!(
                s,
                "collective  {} {} of {} x {} ({} B) over {} nodes: {}, {} iterations",
                c.collective,
                c.op,
                c.elements,
                c.datatype,
                c.bytes,
                c.nodes,
                trees.join(", "),
                c.iterations
            );
            for (name, side) in [("nic", &c.nic), ("host", &c.host)] {
                if let Some(x) = side.as_ref().filter(|x| x.completed_iterations == 0) {
                    // Times of no iteration would read as zeros.
                    let _ = writeln!(
                        s,
                        "  {name:<5} no iteration finished (of {});  packets {}  retransmits {}",
                        c.iterations, x.packets, x.retransmits
                    );
                } else if let Some(x) = side {
                    let partial = if x.completed_iterations < c.iterations {
                        format!(
                            "  ({} of {} iterations finished)",
                            x.completed_iterations, c.iterations
                        )
                    } else {
                        String::new()
                    };
                    let _ = writeln!(
                        s,
                        "  {name:<5} all nodes done p50 {:.3} us (min {:.3}, max {:.3});  per node p50 {:.3} p99 {:.3} us;  packets {}  retransmits {}{}",
                        x.completion_us.p50, x.completion_us.min, x.completion_us.max,
                        x.per_node_us.p50, x.per_node_us.p99, x.packets, x.retransmits,
                        if name == "nic" {
                            format!("  descriptors fired {}  duplicates dropped {}{partial}", x.descriptors_fired, x.duplicates)
                        } else {
                            partial
                        }
                    );
                }
            }
            if c.speedup > 0.0 {
                let _ = writeln!(
                    s,
                    "  speedup of the NIC offload over host software: {:.2}x",
                    c.speedup
                );
            }
        }
    }

    /// The messaging protocols used, and each size's figures.
    fn messaging_lines(&self, s: &mut String) {
        if let Some(m) = &self.messaging {
            let _ = writeln!(
                s,
                "messaging   eager {}  r3 {}  rget {}  rput {}  noops {}  credit-stalls {}  fallbacks {}",
                m.eager, m.r3, m.rget, m.rput, m.noops, m.credit_stalls, m.fallbacks
            );
            if !m.sizes.is_empty() {
                let _ = writeln!(
                    s,
                    "  {:<12} {:>10} {:>9} {:>10} {:>12} {:>12}",
                    "workload", "size", "protocol", "messages", "latency_us", "MB/s"
                );
                for r in &m.sizes {
                    let _ = writeln!(
                        s,
                        "  {:<12} {:>10} {:>9} {:>10} {:>12.3} {:>12.1}",
                        format!("{}:{}", r.workload, r.kind),
                        r.size,
                        r.protocol,
                        r.messages,
                        r.latency_us,
                        r.bandwidth_mbs
                    );
                }
            }
        }
    }

    /// Flow completion times, and PFC's pauses and any deadlock.
    fn fabric_lines(&self, s: &mut String) {
        if let Some(f) = &self.flows {
            let _ = writeln!(
                s,
                "flows       {} done  FCT avg {:.3} us  p99 {:.3} us  slowdown avg {:.3}",
                f.flows, f.avg_fct_us, f.p99_fct_us, f.avg_slowdown
            );
        }
        if let Some(p) = &self.pfc {
            let _ = writeln!(
                s,
                "pfc         {} PAUSE, {} RESUME on {} ports, paused {} in all, ingress at most {} B",
                p.pauses,
                p.resumes,
                p.ports.len(),
                udrma_proto::Duration::from_nanos(p.paused_ns),
                p.max_ingress_bytes
            );
            if let Some(d) = &p.deadlock {
                let _ = writeln!(
                    s,
                    "  deadlock  formed at {}: {}",
                    udrma_proto::Duration::from_nanos(d.formed_ns),
                    d.cycle.join(" waits for ")
                );
            }
        }
    }

    /// Every check's verdict, and the first ten notes.
    fn check_lines(&self, s: &mut String) {
        let _ = write!(s, "checks     ");
        for name in CHECKS {
            match self.checks.get(name) {
                Some(true) => {
                    let _ = write!(s, " {name}:PASS");
                }
                Some(false) => {
                    let _ = write!(s, " {name}:FAIL");
                }
                None => {}
            }
        }
        let _ = writeln!(s);
        for n in self.notes.iter().take(10) {
            let _ = writeln!(s, "  note: {n}");
        }
        if self.notes.len() > 10 {
            let _ = writeln!(s, "  note: ... {} more", self.notes.len() - 10);
        }
    }
}

/// The retransmit timeouts every local NIC recorded (none unless a
/// timeline asked them to).
fn recorded_timeouts(world: &dyn Backend) -> Vec<(u32, u64, u32)> {
    let mut all = Vec::new();
    for h in (0..world.n_hosts() as u32).map(udrma_proto::NodeAddr) {
        if world.is_local(h) {
            let log = world.nic(h).recorded_timeouts();
            all.extend(log.iter().map(|(t, msg)| (h.0, t.as_ps(), *msg)));
        }
    }
    all
}

fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Assembles the report from the world and the operations.
pub(crate) fn build(
    plan: &Plan,
    world: &dyn Backend,
    ops: &[OpOutcome],
    posted: u64,
    checks: BTreeMap<String, bool>,
    notes: Vec<String>,
) -> Report {
    let fs = world.traffic();
    let nic = world.nic_sums();
    // Over the operations that completed: a failed one's time is how
    // long it took to give up, not a completion time.
    let mut lat: Vec<u64> = ops
        .iter()
        .filter(|o| o.ok == Some(true))
        .filter_map(|o| o.latency.map(|d| d.as_nanos()))
        .collect();
    lat.sort_unstable();
    let ok_bytes: u64 = ops
        .iter()
        .filter(|o| o.ok == Some(true))
        .map(|o| o.size)
        .sum();
    let first = ops.iter().filter_map(|o| o.posted_at).min();
    let last = ops.iter().filter_map(|o| o.done_at).max();
    let goodput = match (first, last) {
        (Some(a), Some(b)) if b > a => ok_bytes as f64 * 8.0 / (b - a).as_ps() as f64 * 1e3,
        _ => 0.0,
    };
    let dropped = fs.dropped;
    let (mut checks, mut notes) = (checks, notes);
    if let Some(w) = world.world().filter(|w| w.pfc().is_some()) {
        lossless_checks(w, &mut checks, &mut notes);
    }
    // The checks the file skips, whichever runner made them.
    for skip in &plan.checks.skip {
        checks.remove(skip);
    }
    Report {
        scenario: plan.name.clone(),
        seed: plan.seed(),
        backend: world.name().to_string(),
        trace_hash: world
            .trace_hash()
            .map_or_else(|| "none (real time)".to_string(), |h| format!("{h:016x}")),
        sim_time_ns: world.now().as_nanos(),
        wall_s: 0.0,
        events: fs.events,
        packet_hops: fs.packet_hops,
        packet_hops_per_s: 0.0,
        packets: Packets {
            sent: fs.sent,
            delivered: fs.delivered,
            dropped,
            duplicated: fs.duplicated,
            reordered: fs.reordered,
            corrupted: fs.corrupted,
            ecn_marked: fs.ecn_marked,
            trimmed: fs.trimmed,
        },
        lost: Drops::of(world.drop_counts(), &nic),
        cc: plan.cc.clone(),
        ecn_echoes: nic.ecn_echoes,
        ops: Ops {
            posted,
            completed: ops.iter().filter(|o| o.ok == Some(true)).count() as u64,
            failed: ops.iter().filter(|o| o.ok == Some(false)).count() as u64,
        },
        completion_ns: Latency {
            p50: percentile(&lat, 0.5),
            p99: percentile(&lat, 0.99),
            max: lat.last().copied().unwrap_or(0),
        },
        goodput_gbps: (goodput * 1000.0).round() / 1000.0,
        retransmits: nic.retransmits,
        fast_retransmits: nic.fast_retransmits,
        spurious_fast_retransmits: nic.spurious_fast_retransmits,
        tail_probes: nic.tail_probes,
        timeouts: nic.timeouts,
        dup_dropped: nic.dup_dropped,
        escape: Escape {
            buffered: nic.escape_buffered,
            drained: nic.escape_drained,
            expired: nic.escape_expired,
            overflow: nic.escape_overflow,
        },
        nacks: nic.nacks,
        checks,
        notes,
        interrupted: false,
        messaging: None,
        noncontig: None,
        collective: None,
        scheduled: None,
        flows: None,
        pfc: world.world().and_then(PfcReport::of),
        ranks: world.ranks().map(|(_, each)| {
            each.iter()
                .map(|x| RankFigures {
                    windows: x.windows,
                    skipped: x.skipped,
                    bytes: x.bytes,
                    messages: x.messages,
                    packets: x.packets,
                })
                .collect()
        }),
        ladder_svg: None,
        timeline_json: None,
        op_spans: Vec::new(),
        timeout_marks: recorded_timeouts(world),
        egress: world
            .world()
            .and_then(|w| w.egress_log().map(<[_]>::to_vec)),
        fingerprints: fingerprints_of(world),
    }
}

/// What one rank of a run on ranks exchanged with the others.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RankFigures {
    /// Windows run.
    pub windows: u64,
    /// Empty windows skipped.
    pub skipped: u64,
    /// Bytes sent to other ranks.
    pub bytes: u64,
    /// Messages to other ranks that carried packets.
    pub messages: u64,
    /// Packets handed to other ranks.
    pub packets: u64,
}

/// Per-op outcome the report needs: size, success, latency.
pub struct OpOutcome {
    /// Bytes.
    pub size: u64,
    /// Success, failure, or not completed.
    pub ok: Option<bool>,
    /// Post to completion.
    pub latency: Option<Duration>,
    /// When it completed.
    pub done_at: Option<Instant>,
    /// When it was posted.
    pub posted_at: Option<Instant>,
}

/// The fingerprints the world took, if asked (see `Report::fingerprints`).
#[cfg(feature = "fingerprint")]
fn fingerprints_of(world: &dyn Backend) -> Option<udrma_fabric::FingerprintLog> {
    world.world().and_then(|w| w.fingerprints()).cloned()
}

#[cfg(not(feature = "fingerprint"))]
fn fingerprints_of(_: &dyn Backend) -> Option<udrma_fabric::FingerprintLog> {
    None
}
