//! The plan of a non-contiguous ping-pong (`kind = "noncontig"`): both
//! sides' layouts from the file (built with the MPI datatype
//! constructors), the method, and the checks of its keys. `auto` is
//! resolved when the plan runs, by measuring each method's ping-pong on
//! the simulated fabric (`run::noncontig`, where the run's observer
//! watches the trials too); the cost estimate stays in the report beside
//! what was measured. Running it is the run floor's business.

use udrma_fabric::Topology;
use udrma_host::datatype::{Datatype, Layout, Order};
use udrma_host::noncontig::{predict, Method, Shape};
use udrma_host::workload::noncontig::NcPlan;
use udrma_nic::NicConfig;
use udrma_proto::{Duration, Instant};

use crate::file::schema::{WorkloadKind, WorkloadSpec};
use crate::file::source::Locate;
use crate::{Scenario, ScenarioError};

/// Most blocks a side's layout may have (the indirect key's limit).
pub const MAX_BLOCKS: u64 = 65_536;

/// Most bytes one transfer may move (stored twice per host).
pub const MAX_BYTES: u64 = 64 << 20;

/// The workload as planned, with what the estimate said.
#[derive(Debug, Clone)]
pub struct Planned {
    /// The plan the apps carry out.
    pub plan: NcPlan,
    /// The method the file asked for.
    pub requested: Method,
    /// The layout's name.
    pub layout: String,
    /// Each method's estimate, µs.
    pub estimates: Vec<(Method, f64)>,
    /// With `auto`, once the run measured them: each method's one-way
    /// p50 on the simulated fabric, µs (`None`: it did not finish every
    /// round trip cleanly). Empty in a plan not yet run.
    pub measured: Vec<(Method, Option<f64>)>,
}

/// The median of sorted one-way times, as the report gives it (the lower
/// of the two middle ones); `None` when there are none.
pub(crate) fn one_way_p50(sorted: &[u64]) -> Option<u64> {
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

/// Refuses a noncontig workload beside others, and plans it (its keys on
/// other kinds are refused in `applies`).
pub fn validate(sc: &Scenario, nic: &NicConfig, topo: &Topology) -> Result<(), ScenarioError> {
    let nc = sc
        .file
        .workloads
        .iter()
        .filter(|w| w.kind == WorkloadKind::Noncontig)
        .count();
    if nc > 0 && sc.file.workloads.len() > 1 {
        return Err(sc.error_at(
            "noncontig",
            "a noncontig workload runs alone: put other workloads in another scenario".into(),
        ));
    }
    if nc == 1 {
        plan(sc, nic, topo)?;
    }
    Ok(())
}

/// An error about the workload's `key`: at the line that sets it, or,
/// for a key the file leaves out, at the workload's `kind = "noncontig"`.
fn bad(sc: &Scenario, key: &str, msg: String) -> ScenarioError {
    let e = sc.error_at_key(key, format!("noncontig workload: {msg}"));
    if e.at.is_some() {
        return e;
    }
    let at = sc
        .error_at_nth_setting("kind", "noncontig", 0, String::new())
        .at;
    ScenarioError { at, ..e }
}

/// One side's layout, from the file.
fn layouts(sc: &Scenario, w: &WorkloadSpec) -> Result<(String, Layout, Layout), ScenarioError> {
    let name = w.layout.clone().unwrap_or_else(|| "vector".into());
    let e = |k: &str, m: String| bad(sc, k, m);
    let tyerr =
        |k: &'static str| move |err: udrma_host::datatype::TypeError| bad(sc, k, err.to_string());
    let blocks = w.blocks.ok_or_else(|| {
        e(
            "blocks",
            "needs `blocks` (block count, or the side of the matrix)".into(),
        )
    })?;
    if blocks == 0 || blocks > MAX_BLOCKS {
        return Err(e(
            "blocks",
            format!("`blocks = {blocks}`: must be 1..={MAX_BLOCKS}"),
        ));
    }
    let byte = Datatype::byte();
    let dbl = Datatype::double();
    let (src, same) = match name.as_str() {
        "vector" | "transpose" => {
            let block = w
                .block
                .map(|b| b.0)
                .ok_or_else(|| e("block", format!("layout {name:?} needs `block` (bytes per block)")))?;
            if block == 0 {
                return Err(e("block", "`block` must be at least 1 byte".into()));
            }
            let stride = match name.as_str() {
                // Column blocks of an N×N matrix of `block`-byte elements.
                "transpose" => block.checked_mul(blocks),
                _ => Some(w.stride.map_or(block.saturating_mul(2), |s| s.0)),
            }
            .filter(|s| *s <= i64::MAX as u64)
            .ok_or_else(|| e("stride", "the stride overflows".into()))?;
            if stride < block && name == "vector" {
                return Err(e(
                    "stride",
                    format!("`stride` ({stride} B) is shorter than `block` ({block} B): blocks would overlap"),
                ));
            }
            let t = Datatype::hvector(blocks, block, stride as i64, &byte).map_err(tyerr("block"))?;
            // A transpose lands as a contiguous row.
            (t, name == "vector")
        }
        "halo" => {
            let k = w.halo.unwrap_or(1);
            if k == 0 || k > blocks {
                return Err(e("halo", format!("`halo = {k}`: must be 1..=blocks ({blocks})")));
            }
            let n = blocks;
            let t = Datatype::subarray(&[n, n], &[n, k], &[0, 0], Order::C, &dbl).map_err(tyerr("halo"))?;
            (t, true)
        }
        "face-x" | "face-y" | "face-z" => {
            let n = blocks;
            let sub = match name.as_str() {
                "face-x" => [1, n, n],
                "face-y" => [n, 1, n],
                _ => [n, n, 1],
            };
            let t = Datatype::subarray(&[n, n, n], &sub, &[0, 0, 0], Order::C, &dbl).map_err(tyerr("blocks"))?;
            (t, true)
        }
        other => {
            return Err(e(
                "layout",
                format!("unknown layout {other:?}; expected vector, transpose, halo, face-x, face-y or face-z"),
            ))
        }
    };
    let src = src.commit().map_err(tyerr("blocks"))?;
    if src.size() > MAX_BYTES {
        return Err(e(
            "blocks",
            format!(
                "one transfer moves {} bytes; at most {MAX_BYTES} are allowed",
                src.size()
            ),
        ));
    }
    if src.blocks().len() as u64 > MAX_BLOCKS {
        return Err(e(
            "blocks",
            format!(
                "the layout has {} blocks; at most {MAX_BLOCKS}",
                src.blocks().len()
            ),
        ));
    }
    let peer = match w.peer_layout.as_deref() {
        None | Some("same") if same => src.clone(),
        None | Some("same") | Some("contiguous") => Layout::contiguous(src.size()),
        Some(other) => {
            return Err(e(
                "peer_layout",
                format!("unknown peer_layout {other:?}; expected same or contiguous"),
            ))
        }
    };
    Ok((name, src, peer))
}

/// The plan of the scenario's noncontig workload, for NICs configured
/// as `cfg` on `topo`.
pub fn plan(sc: &Scenario, cfg: &NicConfig, topo: &Topology) -> Result<Planned, ScenarioError> {
    let n = topo.n_hosts();
    let Some(w) = sc
        .file
        .workloads
        .iter()
        .find(|w| w.kind == WorkloadKind::Noncontig)
    else {
        return Err(sc.error_at("workload", "no noncontig workload".into()));
    };
    let who = "noncontig workload";
    let (Some(src), Some(dst)) = (w.src.as_deref(), w.dst.as_deref()) else {
        return Err(sc.error_at("noncontig", format!("{who} needs `src` and `dst`")));
    };
    let a = sc.host(src, n, who)?;
    let b = sc.host(dst, n, who)?;
    if a == b {
        return Err(sc.error_at(
            "noncontig",
            format!("{who}: `src` and `dst` are the same host"),
        ));
    }
    let method_name = w.method.as_deref().unwrap_or("auto");
    let requested = Method::parse(method_name).ok_or_else(|| {
        bad(
            sc,
            "method",
            format!("unknown method {method_name:?}; expected pack, sgl, indirect or auto"),
        )
    })?;
    let rdma = match w.form.as_deref() {
        None | Some("messaging") => false,
        Some("rdma") => true,
        Some(other) => {
            return Err(bad(
                sc,
                "form",
                format!("unknown form {other:?}; expected messaging or rdma"),
            ))
        }
    };
    let (layout, la, lb) = layouts(sc, w)?;
    let bps = topo
        .links
        .iter()
        .map(|l| l.params.bandwidth_bps)
        .min()
        .unwrap_or(100_000_000_000)
        .max(1);
    let key_cache = w.key_cache.unwrap_or(true);
    let shape = Shape {
        src: &la,
        dst: &lb,
        rdma,
        max_sge: cfg.max_sge,
        max_send: cfg.max_op_bytes(),
        mtu: u64::from(cfg.mtu_payload),
        cost: &cfg.cost,
        translation: cfg.translation,
        link_ps_per_byte: (8_000_000_000_000u128 / u128::from(bps)) as u64,
        key_cache,
    };
    let mut estimates = Vec::new();
    for m in Method::CONCRETE {
        let e = predict(&shape, m).map_err(|e| bad(sc, "layout", e.to_string()))?;
        estimates.push((m, e.time.as_ps() as f64 / 1e6));
    }
    let method = match requested {
        Method::Auto => {
            predict(&shape, Method::Auto)
                .map_err(|e| bad(sc, "layout", e.to_string()))?
                .method
        }
        m => m,
    };
    let count = w.count.max(1);
    let warmup = w.warmup.unwrap_or(2);
    if u64::from(count) + u64::from(warmup) > 100_000 {
        return Err(bad(
            sc,
            "count",
            "at most 100000 round trips (count + warmup)".into(),
        ));
    }
    Ok(Planned {
        plan: NcPlan {
            a,
            b,
            layouts: [la, lb],
            method,
            rdma,
            count,
            warmup,
            key_cache,
            max_sge: cfg.max_sge,
            max_send: cfg.max_op_bytes(),
            start: Instant::ZERO + w.start.map_or(Duration::ZERO, |t| t.0),
        },
        requested,
        layout,
        estimates,
        measured: Vec::new(),
    })
}
