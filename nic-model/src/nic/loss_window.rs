//! The loss window: after a loss that congestion caused, a sender keeps
//! fewer bytes out toward that peer, and opens up again as
//! acknowledgements come back, where nothing else would hold its copies
//! back.
//!
//! A go-back-N receiver discards every packet after a gap, so one loss
//! costs the sender the rest of its window, sent again. Nothing made a
//! sender keep less out (a rate controller such as DCQCN paces what it is
//! given, a whole window included): every sender of an incast rewound
//! whole windows into the queue that had just lost them, and into a slow
//! NIC nearly every packet it worked was one it then discarded
//! (docs/testing.md, finding 40). With selective retransmission and no
//! controller, every trimmed packet went again at once, into the same
//! queue, and a slow NIC spent its firmware on the headers (finding 41).
//!
//! TCP answers a loss this way (RFC 5681): a timeout starts again from
//! one packet, a NACK halves what may be out, and the window grows by
//! what is acknowledged up to half of where it was cut, then by a packet
//! per window. Which losses cut it:
//! - go-back-N, with or without a controller: a trim of the packet the
//!   receiver expects; a timeout or `SEQUENCE_ERROR` when the peer
//!   echoed an ECN mark or NACKed a trim from one RTO before the lost
//!   packet left on. A loss with no sign of congestion near it is the
//!   path's own (a lossy link), and a smaller window would only be
//!   slower;
//! - selective retransmission with no controller: a trim (the one loss
//!   that is certainly a full queue). With a controller, the controller
//!   hears the trim and its gate holds the copy.
//!
//! Nothing changes until the first cut toward a peer, and the window is
//! dropped once it has grown past what the OP table holds: a run with no
//! such loss sends as before, packet for packet. The receiver is
//! unchanged (RoCE's under go-back-N).

use super::*;

/// The loss window toward one peer (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct LossWindow {
    /// Bytes that may be out toward the peer.
    pub window: u64,
    /// Below this the window grows by what is acknowledged (slow start),
    /// above it by a packet per window.
    pub threshold: u64,
    /// When the window was last cut (or the last packet handed out by
    /// then leaves, if later): a loss of a packet that left before then
    /// is the same congestion, already answered.
    pub cut: Instant,
}

/// What was lost, as the loss window sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum CutCause {
    /// A retransmit timeout: nothing came back.
    Timeout,
    /// A go-back-N receiver discarded packets after a gap
    /// (`SEQUENCE_ERROR`).
    SequenceError,
    /// A trim: a full queue.
    Trim,
}

impl Nic {
    /// Whether a loss of `cause` may cut the window (before asking
    /// whether congestion caused it).
    fn window_answers(&self, cause: CutCause) -> bool {
        if !self.cfg.loss_window {
            return false;
        }
        match self.cfg.retransmit {
            RetransmitMode::GoBackN => true,
            RetransmitMode::Selective => cause == CutCause::Trim && !self.cc_active(),
        }
    }

    /// Whether `peer`'s flow has a loss window now: its losses are judged
    /// (their bytes leave the flight) and its copies wait at the gate.
    pub(super) fn loss_windowed(&self, peer: NodeAddr) -> bool {
        self.flows
            .get(&peer)
            .is_some_and(|f| f.loss_window.is_some())
    }

    /// A packet toward `peer` that left at `sent_at` was lost for
    /// `cause`: the window is cut, unless the loss is not congestion's,
    /// or the window was cut after that packet left (the same
    /// congestion, seen again).
    pub(super) fn cut_window(
        &mut self,
        now: Instant,
        peer: NodeAddr,
        sent_at: Instant,
        cause: CutCause,
    ) {
        if !self.window_answers(cause) {
            return;
        }
        let mtu = u64::from(self.cfg.mtu_payload);
        let rto = self.rtt_to(peer).rto();
        // Packets handed out before now may leave later (a NIC works them
        // one at a time): they are of this cut's congestion too.
        let cut = self.tx_frontier.max(now);
        let f = self.flow(peer);
        if f.loss_window.is_some_and(|w| sent_at < w.cut) {
            return;
        }
        // A loss with no sign of congestion near it (no trim, no ECN echo
        // from one RTO before the packet left) is the path's own: random
        // loss, which a smaller window would only make slower (a 1 %
        // lossy pair took nine times as long).
        let congested = cause == CutCause::Trim || f.congested.is_some_and(|c| c + rto >= sent_at);
        if !congested {
            return;
        }
        let out = match f.loss_window {
            Some(w) => f.inflight.min(w.window),
            None => f.inflight,
        };
        let threshold = (out / 2).max(2 * mtu);
        let window = match cause {
            CutCause::Timeout => mtu,
            CutCause::SequenceError | CutCause::Trim => threshold,
        };
        if f.loss_window.is_none() {
            self.windowed_flows += 1;
        }
        self.flow(peer).loss_window = Some(LossWindow {
            window,
            threshold,
            cut,
        });
        self.stats.loss_window_cuts += 1;
    }

    /// `opn` was lost for `cause`: its peer's window is cut (see
    /// `cut_window`).
    pub(super) fn cut_window_from(&mut self, now: Instant, opn: OpNumber, cause: CutCause) {
        let Some(inf) = self.op_table.get(opn).copied() else {
            return;
        };
        if let Some(dst) = self.ops.get(&inf.msg_id).map(|op| op.dst) {
            self.cut_window(now, dst, inf.sent_at, cause);
        }
    }

    /// `bytes` toward `peer` were acknowledged: its loss window grows,
    /// and is dropped once it holds more than the OP table does.
    pub(super) fn grow_window(&mut self, peer: NodeAddr, bytes: u64) {
        let mtu = u64::from(self.cfg.mtu_payload);
        let full = mtu * u64::from(self.cfg.op_table_capacity);
        let Some(f) = self.flows.get_mut(&peer) else {
            return;
        };
        let Some(w) = f.loss_window.as_mut() else {
            return;
        };
        w.window += if w.window < w.threshold {
            bytes
        } else {
            (mtu * bytes / w.window).max(1)
        };
        if w.window > full {
            f.loss_window = None;
            self.windowed_flows -= 1;
        }
    }

    /// The bytes the loss window lets be out toward `f`'s peer
    /// (`u64::MAX` with none).
    pub(super) fn window_after_loss(f: &super::flow::Flow) -> u64 {
        f.loss_window.map_or(u64::MAX, |w| w.window)
    }
}

#[cfg(test)]
#[path = "loss_window_tests.rs"]
mod tests;
