//! The send gate: congestion state per peer, the bytes in flight toward
//! it, and what the controller hears (sends, acknowledgements, losses).

use super::*;

/// Builds a controller for a peer (see [`Nic::set_controller_factory`]).
pub type ControllerFactory = dyn Fn(NodeAddr) -> Box<dyn CongestionControl> + Send;

/// The host's controller factory, if it gave one (else the configured
/// algorithm is built).
#[derive(Default)]
pub(super) struct Factory(pub Option<Box<ControllerFactory>>);

/// Configuration, the same in every run of one search: only whether the
/// host gave its own factory.
#[cfg(feature = "fingerprint")]
impl serde::Serialize for Factory {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bool(self.0.is_some())
    }
}

impl core::fmt::Debug for Factory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(if self.0.is_some() {
            "custom"
        } else {
            "configured"
        })
    }
}

/// Congestion state toward one peer.
#[derive(Debug)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Flow {
    #[cfg_attr(
        feature = "fingerprint",
        serde(serialize_with = "crate::cc::serialize_controller")
    )]
    pub cc: Box<dyn CongestionControl>,
    /// Bytes of packets in the OP table toward this peer.
    pub inflight: u64,
    /// Entropies whose packets came back clean, to use again (REPS).
    pub recycled: VecDeque<u16>,
    /// The next fresh entropy.
    pub next_entropy: u16,
    /// Entropies abandoned since the fresh ones last came round: skipped
    /// when fresh ones are taken (one bit each).
    pub bad: Vec<u64>,
    /// The entropies most recently acknowledged clean, oldest first (at
    /// most [`GOOD_KEPT`]): what a frozen flow sends on.
    pub good: VecDeque<u16>,
    /// REPS's freezing: after a retransmit timeout (a path that loses
    /// everything says so only this way) the flow explores no fresh
    /// entropy before this time; with none recycled it cycles through
    /// `good`. Without it, a flow of few entropies comes round to the dead
    /// ones every few packets, and a packet sent again can land on a dead
    /// path time after time until its retries run out.
    pub frozen_until: Instant,
    /// How far out of order acknowledgements from this peer have come
    /// (in send time): loss detection waits this much longer than the SACK
    /// delay (see `detect_overtaken`).
    pub reorder: udrma_proto::time::Duration,
    /// When `reorder` last doubled on copies judged spurious by timing.
    pub widened: Option<Instant>,
    /// Losses found by overtaking since `reorder` last grew (it halves
    /// after `CLEAN_TO_NARROW`).
    pub clean: u32,
    /// The operations toward this peer, oldest first (some may have
    /// ended: they are dropped at the next scan across them).
    pub open: VecDeque<u32>,
    /// When a new READ response from this peer last arrived: a READ that
    /// times out after it was asked is in a queue this requester's own
    /// READs overflow, not on a dead path (see `count`).
    pub responded: Instant,
    /// The loss window toward this peer, once a congestion loss cut it
    /// (see `loss_window`).
    pub loss_window: Option<super::loss_window::LossWindow>,
    /// When this peer last said its path is congested (an ECN echo, or a
    /// trim): a go-back-N loss near then cuts the loss window.
    pub congested: Option<Instant>,
    /// The copy a timeout last sent toward this peer (`timeout_hold`):
    /// until the peer answers something, other timers toward it wait for
    /// that copy's answer.
    pub timeout_copy: Option<super::timeout_hold::TimeoutCopy>,
    /// When this peer last acknowledged a packet, and when that packet
    /// had left (`rto_restart` counts a timer from there when the packet
    /// acknowledged left before the timer's).
    pub acked: Instant,
    pub acked_sent: Instant,
    /// The last [`RESENT_KEPT`] packets sent again because later ones were
    /// acknowledged first, with when their previous copy had left, the
    /// oldest overwritten first: an ACK flagged `DUP` for one of them says
    /// the copy was not needed (see `Nic::on_duplicate`).
    pub resent: [Resent; RESENT_KEPT],
    /// Where the next entry of `resent` goes.
    pub resent_next: usize,
}

/// A packet sent again on loss detection: its operation, its segment, and
/// when the copy before this one left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Resent {
    pub msg_id: u32,
    pub seg: u32,
    pub prev_sent: Instant,
    /// When an acknowledgement of the packet came, if one has.
    pub acked: Option<Instant>,
}

/// Packets sent again on loss detection that a flow remembers, so that a
/// duplicate reported later can be matched (a copy is answered within a
/// round trip or two, and a burst of losses rarely exceeds this).
pub(super) const RESENT_KEPT: usize = 16;

/// An empty entry of `Flow::resent` (no operation has this number).
const NO_PACKET: Resent = Resent {
    msg_id: u32::MAX,
    seg: u32::MAX,
    prev_sent: Instant::ZERO,
    acked: None,
};

/// Losses found by overtaking, none of them judged spurious and no
/// reordering seen meanwhile, after which a flow's reordering window
/// halves (RACK resets its window after 16 such recoveries, RFC 8985
/// §6.2): one misjudgment, or reordering that has passed, does not widen
/// it for good.
pub(super) const CLEAN_TO_NARROW: u32 = 16;

impl Flow {
    /// The reordering window grows to at least `seen`; a growth restarts
    /// the count of clean recoveries.
    pub(super) fn learn_reorder(&mut self, seen: udrma_proto::time::Duration) {
        if seen > self.reorder {
            self.reorder = seen;
            self.clean = 0;
        }
    }

    /// A loss was found by overtaking: after `CLEAN_TO_NARROW` of them
    /// with no growth, the window halves.
    pub(super) fn clean_recovery(&mut self) {
        self.clean += 1;
        if self.clean >= CLEAN_TO_NARROW {
            self.clean = 0;
            self.reorder = udrma_proto::time::Duration(self.reorder.0 / 2);
        }
    }

    /// Remembers that packet `seg` of operation `msg_id`, whose previous
    /// copy left at `prev_sent`, was sent again on loss detection.
    pub(super) fn note_resent(&mut self, msg_id: u32, seg: u32, prev_sent: Instant) {
        self.resent[self.resent_next] = Resent {
            msg_id,
            seg,
            prev_sent,
            acked: None,
        };
        self.resent_next = (self.resent_next + 1) % RESENT_KEPT;
    }

    /// Notes when packet `seg` of `msg_id`, if remembered as sent again,
    /// was acknowledged (the first acknowledgement only).
    pub(super) fn resent_acked(&mut self, msg_id: u32, seg: u32, at: Instant) {
        if let Some(r) = self
            .resent
            .iter_mut()
            .find(|p| (p.msg_id, p.seg) == (msg_id, seg))
        {
            r.acked.get_or_insert(at);
        }
    }

    /// The entry of packet `seg` of `msg_id` if it is remembered as sent
    /// again on loss detection; it is forgotten either way, so one
    /// packet's copy is judged at most once.
    pub(super) fn take_resent(&mut self, msg_id: u32, seg: u32) -> Option<Resent> {
        let i = self
            .resent
            .iter()
            .position(|p| (p.msg_id, p.seg) == (msg_id, seg))?;
        Some(std::mem::replace(&mut self.resent[i], NO_PACKET))
    }
}

/// Known-good entropies a flow keeps for freezing.
const GOOD_KEPT: usize = 8;

/// Most sendable operations the gate looks past a blocked head for.
const GATE_SCAN: usize = 128;

/// Why the gate kept a packet back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum Gate {
    Open,
    /// The window is full: an acknowledgement will open it.
    Window,
    /// Pacing: not before this time.
    Pace(Instant),
    /// Out of receiver credit: a GRANT will open it.
    Credit,
}

impl Nic {
    /// Uses `factory` instead of the configured algorithm for every peer
    /// this NIC starts talking to from now on (flows that exist keep their
    /// controller). The crate's `custom_cc` example shows one.
    pub fn set_controller_factory(
        &mut self,
        factory: impl Fn(NodeAddr) -> Box<dyn CongestionControl> + Send + 'static,
    ) {
        self.factory = Factory(Some(Box::new(factory)));
    }

    /// The window toward `peer` in bytes, once a packet went there
    /// (`u64::MAX` when the controller sets none).
    pub fn cc_window(&self, peer: NodeAddr) -> Option<u64> {
        self.flows.get(&peer).map(|f| f.cc.window())
    }

    /// Bytes in flight toward `peer`.
    pub fn inflight_bytes(&self, peer: NodeAddr) -> u64 {
        self.flows.get(&peer).map_or(0, |f| f.inflight)
    }

    pub(super) fn flow(&mut self, peer: NodeAddr) -> &mut Flow {
        let (factory, cfg) = (&self.factory, &self.cfg.cc);
        let multipath = self.cfg.multipath;
        self.flows.get_or_insert_with(peer, || Flow {
            cc: match &factory.0 {
                Some(f) => f(peer),
                None => cfg.build(),
            },
            inflight: 0,
            recycled: VecDeque::new(),
            next_entropy: 0,
            bad: Vec::new(),
            good: VecDeque::new(),
            frozen_until: Instant::ZERO,
            responded: Instant::ZERO,
            loss_window: None,
            congested: None,
            timeout_copy: None,
            acked: Instant::ZERO,
            acked_sent: Instant::ZERO,
            // Sprayed packets take paths of different delay: start the
            // reordering window at one base RTT (half made a thousand
            // spurious copies on a 1,024-host permutation, and ended it
            // no sooner: docs/congestion.md, "Loss recovery").
            reorder: if multipath == Multipath::Single {
                udrma_proto::time::Duration::ZERO
            } else {
                cfg.base_rtt
            },
            widened: None,
            clean: 0,
            open: VecDeque::new(),
            resent: [NO_PACKET; RESENT_KEPT],
            resent_next: 0,
        })
    }

    /// The entropy (source port offset) for the next packet to `peer`.
    pub(super) fn pick_entropy(&mut self, now: Instant, peer: NodeAddr) -> u16 {
        let (mode, n) = (self.cfg.multipath, self.cfg.entropies.max(1));
        if mode == Multipath::Single {
            return 0;
        }
        let f = self.flow(peer);
        if mode == Multipath::Reps {
            if let Some(e) = f.recycled.pop_front() {
                self.stats.entropies_reused += 1;
                return e;
            }
            if now < f.frozen_until {
                if let Some(e) = f.good.pop_front() {
                    f.good.push_back(e);
                    self.stats.entropies_reused += 1;
                    return e;
                }
            }
        }
        // Fresh ones in turn, skipping those abandoned in this round;
        // each time the turn comes round, every path is tried again (a
        // link that came back is found again).
        for _ in 0..n {
            let e = f.next_entropy % n;
            f.next_entropy = (e + 1) % n;
            if f.next_entropy == 0 {
                f.bad.clear();
            }
            let (w, b) = (usize::from(e) / 64, e % 64);
            if f.bad.get(w).is_none_or(|word| word & (1 << b) == 0) {
                return e;
            }
        }
        f.bad.clear();
        f.next_entropy % n
    }

    /// What came back about a packet sent with `entropy`: a clean
    /// acknowledgement puts the entropy up for reuse (REPS); a mark, a
    /// trim or a loss leaves it abandoned.
    pub(super) fn entropy_feedback(&mut self, peer: NodeAddr, entropy: u16, clean: bool) {
        if self.cfg.multipath != Multipath::Reps {
            return;
        }
        // One slot per packet the OP table can hold (at least one per
        // entropy): a selective ACK of many packets recycles every one of
        // their entropies, not just the first few, so that what follows
        // it does not explore fresh (possibly dead) paths instead.
        let cap = usize::from(self.cfg.entropies).max(usize::from(self.cfg.op_table_capacity));
        let f = self.flow(peer);
        if !clean {
            let (w, b) = (usize::from(entropy) / 64, entropy % 64);
            if f.bad.len() <= w {
                f.bad.resize(w + 1, 0);
            }
            f.bad[w] |= 1 << b;
            f.good.retain(|e| *e != entropy);
            self.stats.entropies_abandoned += 1;
            return;
        }
        if f.recycled.len() < cap {
            f.recycled.push_back(entropy);
        }
        if f.good.back() != Some(&entropy) {
            f.good.retain(|e| *e != entropy);
            if f.good.len() >= GOOD_KEPT {
                f.good.pop_front();
            }
            f.good.push_back(entropy);
        }
    }

    /// A retransmit timeout toward `peer`: freeze its exploration of fresh
    /// entropies for one RTO (REPS's freezing mode), the time a packet
    /// sent down a dead path takes to be found lost.
    pub(super) fn entropy_freeze(&mut self, now: Instant, peer: NodeAddr) {
        if self.cfg.multipath != Multipath::Reps {
            return;
        }
        let rto = self.rtt_to(peer).rto();
        let f = self.flow(peer);
        f.frozen_until = f.frozen_until.max(now + rto);
    }

    /// Whether a new packet of `bytes` may go to `peer` now.
    pub(super) fn gate(&self, now: Instant, peer: NodeAddr, bytes: u64) -> Gate {
        let Some(f) = self.flows.get(&peer) else {
            return Gate::Open;
        };
        if f.cc.credit().is_some_and(|c| c < bytes) {
            return Gate::Credit;
        }
        let window = f.cc.window().min(Nic::window_after_loss(f));
        if f.inflight > 0 && f.inflight.saturating_add(bytes) > window {
            return Gate::Window;
        }
        match f.cc.next_send_time() {
            Some(t) if t > now => Gate::Pace(t),
            _ => Gate::Open,
        }
    }

    /// The sendable operation to take a packet from; else arms the
    /// earliest pacing wake-up. Without a controller: the oldest (FIFO).
    /// With one: peers take turns in address order after the one served
    /// last, each peer's operations oldest first (so a peer's segments do
    /// not interleave and flood its receive registry), among the first
    /// [`GATE_SCAN`] sendable operations whose peer's gate is open.
    pub(super) fn pick_sendable(&mut self, now: Instant) -> Option<usize> {
        self.rnr_hold.retain(|_, t| *t > now);
        if !self.gated() {
            return (!self.sendable.is_empty()).then_some(0);
        }
        let mut wake: Option<Instant> = None;
        let mtu = u64::from(self.cfg.mtu_payload);
        let last = self.rr_last;
        // Peers after the last one served come first, then the rest.
        let turn = |dst: NodeAddr| (last.is_some_and(|l| dst <= l), dst);
        let mut best: Option<((bool, NodeAddr), usize)> = None;
        // Peers out of receiver credit, with the new bytes seen waiting.
        let mut starved: BTreeMap<NodeAddr, u64> = BTreeMap::new();
        for (i, msg_id) in self.sendable.iter().take(GATE_SCAN).enumerate() {
            let Some(op) = self.ops.get(msg_id) else {
                return Some(i);
            };
            if op.next_unsent >= op.seg_count {
                return Some(i);
            }
            let bytes = match op.kind {
                OpKind::ReadRequest => op.len,
                _ => op
                    .len
                    .saturating_sub(u64::from(op.next_unsent) * mtu)
                    .min(mtu),
            };
            // A peer that said "not ready" gets no new operation for a
            // while; ones it has begun to take go on (holding them back
            // would keep its registry full of half-received ones).
            let held = self.rnr_hold.get(&op.dst).filter(|t| **t > now);
            let gate = match held {
                Some(&t) if op.next_unsent == 0 => Gate::Pace(t),
                // Go-back-N: a peer whose copies wait at the gate takes no
                // new packet before them (the gate counts a new packet's
                // payload, a copy its whole datagram, so a new one could
                // fit where a copy did not, and be discarded).
                _ if self.copies_held.contains(&op.dst) => Gate::Window,
                _ => self.gate(now, op.dst, bytes),
            };
            match gate {
                Gate::Open => {
                    let key = turn(op.dst);
                    if best.is_none_or(|(k, _)| key < k) {
                        best = Some((key, i));
                        // No peer comes between the last one served and
                        // its successor: nothing further can win.
                        if last.is_some_and(|l| op.dst.0 == l.0.wrapping_add(1)) {
                            break;
                        }
                    }
                }
                Gate::Window => {}
                Gate::Pace(t) => wake = Some(wake.map_or(t, |w| w.min(t))),
                Gate::Credit => *starved.entry(op.dst).or_default() += self.unsent_bytes(op),
            }
        }
        for (peer, backlog) in starved {
            if let Some(t) = self.ask_credit(now, peer, backlog) {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        }
        if let Some((_, i)) = best {
            return Some(i);
        }
        if let Some(t) = wake {
            self.wake_to_pace(t);
        }
        None
    }

    /// Keeps a wake-up at `t` (or sooner) for a packet its pacer holds.
    fn wake_to_pace(&mut self, t: Instant) {
        if self.pace_at.is_none_or(|p| p > t) {
            if let Some(p) = self.pace_at.take() {
                self.timers.remove(&(p, Timer::Pace));
            }
            self.pace_at = Some(t);
            self.timers.insert((t, Timer::Pace));
        }
    }

    /// The next packet of the retransmit queue to send now, taken out of
    /// it. Without a controller, its head. With one, a packet judged lost
    /// goes through its peer's gate as new data does (its bytes left the
    /// flight when it was judged lost): the first, among the first
    /// [`GATE_SCAN`], whose peer's gate is open; the others keep their
    /// places (a peer's copies stay in order). Before, a go-back-N resend
    /// of a window left at line rate whatever the controller said, into
    /// the queue that had just trimmed it: 277,337 copies for 241,969
    /// trims on a dumbbell where selective retransmission sent 24,746.
    /// A packet sent again for a receiver-not-ready never left the flight
    /// and is not held.
    pub(super) fn next_retransmit(&mut self, now: Instant) -> Option<OpNumber> {
        self.copies_held.clear();
        if !self.cc_active() && self.windowed_flows == 0 {
            return self.retransmit_queue.pop_front();
        }
        let mut wake: Option<Instant> = None;
        // Peers whose gate is shut, with the bytes of their copies held
        // (what a receiver-credit controller asks credit for).
        let mut held: BTreeMap<NodeAddr, (Gate, u64)> = BTreeMap::new();
        let mut pick = None;
        for (i, opn) in self.retransmit_queue.iter().take(GATE_SCAN).enumerate() {
            let Some(inf) = self.op_table.get(*opn).filter(|e| e.lost) else {
                // (Freed since it was queued, or never out of flight.)
                pick = Some(i);
                break;
            };
            let Some(dst) = self.ops.get(&inf.msg_id).map(|op| op.dst) else {
                pick = Some(i);
                break;
            };
            let bytes = u64::from(inf.bytes);
            if let Some((_, b)) = held.get_mut(&dst) {
                *b += bytes;
                continue;
            }
            match self.gate(now, dst, bytes) {
                Gate::Open => {
                    pick = Some(i);
                    break;
                }
                gate => {
                    if let Gate::Pace(t) = gate {
                        wake = Some(wake.map_or(t, |w| w.min(t)));
                    }
                    held.insert(dst, (gate, bytes));
                }
            }
        }
        if self.cfg.retransmit == RetransmitMode::GoBackN {
            self.copies_held = held.keys().copied().collect();
        }
        let starved: Vec<(NodeAddr, u64)> = held
            .into_iter()
            .filter(|(_, (g, _))| *g == Gate::Credit)
            .map(|(p, (_, b))| (p, b))
            .collect();
        if let Some(i) = pick {
            return self.retransmit_queue.remove(i);
        }
        for (peer, backlog) in starved {
            if let Some(t) = self.ask_credit(now, peer, backlog) {
                wake = Some(wake.map_or(t, |w| w.min(t)));
            }
        }
        if let Some(t) = wake {
            self.wake_to_pace(t);
        }
        None
    }

    /// New bytes an operation has still to send, as they will count in
    /// flight (a READ request: the response bytes it asks for).
    fn unsent_bytes(&self, op: &Op) -> u64 {
        if op.kind == OpKind::ReadRequest {
            return if op.next_unsent == 0 { op.len } else { 0 };
        }
        let mtu = u64::from(self.cfg.mtu_payload);
        let left = u64::from(op.seg_count.saturating_sub(op.next_unsent));
        let header = (udrma_proto::HEADER_LEN + 16 + udrma_proto::ICRC_LEN) as u64;
        op.len.saturating_sub(u64::from(op.next_unsent) * mtu) + left * header
    }

    /// Whether a controller (configured or custom) gates the send path;
    /// without one the engine sends in FIFO order, as before congestion
    /// control existed.
    pub(super) fn cc_active(&self) -> bool {
        self.factory.0.is_some() || self.cfg.cc.algorithm != crate::cc::CcAlgorithm::None
    }

    /// Whether the gate decides what goes next: a controller is on, or a
    /// peer holds new packets back (receiver not ready).
    pub(super) fn gated(&self) -> bool {
        self.cc_active() || !self.rnr_hold.is_empty() || self.windowed_flows > 0
    }

    /// A peer said it is not ready: no new operation starts toward it for
    /// `delay`.
    pub(super) fn hold_peer(
        &mut self,
        now: Instant,
        peer: NodeAddr,
        delay: udrma_proto::time::Duration,
    ) {
        let until = now + delay;
        let t = self.rnr_hold.get_or_insert_with(peer, || until);
        *t = (*t).max(until);
    }

    /// Whether more operations should be cut while the gate holds every
    /// sendable one back (another peer's may be open).
    pub(super) fn may_cut_more(&self) -> bool {
        self.sendable.len() < GATE_SCAN
    }

    /// A new packet of `bytes` left for `peer`.
    pub(super) fn flow_sent(&mut self, now: Instant, peer: NodeAddr, bytes: u64) {
        let f = self.flow(peer);
        f.inflight += bytes;
        f.cc.on_send(now, bytes);
    }

    /// A packet left the OP table (acknowledged or given up).
    pub(super) fn flow_released(&mut self, peer: NodeAddr, bytes: u32) {
        if let Some(f) = self.flows.get_mut(&peer) {
            f.inflight = f.inflight.saturating_sub(u64::from(bytes));
        }
    }

    pub(super) fn flow_acked(&mut self, now: Instant, peer: NodeAddr, ack: AckSample) {
        if ack.ce {
            self.stats.ecn_echoes += 1;
            self.flow(peer).congested = Some(now);
        }
        self.flow(peer).cc.on_ack(now, ack);
    }

    pub(super) fn flow_lost(&mut self, now: Instant, peer: NodeAddr, bytes: u32, cause: LossCause) {
        let f = self.flow(peer);
        if cause == LossCause::Trimmed {
            f.congested = Some(now);
        }
        f.cc.on_loss(now, u64::from(bytes), cause);
    }
}

#[cfg(test)]
#[path = "flow_tests.rs"]
mod tests;
