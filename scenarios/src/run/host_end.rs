//! What a host ended an RDMA run with, as the checks and the report read
//! it: its app's records, and the verdicts that need its memory, worked
//! out where the host ran (its bytes are only there). The ends travel as
//! bytes to where the report is made ([`Backend::gather`]): one process
//! gathers its own hosts', a run on ranks every rank's on rank 0, so the
//! checks read the same ends whichever ran the hosts.

use serde::{Deserialize, Serialize};
use udrma_host::workload::is_pattern;
use udrma_host::workload::rdma::{
    target_seed, OpKind, OpRecord, RdmaApp, RdmaPlan, GUARD_LEN, GUARD_SEED,
};
use udrma_nic::{MrKey, WrId};
use udrma_proto::{Instant, NodeAddr};

use crate::backend::Backend;

/// One host's end (see the module documentation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostEnd {
    pub(crate) host: u32,
    /// Its RDMA app's part, if it had one.
    pub(crate) app: Option<AppEnd>,
    /// A NIC table past its limit (`bounded-state`).
    pub(crate) over_limit: Option<String>,
    /// What its NIC still holds, in words (the leftover note).
    pub(crate) held: Vec<String>,
}

/// What an RDMA app recorded, and the verdicts on its host's memory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct AppEnd {
    /// The operations it posted, by index in the plan.
    pub(crate) records: Vec<(usize, Record)>,
    /// The WRITEs that landed in it.
    pub(crate) landed: Vec<usize>,
    /// The WRITEs whose targets its reuse overwrote, with the pattern.
    pub(crate) reused: Vec<(usize, u32)>,
    pub(crate) notes: Vec<String>,
    /// Every landing and READ brought its source's bytes.
    pub(crate) bytes_ok: bool,
    /// Each receive buffer a SEND filled, in order: the SENDs to this
    /// host whose source bytes it holds.
    pub(crate) filled: Vec<Vec<usize>>,
    /// Every WRITE to this host, in plan order: whether its target holds
    /// the source's bytes, and, if the host reused it, the reuse's
    /// pattern.
    pub(crate) writes: Vec<(usize, bool, Option<bool>)>,
    /// Why bytes outside every accepted operation changed (empty: none
    /// did; `no-out-of-bounds`).
    pub(crate) bounds: Vec<String>,
}

/// [`OpRecord`] as it travels.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct Record {
    posted_at: Option<u64>,
    wr: Option<u64>,
    completions: u32,
    ok: Option<bool>,
    done_at: Option<u64>,
}

impl From<&OpRecord> for Record {
    fn from(r: &OpRecord) -> Record {
        Record {
            posted_at: r.posted_at.map(|t| t.0),
            wr: r.wr.map(|w| w.0),
            completions: r.completions,
            ok: r.ok,
            done_at: r.done_at.map(|t| t.0),
        }
    }
}

impl From<Record> for OpRecord {
    fn from(r: Record) -> OpRecord {
        OpRecord {
            posted_at: r.posted_at.map(Instant),
            wr: r.wr.map(WrId),
            completions: r.completions,
            ok: r.ok,
            done_at: r.done_at.map(Instant),
        }
    }
}

impl HostEnd {
    /// Host `h`'s end on `world`, where it ran; the memory verdicts only
    /// with real memory (`phantom`: none). `to_me` holds the plan's
    /// operations that target `h`, in plan order.
    pub(crate) fn of(
        world: &dyn Backend,
        h: NodeAddr,
        plan: &RdmaPlan,
        to_me: &[usize],
        phantom: bool,
    ) -> HostEnd {
        let nic = world.nic(h);
        let app = world
            .app(h)
            .and_then(udrma_host::app::downcast_ref::<RdmaApp>)
            .map(|app| AppEnd::of(world, h, app, plan, to_me, phantom));
        HostEnd {
            host: h.0,
            app,
            over_limit: nic.occupancy().violation().map(|w| w.to_string()),
            held: crate::run::leftover::held(nic),
        }
    }
}

impl AppEnd {
    fn of(
        world: &dyn Backend,
        h: NodeAddr,
        app: &RdmaApp,
        plan: &RdmaPlan,
        to_me: &[usize],
        phantom: bool,
    ) -> AppEnd {
        let mut end = AppEnd {
            records: app.records().iter().map(|(i, r)| (*i, r.into())).collect(),
            landed: app.landed().keys().copied().collect(),
            reused: app.reused().iter().map(|(i, s)| (*i, *s)).collect(),
            notes: app.notes().to_vec(),
            bytes_ok: app.bytes_ok(),
            ..AppEnd::default()
        };
        if phantom {
            return end;
        }
        let dst = app.keys().dst;
        let to_me = |kind: OpKind| {
            to_me
                .iter()
                .map(|&i| (i, &plan.ops[i]))
                .filter(move |(_, p)| p.kind == kind)
        };
        for (off, len) in app.filled() {
            let b = region_bytes(world, h, dst, *off, *len);
            end.filled.push(
                to_me(OpKind::Send)
                    .filter(|(_, p)| p.is_source(&b))
                    .map(|(i, _)| i)
                    .collect(),
            );
        }
        for (i, p) in to_me(OpKind::Write) {
            let got = region_bytes(world, h, dst, p.dst_off, p.size);
            let reused = app.reused().get(&i).map(|seed| is_pattern(&got, *seed, 0));
            end.writes.push((i, p.is_source(&got), reused));
        }
        end.bounds = out_of_bounds(world, h, app, plan);
        end
    }
}

/// `no-out-of-bounds` on host `me`: why bytes outside every accepted
/// operation changed (sources, the targets' unused tail, the guard);
/// empty when none did.
fn out_of_bounds(world: &dyn Backend, me: NodeAddr, app: &RdmaApp, plan: &RdmaPlan) -> Vec<String> {
    let mut why = Vec::new();
    let keys = app.keys();
    let mem = world.nic(me).memory();
    let bytes = |key| mem.region(key).map(|r| &r.bytes[..]).unwrap_or_default();
    if !is_pattern(bytes(keys.guard), GUARD_SEED, 0) || bytes(keys.guard).len() != GUARD_LEN {
        why.push("guard region written".to_string());
    }
    if !is_pattern(bytes(keys.src), me.0, 0) {
        why.push("a source region changed".to_string());
    }
    let used = plan.dst_len[me.0 as usize] as usize;
    let dst = bytes(keys.dst);
    if dst.len() > used && !is_pattern(&dst[used..], target_seed(me), used as u64) {
        why.push("bytes beyond every target changed".to_string());
    }
    why
}

/// Bytes `off .. off + len` of host `h`'s region `key` (empty if there
/// are none).
pub(crate) fn region_bytes(
    world: &dyn Backend,
    h: NodeAddr,
    key: MrKey,
    off: u64,
    len: u64,
) -> Vec<u8> {
    world
        .nic(h)
        .memory()
        .region(key)
        .and_then(|r| r.bytes.get(off as usize..(off + len) as usize))
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// The ends of `hosts` on `world`, as bytes to gather.
pub(crate) fn encode(ends: &[HostEnd]) -> Result<Vec<u8>, String> {
    postcard::to_stdvec(ends).map_err(|e| format!("the hosts' ends: {e}"))
}

/// Every gathered part's ends, in host order; a part that does not
/// parse is named by its index (the rank that sent it).
pub(crate) fn decode(parts: &[Vec<u8>]) -> Result<Vec<HostEnd>, String> {
    let mut all = Vec::new();
    for (r, bytes) in parts.iter().enumerate() {
        let ends: Vec<HostEnd> = postcard::from_bytes(bytes)
            .map_err(|e| format!("rank {r}'s hosts' ends do not parse: {e}"))?;
        all.extend(ends);
    }
    all.sort_by_key(|e| e.host);
    Ok(all)
}
