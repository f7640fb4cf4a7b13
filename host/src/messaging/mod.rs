//! The messaging layer: MVICH-like tagged send/receive over the engine.
//!
//! A [`Messenger`] is one host's MPI-style point-to-point layer. It drives
//! a [`Nic`] it is handed on every call (sans-IO like the engine: no clock,
//! no socket; time comes in as `now`), and offers:
//!
//! - [`Messenger::send`] / [`Messenger::recv`]: tagged messages with
//!   wildcards for source and tag on the receive side, matched through a
//!   posted-receive queue and an unexpected queue, in MPI's non-overtaking
//!   order per (source, tag) even though the transport delivers out of
//!   order;
//! - vbufs and credit flow control: `vbufs_per_peer` receive buffers of
//!   `vbuf_size` bytes pre-posted per peer on a per-peer VI, a
//!   `remote_credit` per peer, credit counts piggybacked on every packet,
//!   NOOPs when the count is not getting through, `credit_preserve`, and a
//!   backlog that drains as credits return;
//! - four protocols: Eager (data through vbufs), R3 (RTS → CTS → data
//!   through vbufs), RGET (RTS with the sender's buffer; the receiver
//!   RDMA-READs; FIN) and RPUT (CTS with the receiver's buffer; the sender
//!   RDMA-WRITEs; FIN), with the fallbacks of docs/design.md §1.
//!
//! The rules are in `docs/messaging.md`, with a worked credit exchange.
//!
//! # Driving it
//! Call [`Messenger::connect`] for every peer (both sides must), then feed
//! it every event of its NIC with [`Messenger::handle_event`] and call
//! [`Messenger::handle_timeout`] at [`Messenger::poll_timeout`]. Results
//! come out of [`Messenger::poll_event`].
//!
//! # Where things are
//! This file holds the messenger's state and the calls a host makes;
//! `types` the public vocabulary (configuration, ids, events, errors,
//! counters); `send`, `receive` and `credits` one `impl Messenger` block
//! each.

use std::collections::{BTreeMap, VecDeque};

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};

use udrma_proto::time::Instant;
use udrma_proto::{NodeAddr, Protocol, Rendezvous};

use udrma_nic::cost::Serial;
use udrma_nic::{Access, Control, Event, MrKey, Nic, WcError, WorkRequest, WrId};

use crate::via::{CqId, Via};

mod credits;
mod receive;
mod send;
mod types;

pub use types::*;

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Peer {
    ep: u16,
    /// vbufs the peer has posted for us that we have not used.
    remote_credit: u32,
    /// Newest cumulative count the peer advertised.
    credits_seen: u16,
    /// vbufs we re-posted for the peer (cumulative, mod 2^16).
    reposted: u16,
    /// Re-posts held back while too many unexpected bytes are held.
    deferred: u32,
    /// Our next sequence number toward the peer.
    next_seq: u32,
    /// The next sequence number we expect from the peer.
    expect_seq: u32,
    /// Messages from the peer waiting for earlier ones.
    reorder: BTreeMap<u32, Arrival>,
    /// Chunks waiting for a credit, oldest first.
    backlog: VecDeque<Chunk>,
    /// When a NOOP check is due (if one is armed).
    noop_at: Option<Instant>,
    /// NOOPs sent since the peer last sent us a chunk or control (their
    /// repeats back off exponentially; see `handle_timeout`).
    noop_streak: u32,
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum ArrivalKind {
    Eager(Vec<u8>),
    Rts(Rendezvous),
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Arrival {
    from: NodeAddr,
    seq: u32,
    tag: u32,
    len: u64,
    kind: ArrivalKind,
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Posted {
    id: RecvId,
    src: Option<NodeAddr>,
    tag: Option<u32>,
    max_len: u64,
}

/// A chunk to send through vbufs.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct Chunk {
    send: SendId,
    dst: NodeAddr,
    kind: u8,
    index: u16,
    seq: u32,
    tag: u32,
    total: u32,
    data_off: u64,
    data_len: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum SendState {
    /// Chunks in flight (eager, or R3 after the CTS).
    Chunks,
    /// RTS sent; waiting for a CTS (R3, RPUT) or a FIN (RGET).
    AwaitPeer,
    /// RPUT WRITE in flight.
    Writing,
    /// FIN in flight (RPUT).
    Finishing,
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct SendMsg {
    dst: NodeAddr,
    tag: u32,
    seq: u32,
    data: Vec<u8>,
    protocol: MsgProtocol,
    state: SendState,
    chunks_left: u64,
    region: Option<MrKey>,
}

#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
struct RecvMsg {
    id: RecvId,
    tag: u32,
    len: u64,
    max_len: u64,
    protocol: MsgProtocol,
    /// R3: assembled bytes and chunks still to come.
    data: Vec<u8>,
    chunks_left: u64,
    got: Vec<bool>,
    region: Option<MrKey>,
}

/// What an outstanding NIC request of ours is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Purpose {
    /// A vbuf pre-posted for `peer` (index into the vbuf region).
    Vbuf { peer: NodeAddr, slot: u32 },
    /// A chunk leaving from send vbuf `slot`.
    Chunk { send: SendId, slot: u32 },
    /// An RTS, CTS or FIN (no completion work beyond errors).
    Control {
        send: Option<SendId>,
        recv: Option<(NodeAddr, u32)>,
    },
    /// The RPUT WRITE of a send.
    Write(SendId),
    /// The RPUT FIN of a send (its completion ends the send).
    Fin(SendId),
    /// The RGET READ of a receive.
    Read(NodeAddr, u32),
}

/// An eager message being put together: bytes, chunks seen, tag, length.
type Assembly = (Vec<u8>, Vec<bool>, u32, u64);

/// Host work that finishes later (cost model).
#[derive(Debug, Clone)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
enum Deferred {
    /// A chunk copied into its send vbuf: post the SEND.
    PostChunk(Chunk, u32),
    /// A vbuf emptied by the host: post it again.
    Repost(NodeAddr, u32),
    /// A message copied out of vbufs: it enters matching.
    Arrived(Arrival),
    /// An R3 receive's last chunk copied out: deliver it.
    R3Done(NodeAddr, u32),
}

/// One host's messaging layer. See the module docs.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub struct Messenger {
    cfg: MsgConfig,
    /// The VI number our peers use for us (their receive endpoint).
    my_ep: u16,
    via: Via,
    cq: CqId,
    peers: BTreeMap<NodeAddr, Peer>,
    /// vbuf memory: one region per peer (vbufs_per_peer × vbuf_size).
    vbuf_regions: BTreeMap<NodeAddr, (MrKey, u64)>,
    /// Send vbufs: one region, free slots.
    send_region: Option<(MrKey, u64)>,
    send_free: Vec<u32>,
    /// Chunks that have a credit and wait for a send vbuf.
    vbuf_wait: VecDeque<Chunk>,
    purposes: BTreeMap<WrId, Purpose>,
    sends: BTreeMap<SendId, SendMsg>,
    /// Sends by (peer, seq), for CTS and FIN.
    send_by_seq: BTreeMap<(NodeAddr, u32), SendId>,
    recvs: BTreeMap<(NodeAddr, u32), RecvMsg>,
    /// Eager messages being assembled: (peer, seq) → (bytes, chunks seen).
    assembling: BTreeMap<(NodeAddr, u32), Assembly>,
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Arrival>,
    unexpected_bytes: u64,
    deferred: BTreeMap<(Instant, u64), Deferred>,
    deferred_seq: u64,
    cpu: Serial,
    next_send: u64,
    next_recv: u64,
    next_addr: u64,
    events: VecDeque<MsgEvent>,
    stats: MsgStats,
    rng: ChaCha8Rng,
}

impl Messenger {
    /// A messenger for the host of `nic`. Fails when the configuration
    /// does not fit the NIC's.
    pub fn new(cfg: MsgConfig, nic: &Nic) -> Result<Messenger, MsgConfigError> {
        cfg.validate(nic.config())?;
        let mut via = Via::new();
        let cq = via.create_cq();
        let rng = ChaCha8Rng::seed_from_u64(
            cfg.seed ^ 0x6d65_7373_656e_6765 ^ u64::from(nic.addr().0) << 32,
        );
        let my_ep = peer_ep(nic.addr()).ok_or_else(|| MsgConfigError::Field {
            field: "host",
            why: format!("{}: node ids above 65534 have no endpoint", nic.addr()),
        })?;
        Ok(Messenger {
            my_ep,
            via,
            cq,
            peers: BTreeMap::new(),
            vbuf_regions: BTreeMap::new(),
            send_region: None,
            send_free: Vec::new(),
            vbuf_wait: VecDeque::new(),
            purposes: BTreeMap::new(),
            sends: BTreeMap::new(),
            send_by_seq: BTreeMap::new(),
            recvs: BTreeMap::new(),
            assembling: BTreeMap::new(),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            unexpected_bytes: 0,
            deferred: BTreeMap::new(),
            deferred_seq: 0,
            cpu: Serial::default(),
            next_send: 1,
            next_recv: 1,
            next_addr: MSG_BASE,
            events: VecDeque::new(),
            stats: MsgStats {
                min_credit: u64::from(cfg.vbufs_per_peer),
                ..MsgStats::default()
            },
            rng,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &MsgConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &MsgStats {
        &self.stats
    }

    /// Credits toward `peer` (vbufs it has posted for us, unused).
    pub fn remote_credit(&self, peer: NodeAddr) -> Option<u32> {
        self.peers.get(&peer).map(|p| p.remote_credit)
    }

    /// vbufs posted for `peer` now (receives the peer's chunks may use),
    /// once connected to it. Once both sides are quiet, the peer's
    /// [`Messenger::remote_credit`] toward us must equal this: a count
    /// lost on the way is a credit the peer never gets back.
    pub fn vbufs_posted_for(&self, peer: NodeAddr) -> Option<usize> {
        let p = self.peers.get(&peer)?;
        Some(self.via.queue_depths(p.ep).map_or(0, |(_, r)| r))
    }

    /// Messages waiting in the unexpected queue, and their eager bytes.
    pub fn unexpected(&self) -> (usize, u64) {
        (self.unexpected.len(), self.unexpected_bytes)
    }

    /// Whether nothing is in progress: no send, no receive, no chunk, no
    /// deferred host work (posted receives that wait for a message do not
    /// count).
    pub fn is_quiet(&self) -> bool {
        self.sends.is_empty()
            && self.recvs.is_empty()
            && self.deferred.is_empty()
            && self.vbuf_wait.is_empty()
            && self.peers.values().all(|p| p.backlog.is_empty())
    }

    /// Sends in progress.
    pub fn sends_in_progress(&self) -> usize {
        self.sends.len()
    }

    fn alloc(&mut self, len: u64) -> u64 {
        let a = self.next_addr;
        // Keep regions apart and aligned.
        self.next_addr += len.max(1).div_ceil(4096) * 4096 + 4096;
        a
    }

    /// Connects to `peer`: creates its VI and pre-posts `vbufs_per_peer`
    /// vbufs for it. Both sides must connect (as a VIA connection does);
    /// each then starts with `vbufs_per_peer` credits.
    pub fn connect(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr) -> Result<(), MsgError> {
        if self.peers.contains_key(&peer) {
            return Ok(());
        }
        let ep = peer_ep(peer).ok_or_else(|| {
            MsgError::Refused(format!(
                "peer {peer}: node ids above 65534 have no endpoint"
            ))
        })?;
        if self.send_region.is_none() {
            let len = u64::from(self.cfg.send_vbufs) * u64::from(self.cfg.vbuf_size);
            let base = self.alloc(len);
            let key = nic.register(base, len as usize, Access::LOCAL);
            self.send_region = Some((key, base));
            self.send_free = (0..u32::from(self.cfg.send_vbufs)).rev().collect();
        }
        self.via
            .create_vi(ep, self.cq, self.cq)
            .map_err(|e| MsgError::Refused(e.to_string()))?;
        let n = u64::from(self.cfg.vbufs_per_peer);
        let len = n * u64::from(self.cfg.vbuf_size);
        let base = self.alloc(len);
        let key = nic.register(base, len as usize, Access::LOCAL);
        self.vbuf_regions.insert(peer, (key, base));
        self.peers.insert(
            peer,
            Peer {
                ep,
                remote_credit: u32::from(self.cfg.vbufs_per_peer),
                credits_seen: 0,
                reposted: 0,
                deferred: 0,
                next_seq: 0,
                expect_seq: 0,
                reorder: BTreeMap::new(),
                backlog: VecDeque::new(),
                noop_at: None,
                noop_streak: 0,
            },
        );
        for slot in 0..n as u32 {
            self.post_vbuf(now, nic, peer, slot)?;
        }
        Ok(())
    }

    fn post_vbuf(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        peer: NodeAddr,
        slot: u32,
    ) -> Result<(), MsgError> {
        let (key, base) = self.vbuf_regions[&peer];
        let ep = self.peers[&peer].ep;
        let addr = base + u64::from(slot) * u64::from(self.cfg.vbuf_size);
        let id = self
            .via
            .post_recv(now, nic, ep, key, addr, u64::from(self.cfg.vbuf_size))
            .map_err(|e| MsgError::Refused(e.to_string()))?;
        self.purposes.insert(id, Purpose::Vbuf { peer, slot });
        Ok(())
    }

    /// Sends `data` to `dst` with `tag`. Completes with
    /// [`MsgEvent::SendDone`].
    pub fn send(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        dst: NodeAddr,
        tag: u32,
        data: Vec<u8>,
    ) -> Result<SendId, MsgError> {
        let len = data.len() as u64;
        let chunks = self.cfg.chunks(len);
        let preserve = u64::from(self.cfg.credit_preserve);
        let threshold = self.cfg.rendezvous_threshold;
        let rendezvous = self.cfg.rendezvous;
        let peer = self
            .peers
            .get_mut(&dst)
            .ok_or(MsgError::NotConnected(dst))?;
        if len > u64::from(u32::MAX) {
            return Err(MsgError::Refused(format!(
                "{len} B: messages are limited to 4 GiB - 1"
            )));
        }
        let id = SendId(self.next_send);
        self.next_send += 1;
        let seq = peer.next_seq;
        peer.next_seq = peer.next_seq.wrapping_add(1);
        let eager_fits = len <= threshold;
        let credits_ok =
            peer.backlog.is_empty() && u64::from(peer.remote_credit) >= chunks + preserve;
        let mut protocol = if eager_fits && credits_ok {
            MsgProtocol::Eager
        } else {
            if eager_fits {
                self.stats.fallbacks += 1;
                self.stats.fallback_credits += 1;
            }
            MsgProtocol::from_wire(rendezvous).unwrap_or(MsgProtocol::R3)
        };
        let mut region = None;
        let mut addr = 0;
        if matches!(protocol, MsgProtocol::Rget | MsgProtocol::Rput) {
            match self.register(now, nic, len, Access::ALL) {
                Some((key, a)) => {
                    if let Some(r) = nic.memory_mut().region_mut(key) {
                        r.bytes.write_at(0..data.len(), &data);
                    }
                    region = Some(key);
                    addr = a;
                }
                None => {
                    self.stats.fallbacks += 1;
                    self.stats.fallback_registration += 1;
                    protocol = MsgProtocol::R3;
                }
            }
        }
        match protocol {
            MsgProtocol::Eager => self.stats.eager += 1,
            MsgProtocol::R3 => self.stats.r3 += 1,
            MsgProtocol::Rget => self.stats.rget += 1,
            MsgProtocol::Rput => self.stats.rput += 1,
        }
        self.sends.insert(
            id,
            SendMsg {
                dst,
                tag,
                seq,
                data,
                protocol,
                state: if protocol == MsgProtocol::Eager {
                    SendState::Chunks
                } else {
                    SendState::AwaitPeer
                },
                chunks_left: chunks,
                region,
            },
        );
        self.send_by_seq.insert((dst, seq), id);
        if protocol == MsgProtocol::Eager {
            self.queue_chunks(now, nic, id, CHUNK_EAGER);
        } else {
            let rkey = region.map_or(0, |k| k.0);
            let rts = Rendezvous {
                protocol: protocol.wire(),
                tag,
                length: len,
                addr: if protocol == MsgProtocol::Rget {
                    addr
                } else {
                    0
                },
                rkey: if protocol == MsgProtocol::Rget {
                    rkey
                } else {
                    0
                },
                seq,
            };
            self.control(now, nic, dst, Control::Rts(rts), Some(id), None);
        }
        Ok(id)
    }

    /// Posts a receive for a message from `src` (any source when `None`)
    /// with `tag` (any tag when `None`) of at most `max_len` bytes.
    /// Completes with [`MsgEvent::RecvDone`].
    pub fn recv(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        src: Option<NodeAddr>,
        tag: Option<u32>,
        max_len: u64,
    ) -> RecvId {
        let id = RecvId(self.next_recv);
        self.next_recv += 1;
        let p = Posted {
            id,
            src,
            tag,
            max_len,
        };
        // The unexpected queue first, in arrival order.
        if let Some(i) = self
            .unexpected
            .iter()
            .position(|a| src.is_none_or(|s| s == a.from) && tag.is_none_or(|t| t == a.tag))
        {
            let a = self.unexpected.remove(i).expect("found");
            if let ArrivalKind::Eager(d) = &a.kind {
                self.unexpected_bytes -= d.len() as u64;
                self.release_deferred(now, nic);
            }
            self.matched(now, nic, p, a);
        } else {
            self.posted.push_back(p);
        }
        id
    }

    /// The next result, oldest first.
    pub fn poll_event(&mut self) -> Option<MsgEvent> {
        self.events.pop_front()
    }

    /// When [`Messenger::handle_timeout`] is due (deferred host work and
    /// NOOP checks).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let d = self.deferred.keys().next().map(|(t, _)| *t);
        let n = self.peers.values().filter_map(|p| p.noop_at).min();
        [d, n].into_iter().flatten().min()
    }

    /// Does the host work due at `now` and sends the NOOPs owed.
    pub fn handle_timeout(&mut self, now: Instant, nic: &mut Nic) {
        while let Some(entry) = self.deferred.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let d = entry.remove();
            self.run_deferred(now, nic, d);
        }
        let due: Vec<NodeAddr> = self
            .peers
            .iter()
            .filter(|(_, p)| p.noop_at.is_some_and(|t| t <= now))
            .map(|(a, _)| *a)
            .collect();
        for peer in due {
            let Some(p) = self.peers.get_mut(&peer) else {
                continue;
            };
            p.noop_at = None;
            // A NOOP is not acknowledged. While the peer stays silent after
            // one, repeat it with backoff (a lost NOOP must not starve a
            // sender whose credits it carried), at most NOOP_REPEATS times.
            let repeat = p.noop_streak > 0 && p.noop_streak < NOOP_REPEATS;
            if self.unadvertised(nic, peer) > 0 || repeat {
                self.noop(nic, peer);
                let p = self.peers.get_mut(&peer).expect("present");
                let backoff = 1u64 << p.noop_streak.min(6);
                p.noop_at = Some(now + self.cfg.noop_interval.saturating_mul(backoff));
            }
        }
    }

    /// Feeds one NIC event (every event of the host's NIC must come here).
    pub fn handle_event(&mut self, now: Instant, nic: &mut Nic, e: Event) {
        if let Some(e) = self.via.dispatch(e) {
            match e {
                Event::Control { from, control, .. } => self.on_control(now, nic, from, control),
                Event::Credits {
                    from, cumulative, ..
                } => self.on_credits(now, nic, from, cumulative),
                // Completions of requests not posted through our VIs, and
                // RDMA arrivals, belong to someone else.
                _ => {}
            }
        }
        while let Some(c) = self.via.poll_cq(self.cq) {
            let Some(purpose) = self.purposes.remove(&c.wr) else {
                continue;
            };
            self.on_completion(now, nic, purpose, c.len, c.result);
        }
    }
}

/// `Truncated` when a message of `len` bytes met a receive of `max`.
fn fits(len: u64, max: u64) -> Result<(), MsgError> {
    if len > max {
        Err(MsgError::Truncated { len, max })
    } else {
        Ok(())
    }
}

fn truncate(data: &mut Vec<u8>, max: u64) -> Result<(), MsgError> {
    let len = data.len() as u64;
    if len > max {
        data.truncate(max as usize);
        Err(MsgError::Truncated { len, max })
    } else {
        Ok(())
    }
}
