//! Go-back-N's rewind window: after a rewind, a go-back-N sender keeps
//! fewer bytes out toward that peer, and opens up again as
//! acknowledgements come back.
//!
//! A go-back-N receiver discards every packet after a gap, so one loss
//! costs the sender the rest of its window, sent again. With no
//! controller to slow it, a sender rewound a whole window into the queue
//! that had just dropped or trimmed it, and so did every other sender of
//! an incast: into a slow NIC, nearly every packet it worked was one it
//! then discarded, and operations ran out of retries with nothing but
//! congestion in the way (docs/testing.md, finding 40). TCP, a
//! go-back-N sender too, answers a loss this way (RFC 5681): a timeout
//! starts again from one packet, a NACK halves what may be out, and the
//! window grows by a packet per acknowledged packet up to half of where
//! it was cut, then by a packet per window. Nothing changes until the
//! first rewind toward a peer, and the window is dropped once it has
//! grown past what the OP table holds: a run that loses nothing sends as
//! before, packet for packet. The receiver is RoCE's, unchanged.

use super::*;

/// The rewind window toward one peer (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Rewind {
    /// Bytes that may be out toward the peer.
    pub window: u64,
    /// Below this the window grows by what is acknowledged (slow start),
    /// above it by a packet per window.
    pub threshold: u64,
    /// When the window was last cut: a rewind from a packet that left
    /// before then is the same loss, already answered.
    pub cut: Instant,
}

/// Why a go-back-N sender rewound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RewindCause {
    /// A retransmit timeout: nothing came back.
    Timeout,
    /// The receiver discarded packets after a gap (`SEQUENCE_ERROR`).
    SequenceError,
    /// The packet the receiver expects was trimmed: a full queue.
    Trim,
}

impl Nic {
    /// Whether go-back-N's rewind window is on (go-back-N and
    /// `rewind_window`).
    fn rewind_on(&self) -> bool {
        self.cfg.retransmit == RetransmitMode::GoBackN && self.cfg.rewind_window
    }

    /// Whether `peer`'s flow has a rewind window now: its losses are
    /// judged (their bytes leave the flight) and its copies wait at the
    /// gate.
    pub(super) fn rewinding(&self, peer: NodeAddr) -> bool {
        self.flows.get(&peer).is_some_and(|f| f.rewind.is_some())
    }

    /// Go-back-N rewinds toward `peer` from a packet that left at
    /// `sent_at`: the window is cut, unless it was cut after that packet
    /// left (the same loss, seen again).
    pub(super) fn rewind_cut(
        &mut self,
        now: Instant,
        peer: NodeAddr,
        sent_at: Instant,
        cause: RewindCause,
    ) {
        if !self.rewind_on() {
            return;
        }
        let mtu = u64::from(self.cfg.mtu_payload);
        let rto = self.rtt_to(peer).rto();
        let f = self.flow(peer);
        if f.rewind.is_some_and(|r| sent_at < r.cut) {
            return;
        }
        // A loss with no sign of congestion near it (no trim, no ECN echo
        // from one RTO before the packet left) is the path's own: random
        // loss, which a smaller window would only make slower (a 1 %
        // lossy pair took nine times as long).
        let congested =
            cause == RewindCause::Trim || f.congested.is_some_and(|c| c + rto >= sent_at);
        if !congested {
            return;
        }
        let out = match f.rewind {
            Some(r) => f.inflight.min(r.window),
            None => f.inflight,
        };
        let threshold = (out / 2).max(2 * mtu);
        let window = match cause {
            RewindCause::Timeout => mtu,
            RewindCause::SequenceError | RewindCause::Trim => threshold,
        };
        if f.rewind.is_none() {
            self.rewinding += 1;
        }
        self.flow(peer).rewind = Some(Rewind {
            window,
            threshold,
            cut: now,
        });
        self.stats.rewind_cuts += 1;
    }

    /// Go-back-N rewinds from `opn` for `cause`: its peer's window is cut
    /// (see `rewind_cut`).
    pub(super) fn rewind_from(&mut self, now: Instant, opn: OpNumber, cause: RewindCause) {
        let Some(inf) = self.op_table.get(opn).copied() else {
            return;
        };
        if let Some(dst) = self.ops.get(&inf.msg_id).map(|op| op.dst) {
            self.rewind_cut(now, dst, inf.sent_at, cause);
        }
    }

    /// `bytes` toward `peer` were acknowledged: its rewind window grows,
    /// and is dropped once it holds more than the OP table does.
    pub(super) fn rewind_grow(&mut self, peer: NodeAddr, bytes: u64) {
        let mtu = u64::from(self.cfg.mtu_payload);
        let full = mtu * u64::from(self.cfg.op_table_capacity);
        let Some(f) = self.flows.get_mut(&peer) else {
            return;
        };
        let Some(r) = f.rewind.as_mut() else {
            return;
        };
        r.window += if r.window < r.threshold {
            bytes
        } else {
            (mtu * bytes / r.window).max(1)
        };
        if r.window > full {
            f.rewind = None;
            self.rewinding -= 1;
        }
    }

    /// The bytes the rewind window lets be out toward `peer` (`u64::MAX`
    /// with none).
    pub(super) fn rewind_window(f: &super::flow::Flow) -> u64 {
        f.rewind.map_or(u64::MAX, |r| r.window)
    }
}
