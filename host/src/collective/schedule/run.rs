//! Carries out every rank's plan in memory: the meaning of a schedule,
//! and the reference its runs over the engine are checked against.
//!
//! Ranks take turns: a rank whose step's receives have all arrived
//! finishes that step and posts the next one's sends. Sends never wait
//! (as if every message were eager), so a run stops only when every rank
//! is done, or when none can move: a deadlock, reported with what each
//! rank waits for.

use std::collections::{BTreeMap, VecDeque};

use udrma_proto::{ReduceOp, ReduceType};

use super::{Land, Msg, Plan, Span, Step};
use crate::collective::reference::element;

/// What a run left: each rank's arena, and which ranks each has heard
/// from, directly or through others (itself included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    /// Each rank's arena after its last step.
    pub arenas: Vec<Vec<u8>>,
    /// `heard[r][q]`: rank `q`'s start happened before rank `r`'s end.
    pub heard: Vec<Vec<bool>>,
    /// Messages sent, and their bytes.
    pub messages: u64,
    /// Bytes of all messages.
    pub bytes: u64,
}

struct Sent {
    bytes: Vec<u8>,
    heard: Vec<bool>,
}

fn span_of(arena: &[u8], s: Span) -> Result<&[u8], String> {
    arena.get(s.at as usize..s.end() as usize).ok_or_else(|| {
        format!(
            "bytes {}..{} outside an arena of {}",
            s.at,
            s.end(),
            arena.len()
        )
    })
}

fn gather(arena: &[u8], m: &Msg) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(m.bytes() as usize);
    for s in &m.spans {
        out.extend_from_slice(span_of(arena, *s)?);
    }
    Ok(out)
}

/// Messages sent and not yet received, per (sender, receiver).
type Queues = BTreeMap<(u32, u32), VecDeque<Sent>>;

/// Runs `plans` (rank `r`'s at index `r`), each arena starting as
/// zeros with `input(r)` at its plan's input span; `fold(received,
/// held)` folds a received run of bytes into the held one.
pub fn run(
    plans: &[Plan],
    input: impl Fn(u32) -> Vec<u8>,
    fold: impl Fn(&[u8], &mut [u8]),
) -> Result<Ran, String> {
    let p = plans.len();
    let mut ran = Ran {
        arenas: Vec::with_capacity(p),
        heard: (0..p).map(|r| (0..p).map(|q| q == r).collect()).collect(),
        messages: 0,
        bytes: 0,
    };
    for (r, plan) in plans.iter().enumerate() {
        let mut a = vec![0u8; plan.arena as usize];
        let data = input(r as u32);
        if data.len() as u64 != plan.input.len {
            return Err(format!(
                "rank {r}: an input of {} bytes for a span of {}",
                data.len(),
                plan.input.len
            ));
        }
        span_of(&a, plan.input)?;
        a[plan.input.at as usize..plan.input.end() as usize].copy_from_slice(&data);
        ran.arenas.push(a);
    }
    let mut queues = Queues::new();
    let mut at = vec![0usize; p];
    let mut posted = vec![false; p];
    loop {
        let mut moved = false;
        for r in 0..p {
            let Some(step) = plans[r].steps.get(at[r]) else {
                continue;
            };
            if !posted[r] {
                post(&mut ran, &mut queues, r, step)?;
                posted[r] = true;
                moved = true;
            }
            if land(&mut ran, &mut queues, r, step, &fold)? {
                at[r] += 1;
                posted[r] = false;
                moved = true;
            }
        }
        if (0..p).all(|r| at[r] == plans[r].steps.len()) {
            break;
        }
        if !moved {
            let waiting: Vec<String> = (0..p)
                .filter(|&r| at[r] < plans[r].steps.len())
                .map(|r| format!("rank {r} at step {}", at[r]))
                .collect();
            return Err(format!("deadlock: {}", waiting.join(", ")));
        }
    }
    if let Some(((from, to), q)) = queues.iter().find(|(_, q)| !q.is_empty()) {
        return Err(format!(
            "{} message(s) from rank {from} to rank {to} never received",
            q.len()
        ));
    }
    Ok(ran)
}

/// Rank `r` makes the step's copies and posts its sends.
fn post(ran: &mut Ran, queues: &mut Queues, r: usize, step: &Step) -> Result<(), String> {
    let p = ran.arenas.len();
    let a = &mut ran.arenas[r];
    for &(from, to) in &step.copies {
        if from.len != to.len {
            return Err(format!(
                "rank {r}: a copy of {} bytes into {}",
                from.len, to.len
            ));
        }
        let b = span_of(a, from)?.to_vec();
        span_of(a, to)?;
        a[to.at as usize..to.end() as usize].copy_from_slice(&b);
    }
    for m in &step.sends {
        if m.peer as usize >= p {
            return Err(format!("rank {r}: a send to rank {} of {p}", m.peer));
        }
        let b = gather(a, m)?;
        ran.messages += 1;
        ran.bytes += b.len() as u64;
        let sent = Sent {
            bytes: b,
            heard: ran.heard[r].clone(),
        };
        queues
            .entry((r as u32, m.peer))
            .or_default()
            .push_back(sent);
    }
    Ok(())
}

/// If every receive of rank `r`'s step has arrived, lands them in order
/// and says so.
fn land(
    ran: &mut Ran,
    queues: &mut Queues,
    r: usize,
    step: &Step,
    fold: &impl Fn(&[u8], &mut [u8]),
) -> Result<bool, String> {
    let mut need: BTreeMap<u32, usize> = BTreeMap::new();
    for (m, _) in &step.recvs {
        *need.entry(m.peer).or_default() += 1;
    }
    let ready = need
        .iter()
        .all(|(&q, &k)| queues.get(&(q, r as u32)).is_some_and(|v| v.len() >= k));
    if !ready {
        return Ok(false);
    }
    let a = &mut ran.arenas[r];
    for (m, land) in &step.recvs {
        let got = queues
            .get_mut(&(m.peer, r as u32))
            .and_then(VecDeque::pop_front)
            .ok_or("a counted message is gone")?;
        if got.bytes.len() as u64 != m.bytes() {
            return Err(format!(
                "rank {r}: {} bytes from rank {} where {} were expected",
                got.bytes.len(),
                m.peer,
                m.bytes()
            ));
        }
        for (h, g) in ran.heard[r].iter_mut().zip(&got.heard) {
            *h |= g;
        }
        let mut from = 0usize;
        for s in &m.spans {
            span_of(a, *s)?;
            let piece = &got.bytes[from..from + s.len as usize];
            let held = &mut a[s.at as usize..s.end() as usize];
            match land {
                Land::Copy => held.copy_from_slice(piece),
                Land::Fold => fold(piece, held),
            }
            from += s.len as usize;
        }
    }
    Ok(true)
}

/// Folds `got` into `held` element by element as MPI's built-in `op`
/// on `ty` does (`got ⊕ held`, `got` first in combination order), both
/// little-endian values of the type's width. Operations with locations
/// (MINLOC, MAXLOC) take pair types in MPI and are not folded here: they
/// and operations the type does not define leave `held` as it is.
pub fn fold_elements(op: ReduceOp, ty: ReduceType, got: &[u8], held: &mut [u8]) {
    let w = ty.width().unwrap_or(8);
    for (g, h) in got.chunks_exact(w).zip(held.chunks_exact_mut(w)) {
        let mut x = [0u8; 8];
        let mut y = [0u8; 8];
        x[..w].copy_from_slice(g);
        y[..w].copy_from_slice(h);
        let (a, b) = (u64::from_le_bytes(x), u64::from_le_bytes(y));
        if let Some((v, _)) = element(op, ty, (a, 0), (b, 0)) {
            h.copy_from_slice(&v.to_le_bytes()[..w]);
        }
    }
}
