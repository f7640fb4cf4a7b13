//! What a sweep keeps of each run: the figures its CSV, table and plot
//! read, and nothing else. A part file holds these records as JSON, and a
//! merge reads them back bit for bit (floats round-trip exactly), so the
//! merged outputs are the single machine's.

use serde::{Deserialize, Serialize};
use udrma_scenarios::report::Drops;
use udrma_scenarios::Report;

/// One run, as a sweep reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The checks that failed, in the report's order (empty: passed).
    pub failed_checks: Vec<String>,
    /// The run's trace hash.
    pub trace_hash: String,
    /// Simulated time at the end, ns.
    pub sim_time_ns: u64,
    /// Goodput, Gb/s.
    #[serde(with = "float")]
    pub goodput_gbps: f64,
    /// Completion-time percentiles, ns.
    pub completion_p50_ns: u64,
    /// 99th percentile.
    pub completion_p99_ns: u64,
    /// Maximum.
    pub completion_max_ns: u64,
    /// Operations completed and failed.
    pub ops_completed: u64,
    /// Operations that failed.
    pub ops_failed: u64,
    /// Retransmitted packets.
    pub retransmits: u64,
    /// Packets the fabric dropped, duplicated, reordered.
    pub dropped: u64,
    /// Duplicated packets.
    pub duplicated: u64,
    /// Reordered packets.
    pub reordered: u64,
    /// Duplicates the receivers dropped.
    pub dup_dropped: u64,
    /// Packets the escape channel held.
    pub escape_buffered: u64,
    /// NACKs sent.
    pub nacks: u64,
    /// Of the retransmits, sent because a later packet was acknowledged
    /// first.
    #[serde(default)]
    pub fast_retransmits: u64,
    /// Of the retransmits, tail loss probes.
    #[serde(default)]
    pub tail_probes: u64,
    /// Retransmit timer expiries.
    #[serde(default)]
    pub timeouts: u64,
    /// PAUSE frames a lossless fabric's ports received (0: lossy).
    #[serde(default)]
    pub pfc_pauses: u64,
    /// Time its ports were paused, every priority added up, ns.
    #[serde(default)]
    pub pfc_paused_ns: u64,
    /// Messaging runs: the first per-size row.
    pub messaging: Option<MessagingFigures>,
    /// Collective runs: the median completions of each side.
    pub collective: Option<CollectiveFigures>,
    /// A collective by one of MPI's algorithms: its OSU table, one row
    /// per size (empty for other workloads).
    #[serde(default)]
    pub osu: Vec<OsuFigures>,
    /// Every packet lost, by cause.
    #[serde(default)]
    pub lost: Drops,
    /// A non-contiguous ping-pong: the method that ran (what `auto`
    /// chose) and its one-way p50, µs.
    #[serde(default)]
    pub noncontig: Option<NoncontigFigures>,
}

/// What a sweep keeps of a non-contiguous ping-pong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoncontigFigures {
    /// The method that ran.
    pub method: String,
    /// One-way latency, median, µs.
    #[serde(with = "float")]
    pub one_way_us: f64,
}

/// One size's row of a scheduled collective's OSU table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsuFigures {
    /// Bytes per rank (OSU's "Size").
    pub size: u64,
    /// The algorithm run (what `auto` chose).
    pub algorithm: String,
    /// OSU's average latency, µs (`None`: no iteration finished).
    #[serde(with = "float::option")]
    pub avg_us: Option<f64>,
    /// The smallest rank's mean latency, µs.
    #[serde(with = "float::option")]
    pub min_us: Option<f64>,
    /// The largest rank's mean latency, µs.
    #[serde(with = "float::option")]
    pub max_us: Option<f64>,
    /// NCCL-tests' algorithm bandwidth, GB/s.
    #[serde(with = "float::option")]
    pub algbw_gbs: Option<f64>,
    /// NCCL-tests' bus bandwidth, GB/s.
    #[serde(with = "float::option")]
    pub busbw_gbs: Option<f64>,
    /// Messages one iteration sends over every rank.
    pub messages: u64,
    /// Measured iterations that finished, every rank's added up.
    pub finished: u64,
    /// Measured iterations asked for: ranks × iterations.
    pub wanted: u64,
}

/// The first per-size row of a messaging run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessagingFigures {
    /// The protocol most messages went by.
    pub protocol: String,
    /// One-way latency or time per message, µs.
    #[serde(with = "float")]
    pub latency_us: f64,
    /// Bandwidth, MB/s.
    #[serde(with = "float")]
    pub bandwidth_mbs: f64,
}

/// A collective run's median completion on each side, µs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveFigures {
    /// Host software (absent if not run).
    #[serde(with = "float::option")]
    pub host_p50_us: Option<f64>,
    /// NIC offload (absent if not run).
    #[serde(with = "float::option")]
    pub nic_p50_us: Option<f64>,
}

/// Floats in JSON: finite ones as numbers (read back exactly: serde_json's
/// `float_roundtrip`), the others, which JSON cannot hold, as `"NaN"`,
/// `"inf"` or `"-inf"`.
mod float {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Json {
        Number(f64),
        Text(String),
    }

    fn to_json(x: f64) -> Json {
        if x.is_finite() {
            Json::Number(x)
        } else {
            Json::Text(x.to_string())
        }
    }

    fn from_json<E: serde::de::Error>(j: Json) -> Result<f64, E> {
        match j {
            Json::Number(x) => Ok(x),
            Json::Text(t) => t
                .parse()
                .map_err(|_| E::custom(format!("{t:?} is not a number"))),
        }
    }

    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        to_json(*x).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        from_json(Json::deserialize(d)?)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(x: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            x.map(to_json).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
            Option::<Json>::deserialize(d)?.map(from_json).transpose()
        }
    }
}

impl RunRecord {
    /// Keeps what a sweep reports of `r`.
    pub fn of(r: &Report) -> Self {
        Self {
            failed_checks: r
                .checks
                .iter()
                .filter(|(_, ok)| !**ok)
                .map(|(k, _)| k.clone())
                .collect(),
            trace_hash: r.trace_hash.clone(),
            sim_time_ns: r.sim_time_ns,
            goodput_gbps: r.goodput_gbps,
            completion_p50_ns: r.completion_ns.p50,
            completion_p99_ns: r.completion_ns.p99,
            completion_max_ns: r.completion_ns.max,
            ops_completed: r.ops.completed,
            ops_failed: r.ops.failed,
            retransmits: r.retransmits,
            dropped: r.packets.dropped,
            duplicated: r.packets.duplicated,
            reordered: r.packets.reordered,
            dup_dropped: r.dup_dropped,
            escape_buffered: r.escape.buffered,
            nacks: r.nacks,
            fast_retransmits: r.fast_retransmits,
            tail_probes: r.tail_probes,
            timeouts: r.timeouts,
            pfc_pauses: r.pfc.as_ref().map_or(0, |p| p.pauses),
            pfc_paused_ns: r.pfc.as_ref().map_or(0, |p| p.paused_ns),
            messaging: r.messaging.as_ref().and_then(|m| m.sizes.first()).map(|s| {
                MessagingFigures {
                    protocol: s.protocol.clone(),
                    latency_us: s.latency_us,
                    bandwidth_mbs: s.bandwidth_mbs,
                }
            }),
            collective: r.collective.as_ref().map(|c| CollectiveFigures {
                host_p50_us: c.host.as_ref().map(|s| s.completion_us.p50),
                nic_p50_us: c.nic.as_ref().map(|s| s.completion_us.p50),
            }),
            osu: r.scheduled.as_ref().map_or_else(Vec::new, |o| {
                o.rows
                    .iter()
                    .map(|row| OsuFigures {
                        size: row.size,
                        algorithm: row.algorithm.clone(),
                        avg_us: row.avg_us,
                        min_us: row.min_us,
                        max_us: row.max_us,
                        algbw_gbs: row.algbw_gbs,
                        busbw_gbs: row.busbw_gbs,
                        messages: row.messages,
                        finished: row.measured,
                        wanted: row.wanted,
                    })
                    .collect()
            }),
            lost: r.lost.clone(),
            noncontig: r.noncontig.as_ref().map(|n| NoncontigFigures {
                method: n.method.clone(),
                one_way_us: n.latency_p50_us,
            }),
        }
    }

    /// Each fault rule's drops by name (`loss=120 dup=0`), for one CSV
    /// cell.
    fn lost_by_rule(&self) -> String {
        let rules = self.lost.faults.iter();
        rules
            .map(|r| format!("{}={}", r.rule, r.dropped))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.failed_checks.is_empty()
    }

    /// The CSV and JSON columns after the settings and the seed (new ones
    /// go at the end, so that a column keeps its position). The `osu_`
    /// columns, `algorithm`, `algbw_gbs` and `busbw_gbs` are one size's
    /// row of an MPI collective's table, empty for other workloads.
    pub const COLUMNS: [&'static str; COLUMN_COUNT] = [
        "passed",
        "failed_checks",
        "trace_hash",
        "sim_time_ns",
        "goodput_gbps",
        "completion_p50_ns",
        "completion_p99_ns",
        "completion_max_ns",
        "ops_completed",
        "ops_failed",
        "retransmits",
        "dropped",
        "duplicated",
        "reordered",
        "dup_dropped",
        "escape_buffered",
        "nacks",
        "fast_retransmits",
        "tail_probes",
        "timeouts",
        "pfc_pauses",
        "pfc_paused_ns",
        "osu_size_bytes",
        "algorithm",
        "osu_avg_us",
        "osu_min_us",
        "osu_max_us",
        "algbw_gbs",
        "busbw_gbs",
        "osu_messages",
        "osu_finished",
        "osu_wanted",
        "lost",
        "lost_faults",
        "lost_by_rule",
        "lost_queue_full",
        "lost_nic_lane",
        "lost_pfc_headroom",
        "lost_paused_host",
        "lost_mtu",
        "lost_no_route",
        "lost_corrupt",
        "nc_method",
        "nc_one_way_us",
    ];

    /// The values of [`RunRecord::COLUMNS`]: one row, or for an MPI
    /// collective one per size of its OSU table (the run's own figures
    /// repeated on each).
    pub fn rows(&self) -> Vec<[Cell; COLUMN_COUNT]> {
        if self.osu.is_empty() {
            return vec![self.row(None)];
        }
        self.osu.iter().map(|o| self.row(Some(o))).collect()
    }

    fn row(&self, osu: Option<&OsuFigures>) -> [Cell; COLUMN_COUNT] {
        use Cell::{Float, Int, Text};
        let int = |f: fn(&OsuFigures) -> u64| osu.map_or(Cell::Empty, |o| Int(f(o)));
        let float = |f: fn(&OsuFigures) -> Option<f64>| osu.and_then(f).map_or(Cell::Empty, Float);
        [
            Cell::Bool(self.passed()),
            Text(self.failed_checks.join(" ")),
            Text(self.trace_hash.clone()),
            Int(self.sim_time_ns),
            Float(self.goodput_gbps),
            Int(self.completion_p50_ns),
            Int(self.completion_p99_ns),
            Int(self.completion_max_ns),
            Int(self.ops_completed),
            Int(self.ops_failed),
            Int(self.retransmits),
            Int(self.dropped),
            Int(self.duplicated),
            Int(self.reordered),
            Int(self.dup_dropped),
            Int(self.escape_buffered),
            Int(self.nacks),
            Int(self.fast_retransmits),
            Int(self.tail_probes),
            Int(self.timeouts),
            Int(self.pfc_pauses),
            Int(self.pfc_paused_ns),
            int(|o| o.size),
            osu.map_or(Cell::Empty, |o| Text(o.algorithm.clone())),
            float(|o| o.avg_us),
            float(|o| o.min_us),
            float(|o| o.max_us),
            float(|o| o.algbw_gbs),
            float(|o| o.busbw_gbs),
            int(|o| o.messages),
            int(|o| o.finished),
            int(|o| o.wanted),
            Int(self.lost.total),
            Int(self.lost.by_faults()),
            Text(self.lost_by_rule()),
            Int(self.lost.queue_full),
            Int(self.lost.nic_lane),
            Int(self.lost.pfc_headroom),
            Int(self.lost.paused_overflow),
            Int(self.lost.mtu),
            Int(self.lost.no_route),
            Int(self.lost.refused_corrupt),
            self.noncontig
                .as_ref()
                .map_or(Cell::Empty, |n| Text(n.method.clone())),
            self.noncontig
                .as_ref()
                .map_or(Cell::Empty, |n| Float(n.one_way_us)),
        ]
    }
}

/// How many columns [`RunRecord::COLUMNS`] has.
pub const COLUMN_COUNT: usize = 44;

/// One value of a sweep's CSV and JSON rows, typed for JSON (a trace hash
/// of only digits stays a string there).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Not applicable to this run: an empty CSV field, JSON `null`.
    Empty,
    /// Text.
    Text(String),
    /// A count or a time in ns.
    Int(u64),
    /// A measured figure: written so that it reads back with the same
    /// bits; JSON holds a non-finite one as `"NaN"`, `"inf"`, `"-inf"`.
    Float(f64),
    /// `true` or `false`.
    Bool(bool),
}

impl Cell {
    /// The CSV field.
    pub fn text(&self) -> String {
        match self {
            Cell::Empty => String::new(),
            Cell::Text(t) => t.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Float(x) => x.to_string(),
            Cell::Bool(b) => b.to_string(),
        }
    }

    /// The JSON value.
    pub fn json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Cell::Empty => Value::Null,
            Cell::Text(t) => Value::String(t.clone()),
            Cell::Int(i) => Value::from(*i),
            Cell::Float(x) => serde_json::Number::from_f64(*x)
                .map_or_else(|| Value::String(x.to_string()), Value::Number),
            Cell::Bool(b) => Value::Bool(*b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any float, finite or not, reads back with the same bits (NaN:
        /// as a NaN).
        #[test]
        fn floats_round_trip_exactly(bits in any::<u64>(), some in any::<bool>()) {
            let x = f64::from_bits(bits);
            let c = CollectiveFigures { host_p50_us: some.then_some(x), nic_p50_us: None };
            let back: CollectiveFigures =
                serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
            match (back.host_p50_us, c.host_p50_us) {
                (Some(b), Some(a)) if a.is_nan() => prop_assert!(b.is_nan()),
                (b, a) => prop_assert_eq!(b.map(f64::to_bits), a.map(f64::to_bits)),
            }
        }
    }

    #[test]
    fn a_record_survives_json_bit_for_bit() {
        let r = RunRecord {
            failed_checks: vec!["liveness".into()],
            trace_hash: "58d2fc3301208396".into(),
            sim_time_ns: 123,
            goodput_gbps: 0.1 + 0.2,
            completion_p50_ns: 1,
            completion_p99_ns: 2,
            completion_max_ns: 3,
            ops_completed: 4,
            ops_failed: 5,
            retransmits: 6,
            dropped: 7,
            duplicated: 8,
            reordered: 9,
            dup_dropped: 10,
            escape_buffered: 11,
            nacks: 12,
            fast_retransmits: 13,
            tail_probes: 14,
            timeouts: 15,
            pfc_pauses: 16,
            pfc_paused_ns: 17,
            messaging: Some(MessagingFigures {
                protocol: "eager".into(),
                latency_us: 1.0 / 3.0,
                bandwidth_mbs: 9876.54321e-7,
            }),
            collective: Some(CollectiveFigures {
                host_p50_us: Some(std::f64::consts::PI),
                nic_p50_us: None,
            }),
            osu: vec![OsuFigures {
                size: 1 << 20,
                algorithm: "ring".into(),
                avg_us: Some(0.1 + 0.7),
                min_us: Some(1.0 / 7.0),
                max_us: None,
                algbw_gbs: Some(3.0 / 11.0),
                busbw_gbs: Some(1e-300),
                messages: 30,
                finished: 31,
                wanted: 32,
            }],
            lost: Drops {
                total: 40,
                faults: vec![udrma_scenarios::report::RuleDrops {
                    rule: "loss".into(),
                    dropped: 33,
                }],
                queue_full: 2,
                nic_lane: 1,
                pfc_headroom: 1,
                paused_overflow: 0,
                mtu: 1,
                no_route: 1,
                refused_corrupt: 1,
            },
            noncontig: Some(NoncontigFigures {
                method: "sgl".into(),
                one_way_us: 2.0 / 3.0,
            }),
        };
        let back: RunRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.goodput_gbps.to_bits(), r.goodput_gbps.to_bits());
        assert!(!back.passed());

        // A part file written before the loss-recovery columns existed
        // reads them as zero.
        let mut old: serde_json::Value = serde_json::to_value(&r).unwrap();
        for k in [
            "fast_retransmits",
            "tail_probes",
            "timeouts",
            "pfc_pauses",
            "pfc_paused_ns",
        ] {
            old.as_object_mut().unwrap().remove(k);
        }
        let back: RunRecord = serde_json::from_value(old).unwrap();
        assert_eq!(
            (
                back.fast_retransmits,
                back.tail_probes,
                back.timeouts,
                back.pfc_pauses,
                back.pfc_paused_ns
            ),
            (0, 0, 0, 0, 0)
        );
    }

    #[test]
    fn cells_keep_their_type_in_json_and_an_mpi_collective_gives_a_row_per_size() {
        use serde_json::json;
        assert_eq!(
            Cell::Text("1234567890123456".into()).json(),
            json!("1234567890123456")
        );
        assert_eq!(Cell::Float(f64::NAN).json(), json!("NaN"));
        assert_eq!(Cell::Float(f64::NEG_INFINITY).json(), json!("-inf"));
        assert_eq!(Cell::Float(0.25).json(), json!(0.25));
        assert_eq!(Cell::Empty.json(), serde_json::Value::Null);
        assert_eq!(Cell::Empty.text(), "");
        assert_eq!(Cell::Int(u64::MAX).json(), json!(u64::MAX));

        let one = |size: u64| OsuFigures {
            size,
            algorithm: "ring".into(),
            avg_us: Some(1.5),
            min_us: Some(1.0),
            max_us: Some(2.0),
            algbw_gbs: Some(0.5),
            busbw_gbs: None,
            messages: 12,
            finished: 8,
            wanted: 8,
        };
        let mut r: RunRecord = serde_json::from_value(json!({
            "failed_checks": [], "trace_hash": "00", "sim_time_ns": 1, "goodput_gbps": 0.0,
            "completion_p50_ns": 0, "completion_p99_ns": 0, "completion_max_ns": 0,
            "ops_completed": 0, "ops_failed": 0, "retransmits": 0, "dropped": 0,
            "duplicated": 0, "reordered": 0, "dup_dropped": 0, "escape_buffered": 0,
            "nacks": 0, "messaging": null, "collective": null
        }))
        .unwrap();
        let size_at = RunRecord::COLUMNS
            .iter()
            .position(|c| *c == "osu_size_bytes")
            .unwrap();
        let rows = r.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][size_at], Cell::Empty);
        r.osu = vec![one(8), one(16)];
        let rows = r.rows();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (&rows[0][size_at], &rows[1][size_at]),
            (&Cell::Int(8), &Cell::Int(16))
        );
        assert_eq!(rows[1][size_at + 1], Cell::Text("ring".into()));
        let messages = RunRecord::COLUMNS
            .iter()
            .position(|c| *c == "osu_messages")
            .unwrap();
        assert_eq!(rows[1][messages], Cell::Int(12));
        // A figure no iteration gave is empty, not 0.
        let busbw = RunRecord::COLUMNS
            .iter()
            .position(|c| *c == "busbw_gbs")
            .unwrap();
        assert_eq!(rows[1][busbw], Cell::Empty);
    }
}
