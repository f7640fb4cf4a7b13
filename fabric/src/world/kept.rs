//! Packets kept by their sender until the window before they arrive: on
//! ranks, a packet given to a line whose far end another rank runs stays
//! in the sender's line, whole, and goes to that rank only at the end of
//! the window before the one it arrives in (threads hand every packet on
//! at the end of its own window).
//!
//! A packet queued behind a deep queue can wait many windows before it
//! arrives. Handed on at once, it would sit twice in memory until then:
//! in the sender's line as a stand-in (for its queue's count) and whole
//! in the receiver's. Kept, it sits once, and becomes a stand-in only as
//! it leaves. Nothing else changes: a line's packets arrive in the order
//! they were given, so they go in that order, each before the window that
//! needs it; the event counts the run reports count a line the far end
//! has not heard of yet as one process would (`World::kept_heads`).

use super::*;
use port_state::PortState;

/// How many lines ahead [`World::hand_on`] asks for a line's first kept
/// packet (and twice as far ahead, for its state).
const HAND_ON_AHEAD: usize = 8;
/// How many of a line's kept packets it asks for: about what a line hands
/// on in a window at k=32 (16,000 packets on about 3,000 lines).
const HAND_ON_EACH: usize = 6;

impl World {
    /// From now on this shard keeps the packets on its lines to other
    /// shards until they are due ([`World::hand_on`]).
    pub(super) fn keep_on_lines(&mut self) {
        if let Some(shard) = self.shard.as_mut() {
            shard.keep = true;
        }
    }

    /// Hands on every kept packet that arrives before `bound` (ps): it
    /// goes into the outbox of the shard that runs its line's far end,
    /// line by line in the order given, and a stand-in stays. Returns
    /// when the earliest packet still kept arrives.
    pub(super) fn hand_on(&mut self, bound: u64) -> Option<Instant> {
        let shard = self.shard.as_mut()?;
        let mut first: Option<Instant> = None;
        let ports = &mut self.ports;
        let keeping = &mut shard.keeping;
        let mut still = 0;
        for i in 0..keeping.len() {
            // The lines a few ahead are cold: their states first (both
            // lines: the ring is in the first, its count kept in the
            // second), then (their states come by then) their first kept
            // packets.
            if let Some(&p) = keeping.get(i + 2 * HAND_ON_AHEAD) {
                let st: *const PortState = &ports[p as usize];
                crate::prefetch::prefetch(st);
                crate::prefetch::prefetch(st.cast::<u8>().wrapping_add(64));
            }
            if let Some(&p) = keeping.get(i + HAND_ON_AHEAD) {
                let st = &ports[p as usize];
                let oldest_kept = st.flight.len() - st.kept as usize;
                for f in st.flight.range(oldest_kept..).take(HAND_ON_EACH) {
                    events::prefetch_entry(f);
                }
            }
            let port = keeping[i];
            let st = &mut ports[port as usize];
            while st.kept > 0 {
                let at = st.flight.len() - st.kept as usize;
                let f = &mut st.flight[at];
                if f.arrive.as_ps() >= bound {
                    first = first.into_iter().chain([f.arrive]).min();
                    break;
                }
                let stand_in = f.stand_in();
                let entry = std::mem::replace(f, stand_in);
                shard.outbox[usize::from(st.hot.to_shard)]
                    .line
                    .push((port, entry));
                st.kept -= 1;
            }
            if st.kept > 0 {
                keeping[still] = port;
                still += 1;
            }
        }
        keeping.truncate(still);
        first
    }

    /// When the earliest packet this shard keeps arrives.
    pub(super) fn first_kept(&self) -> Option<Instant> {
        let shard = self.shard.as_ref()?;
        shard
            .keeping
            .iter()
            .filter_map(|&p| {
                let st = &self.ports[p as usize];
                st.flight.get(st.flight.len() - st.kept as usize)
            })
            .map(|f| f.arrive)
            .min()
    }

    /// The lines on which, at the start `start` (ps) of a window, one
    /// process would have its head's arrival pending but the far end has
    /// nothing yet: every packet handed on has arrived before `start`,
    /// and some are still kept here.
    pub(super) fn kept_heads(&self, start: u64) -> u64 {
        let Some(shard) = self.shard.as_ref() else {
            return 0;
        };
        shard
            .keeping
            .iter()
            .filter(|&&p| {
                let st = &self.ports[p as usize];
                let i = st.flight.len() - st.kept as usize;
                i == 0 || st.flight[i - 1].arrive.as_ps() < start
            })
            .count() as u64
    }

    /// Takes the outbox (one list per shard, `shards` of them) to send
    /// what [`World::hand_on`] put in it between windows.
    pub(super) fn take_outbox(&mut self, shards: usize) -> Vec<mail::Mail> {
        let mut out = self
            .shard
            .as_mut()
            .map(|s| std::mem::take(&mut s.outbox))
            .unwrap_or_default();
        out.resize_with(shards, mail::Mail::default);
        out
    }

    /// Gives the outbox's emptied lists back, for their room.
    pub(super) fn give_back_outbox(&mut self, outbox: Vec<mail::Mail>) {
        if let Some(s) = self.shard.as_mut() {
            s.outbox = outbox;
        }
    }
}
