//! The `flows` workload: flows between random hosts whose sizes follow a
//! distribution (a CDF, as htsim and the ns-3 studies read them) and
//! whose starts are a Poisson process at a given share of the hosts'
//! link rate; and the figures datacenter transport studies report of
//! them: average and tail flow completion time, and average slowdown.

use udrma_faults::rng::{below, stream, unit};
use udrma_proto::Duration;

use crate::file::schema::WorkloadSpec;
use crate::file::source::Locate;
use crate::{Scenario, ScenarioError};

/// A flow size distribution: points (bytes, cumulative probability),
/// sizes rising, probabilities not falling, the last 1. A size is drawn
/// by inverting the CDF, linear between points; the first point's
/// probability falls on its size exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct SizeCdf {
    points: Vec<(f64, f64)>,
}

impl SizeCdf {
    /// Checks `points` (`who` names them in errors).
    pub fn new(points: &[[f64; 2]]) -> Result<SizeCdf, String> {
        if points.is_empty() {
            return Err("cdf is empty: give [bytes, cumulative probability] points".into());
        }
        let mut last = (0.0f64, 0.0f64);
        for (i, &[size, p]) in points.iter().enumerate() {
            if !(size.is_finite() && size >= 1.0) {
                return Err(format!("cdf point {i}: size {size} is not at least 1 byte"));
            }
            if !(0.0..=1.0).contains(&p) {
                return Err(format!(
                    "cdf point {i}: probability {p} is not between 0 and 1"
                ));
            }
            if i > 0 && (size <= last.0 || p < last.1) {
                return Err(format!(
                    "cdf point {i} ([{size}, {p}]): sizes must rise and probabilities must not fall (the point before is [{}, {}])",
                    last.0, last.1
                ));
            }
            last = (size, p);
        }
        if last.1 != 1.0 {
            return Err(format!(
                "cdf ends at probability {}: its last point must be 1",
                last.1
            ));
        }
        Ok(SizeCdf {
            points: points.iter().map(|&[s, p]| (s, p)).collect(),
        })
    }

    /// The mean size in bytes.
    pub fn mean(&self) -> f64 {
        let (s0, p0) = self.points[0];
        let mut m = s0 * p0;
        for w in self.points.windows(2) {
            let ((a, pa), (b, pb)) = (w[0], w[1]);
            m += (pb - pa) * (a + b) / 2.0;
        }
        m
    }

    /// The size at cumulative probability `u` (0 ≤ u < 1), in whole bytes.
    pub fn size_at(&self, u: f64) -> u64 {
        let (s0, p0) = self.points[0];
        if u < p0 {
            return s0.round() as u64;
        }
        for w in self.points.windows(2) {
            let ((a, pa), (b, pb)) = (w[0], w[1]);
            if u < pb {
                let f = if pb > pa { (u - pa) / (pb - pa) } else { 0.0 };
                return (a + f * (b - a)).round().max(1.0) as u64;
            }
        }
        self.points[self.points.len() - 1].0.round() as u64
    }
}

/// One planned flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// Bytes.
    pub size: u64,
    /// When it starts, after the workload's start.
    pub after: Duration,
}

/// The flows of workload `wi` over `n` hosts whose links run at
/// `host_bps`: `count` of them, sizes drawn from `cdf`, starts a Poisson
/// process whose rate makes the offered load `load` of every host's
/// link (λ = load · n · rate / mean size), source and destination
/// uniform and distinct. Drawn from the seed and the workload's index
/// alone.
pub fn plan(
    cdf: &SizeCdf,
    load: f64,
    count: u32,
    n: u32,
    host_bps: u64,
    seed: u64,
    wi: usize,
) -> Vec<Flow> {
    let per_s = load * f64::from(n) * host_bps as f64 / (8.0 * cdf.mean());
    let mut t = 0.0f64;
    draws(cdf, count, n, seed, wi)
        .map(|(u, src, dst, size)| {
            // Exponential gaps: -ln(1 - u) / λ, u in [0, 1).
            t += -(1.0 - u).ln() / per_s;
            Flow {
                src,
                dst,
                size,
                after: Duration::from_ps((t * 1e12) as u64),
            }
        })
        .collect()
}

/// Each flow's draws from the workload's own stream, in order: the
/// uniform its gap comes from, source, destination (another host) and
/// size.
fn draws(
    cdf: &SizeCdf,
    count: u32,
    n: u32,
    seed: u64,
    wi: usize,
) -> impl Iterator<Item = (f64, u32, u32, u64)> + '_ {
    let mut rng = stream(seed, &format!("workload:{wi}"));
    (0..count).map(move |_| {
        let u = unit(&mut rng);
        let src = below(&mut rng, u64::from(n)) as u32;
        let dst = (src + 1 + below(&mut rng, u64::from(n) - 1) as u32) % n;
        (u, src, dst, cdf.size_at(unit(&mut rng)))
    })
}

/// The bytes the flows of workload `wi` move at `seed`: what [`plan`]
/// draws, summed (the sizes do not depend on the load or the link).
/// Heavy tails make it stray far from `count` times the mean: a few
/// data-mining flows of nearly 1 GB can outweigh thousands of others.
pub fn planned_bytes(cdf: &SizeCdf, count: u32, n: u32, seed: u64, wi: usize) -> u128 {
    if n < 2 {
        return 0;
    }
    draws(cdf, count, n, seed, wi)
        .map(|(_, _, _, size)| u128::from(size))
        .sum()
}

/// Checks a `flows` workload's own keys: `load` in (0, 1], a valid
/// `cdf`, at least 2 hosts. Returns the distribution.
pub fn validate(
    sc: &Scenario,
    w: &WorkloadSpec,
    who: &str,
    n: usize,
) -> Result<SizeCdf, ScenarioError> {
    let load = w.load.ok_or_else(|| {
        sc.error_at(
            "flows",
            format!("{who} needs `load` (0 to 1 of every host's link)"),
        )
    })?;
    if !(load > 0.0 && load <= 1.0) {
        return Err(sc.error_at_key(
            "load",
            format!("{who}: load = {load}: the offered load is a share of every host's link, above 0 and at most 1"),
        ));
    }
    let spec = w.cdf.as_ref().ok_or_else(|| {
        sc.error_at(
            "flows",
            format!("{who} needs `cdf`, the flow sizes as [[bytes, cumulative probability], ...] or a distribution's name (\"websearch\", \"datamining\", \"hadoop\")"),
        )
    })?;
    let cdf = spec
        .points()
        .and_then(SizeCdf::new)
        .map_err(|m| sc.error_at_key("cdf", format!("{who}: {m}")))?;
    if n < 2 {
        return Err(sc.error_at("flows", format!("{who}: flows need at least 2 hosts")));
    }
    Ok(cdf)
}

/// What a flow study reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FlowStats {
    /// Flows that completed.
    pub flows: u64,
    /// Average flow completion time, µs.
    pub avg_fct_us: f64,
    /// 99th-percentile flow completion time, µs.
    pub p99_fct_us: f64,
    /// Average slowdown: each flow's completion time over its time on an
    /// empty fabric ([`ideal_fct`]).
    pub avg_slowdown: f64,
}

/// A flow's completion time on an empty fabric: its bytes on the wire at
/// the host link's rate, plus one packet's time over each further link
/// of its path, plus the path's latency there and back (the
/// acknowledgement's own serialization left out).
pub fn ideal_fct(size: u64, links: u32, bps: u64, latency: Duration, mtu_payload: u64) -> Duration {
    // Per packet: the udrma header, extension and ICRC (52 B) and the
    // wire's Ethernet/IP/UDP overhead (66 B).
    const PER_PACKET: u64 = 52 + 66;
    let packets = size.div_ceil(mtu_payload).max(1);
    // In u128: a flow's picoseconds at 8e12 ps per byte-per-bps pass
    // u64 from about 2.3 MB (web-search and data-mining flows are larger).
    let wire = |bytes: u64| {
        let ps = u128::from(bytes) * 8 * 1_000_000_000_000 / u128::from(bps.max(1));
        Duration::from_ps(u64::try_from(ps).unwrap_or(u64::MAX))
    };
    let all = wire(size + packets * PER_PACKET);
    let first = wire(size.min(mtu_payload) + PER_PACKET);
    let hops = u64::from(links.saturating_sub(1));
    all + Duration::from_ps(first.as_ps() * hops)
        + Duration::from_ps(latency.as_ps() * 2 * u64::from(links))
}

/// The figures of `done`: (size, links of its path, completion time) of
/// each completed flow.
pub fn stats(
    done: &[(u64, u32, Duration)],
    bps: u64,
    latency: Duration,
    mtu_payload: u64,
) -> FlowStats {
    if done.is_empty() {
        return FlowStats {
            flows: 0,
            avg_fct_us: 0.0,
            p99_fct_us: 0.0,
            avg_slowdown: 0.0,
        };
    }
    let us = |d: Duration| d.as_ps() as f64 / 1e6;
    let mut fct: Vec<f64> = done.iter().map(|&(_, _, d)| us(d)).collect();
    fct.sort_by(f64::total_cmp);
    let n = fct.len();
    let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
    let slowdown: f64 = done
        .iter()
        .map(|&(size, links, d)| {
            (us(d) / us(ideal_fct(size, links, bps, latency, mtu_payload))).max(1.0)
        })
        .sum::<f64>()
        / n as f64;
    let round = |x: f64, digits: i32| {
        let f = 10f64.powi(digits);
        (x * f).round() / f
    };
    FlowStats {
        flows: n as u64,
        avg_fct_us: round(fct.iter().sum::<f64>() / n as f64, 3),
        p99_fct_us: round(fct[rank - 1], 3),
        avg_slowdown: round(slowdown, 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A three-point CDF: half the flows are 1,000 bytes, the rest spread
    /// evenly up to 10,000 then to 100,000. Its mean, its inverse at the
    /// points and between them, and what is refused.
    #[test]
    fn a_cdf_draws_its_sizes_and_refuses_what_is_not_one() {
        let cdf = SizeCdf::new(&[[1000.0, 0.5], [10_000.0, 0.9], [100_000.0, 1.0]]).unwrap();
        let mean = 0.5 * 1000.0 + 0.4 * 5500.0 + 0.1 * 55_000.0;
        assert!((cdf.mean() - mean).abs() < 1e-9);
        assert_eq!(cdf.size_at(0.0), 1000);
        assert_eq!(cdf.size_at(0.49), 1000);
        assert_eq!(cdf.size_at(0.5), 1000);
        assert_eq!(cdf.size_at(0.7), 5500);
        assert_eq!(cdf.size_at(0.95), 55_000);
        assert_eq!(cdf.size_at(0.999_999_999), 100_000);
        assert!(SizeCdf::new(&[]).is_err());
        assert!(SizeCdf::new(&[[1000.0, 0.5]])
            .unwrap_err()
            .contains("must be 1"));
        assert!(SizeCdf::new(&[[10.0, 0.5], [5.0, 1.0]])
            .unwrap_err()
            .contains("sizes must rise"));
        assert!(SizeCdf::new(&[[10.0, 0.5], [20.0, 0.4], [30.0, 1.0]]).is_err());
        assert!(SizeCdf::new(&[[0.0, 1.0]]).is_err());
        assert!(SizeCdf::new(&[[10.0, 1.5]]).is_err());
    }

    /// The Poisson process offers the load asked: over many flows the
    /// bytes over the time they span are `load` of the hosts' links; the
    /// mean gap is one over the rate; no flow sends to itself; the same
    /// seed plans the same flows.
    #[test]
    fn flows_offer_the_load_asked() {
        let cdf = SizeCdf::new(&[[1000.0, 0.5], [10_000.0, 0.9], [100_000.0, 1.0]]).unwrap();
        let flows = plan(&cdf, 0.5, 20_000, 16, 100_000_000_000, 7, 0);
        assert_eq!(flows, plan(&cdf, 0.5, 20_000, 16, 100_000_000_000, 7, 0));
        assert!(flows
            .iter()
            .all(|f| f.src != f.dst && f.src < 16 && f.dst < 16));
        let bytes: u64 = flows.iter().map(|f| f.size).sum();
        let span = flows.last().unwrap().after.as_ps() as f64 / 1e12;
        let offered = bytes as f64 * 8.0 / span / (16.0 * 100e9);
        assert!((offered - 0.5).abs() < 0.05, "offered {offered}");
        let mean_size = bytes as f64 / flows.len() as f64;
        assert!((mean_size / cdf.mean() - 1.0).abs() < 0.05, "{mean_size}");
    }

    /// The named distributions: each table is a valid CDF whose mean is
    /// the figure docs/sources.md states, and flows drawn from it at a
    /// fixed seed average within 2 % of that mean (a million draws: the
    /// data-mining tail, 1 % of flows of 97 MB to 973 MB, carries most
    /// of its bytes, so fewer draws stray further).
    #[test]
    fn the_named_distributions_have_their_published_means() {
        use crate::file::cdf::{CdfSpec, NAMED};
        let stated = [
            ("websearch", 1_711_250.0),
            ("datamining", 7_470_236.0),
            ("hadoop", 120_420.75),
        ];
        assert_eq!(NAMED.len(), stated.len());
        for ((name, points), (want_name, want)) in NAMED.iter().zip(stated) {
            assert_eq!(*name, want_name);
            let cdf = SizeCdf::new(points).unwrap();
            let spec = CdfSpec::Named(name.to_string());
            assert_eq!(spec.points().unwrap(), *points);
            assert!(
                (cdf.mean() - want).abs() < 1.0,
                "{name}: mean {}",
                cdf.mean()
            );
            let drawn = planned_bytes(&cdf, 1_000_000, 16, 7, 0) as f64 / 1e6;
            assert!(
                (drawn / want - 1.0).abs() < 0.02,
                "{name}: drawn mean {drawn}, table {want}"
            );
            // The same sizes as the flows planned, each within the table.
            let flows = plan(&cdf, 0.5, 10_000, 16, 100_000_000_000, 7, 0);
            let bytes = planned_bytes(&cdf, 10_000, 16, 7, 0);
            assert_eq!(
                bytes,
                flows.iter().map(|f| u128::from(f.size)).sum::<u128>()
            );
            let largest = points[points.len() - 1][0] as u64;
            assert!(flows.iter().all(|f| f.size >= 1 && f.size <= largest));
        }
        let e = CdfSpec::Named("WebSearch".into()).points().unwrap_err();
        assert_eq!(e, "cdf = \"WebSearch\" is not a known distribution; known: websearch, datamining, hadoop (did you mean `websearch`?)");
        let e = CdfSpec::Named("pareto".into()).points().unwrap_err();
        assert!(e.ends_with("known: websearch, datamining, hadoop"), "{e}");
    }

    /// On an empty fabric a one-packet flow takes its wire time on each
    /// link and the latency there and back; a large flow adds its bytes
    /// at the link's rate once. Slowdown is at least 1.
    #[test]
    fn the_ideal_is_wire_time_plus_the_round_trip() {
        let lat = Duration::from_micros(1);
        let one = ideal_fct(1000, 2, 100_000_000_000, lat, 4096);
        assert_eq!(one, Duration::from_ps(2 * (1118 * 80) + 4_000_000));
        let big = ideal_fct(4096 * 10, 2, 100_000_000_000, lat, 4096);
        let wire = (4096 * 10 + 10 * 118) * 80;
        assert_eq!(big, Duration::from_ps(wire + (4096 + 118) * 80 + 4_000_000));
        let s = stats(
            &[
                (1000, 2, one),
                (1000, 2, Duration::from_ps(one.as_ps() * 3)),
            ],
            100_000_000_000,
            lat,
            4096,
        );
        assert_eq!((s.flows, s.avg_slowdown), (2, 2.0));
        // A data-mining flow of 973 MB at 100 Gb/s: 78 ms of payload and
        // 2 ms of headers, no overflow.
        let huge = ideal_fct(973_333_820, 2, 100_000_000_000, lat, 4096);
        assert!(
            huge > Duration::from_millis(79) && huge < Duration::from_millis(81),
            "{huge:?}"
        );
        let s = stats(
            &[(1000, 2, Duration::from_ps(1))],
            100_000_000_000,
            lat,
            4096,
        );
        assert_eq!(s.avg_slowdown, 1.0, "never below 1");
    }
}
