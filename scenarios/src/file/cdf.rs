//! The `cdf` key of a `flows` workload: a flow-size distribution given
//! point by point, or the name of one of the published distributions
//! datacenter transport studies use (docs/sources.md, "Flow-size
//! distributions", says where each table comes from).

use serde::Deserialize;

/// A flow-size distribution as a file gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum CdfSpec {
    /// `[[bytes, cumulative probability], ...]`, sizes rising, the last
    /// probability 1.
    Points(Vec<[f64; 2]>),
    /// `"websearch"`, `"datamining"` or `"hadoop"` (lower case: names are
    /// matched exactly).
    Named(String),
}

/// The published distributions by name, each as `[bytes, cumulative
/// probability]` points read the way every `cdf` is (the first point's
/// probability falls on its size, linear between points).
pub const NAMED: [(&str, &[[f64; 2]]); 3] = [
    ("websearch", WEBSEARCH),
    ("datamining", DATAMINING),
    ("hadoop", HADOOP),
];

/// Web search (DCTCP, Alizadeh et al., SIGCOMM 2010), in the byte form
/// HPCC's and DCTCP's own traffic generators carry. Their first point,
/// (0 B, 0), starts at 1 byte here: a flow is at least 1 byte.
const WEBSEARCH: &[[f64; 2]] = &[
    [1.0, 0.0],
    [10_000.0, 0.15],
    [20_000.0, 0.2],
    [30_000.0, 0.3],
    [50_000.0, 0.4],
    [80_000.0, 0.53],
    [200_000.0, 0.6],
    [1_000_000.0, 0.7],
    [2_000_000.0, 0.8],
    [5_000_000.0, 0.9],
    [10_000_000.0, 0.97],
    [30_000_000.0, 1.0],
];

/// Data mining (VL2, Greenberg et al., SIGCOMM 2009), pFabric's table of
/// 1,460-byte packets (1, 1, 2, 3, 7, 267, 2,107, 66,667 and 666,667
/// packets) in bytes; half the flows are one packet.
const DATAMINING: &[[f64; 2]] = &[
    [1_460.0, 0.5],
    [2_920.0, 0.6],
    [4_380.0, 0.7],
    [10_220.0, 0.8],
    [389_820.0, 0.9],
    [3_076_220.0, 0.95],
    [97_333_820.0, 0.99],
    [973_333_820.0, 1.0],
];

/// Hadoop at Facebook (Roy et al., SIGCOMM 2015), as HPCC's traffic
/// generator carries it (`FbHdp_distribution.txt`); its first point,
/// (0 B, 0), starts at 1 byte here.
const HADOOP: &[[f64; 2]] = &[
    [1.0, 0.0],
    [100.0, 0.01],
    [200.0, 0.02],
    [300.0, 0.05],
    [350.0, 0.15],
    [400.0, 0.2],
    [500.0, 0.3],
    [600.0, 0.4],
    [700.0, 0.5],
    [1_000.0, 0.6],
    [2_000.0, 0.67],
    [7_000.0, 0.7],
    [30_000.0, 0.72],
    [50_000.0, 0.82],
    [80_000.0, 0.87],
    [120_000.0, 0.9],
    [300_000.0, 0.95],
    [1_000_000.0, 0.975],
    [2_000_000.0, 0.99],
    [10_000_000.0, 1.0],
];

impl CdfSpec {
    /// The points: the file's own, or the named table's. An unknown name
    /// is refused with the known ones (and the nearest, if one is near).
    pub fn points(&self) -> Result<&[[f64; 2]], String> {
        match self {
            CdfSpec::Points(p) => Ok(p),
            CdfSpec::Named(name) => NAMED
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| *p)
                .ok_or_else(|| {
                    let known: Vec<&str> = NAMED.iter().map(|(n, _)| *n).collect();
                    let near = udrma_faults::closest(&name.to_lowercase(), &known)
                        .map_or_else(String::new, |n| format!(" (did you mean `{n}`?)"));
                    format!(
                        "cdf = \"{name}\" is not a known distribution; known: {}{near}",
                        known.join(", ")
                    )
                }),
        }
    }
}

/// Read by hand so that a wrong value says what a `cdf` may be.
impl<'de> Deserialize<'de> for CdfSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{self, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CdfSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a distribution's name (\"websearch\", \"datamining\", \"hadoop\") or \
                     [[bytes, cumulative probability], ...]",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<CdfSpec, E> {
                Ok(CdfSpec::Named(s.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CdfSpec, A::Error> {
                let mut points = Vec::new();
                while let Some(p) = seq.next_element::<[f64; 2]>()? {
                    points.push(p);
                }
                Ok(CdfSpec::Points(points))
            }
        }
        d.deserialize_any(V)
    }
}
