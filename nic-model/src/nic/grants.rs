//! Receiver credit (`cc = "rccc"`): the grant scheduler a receiving NIC
//! runs for the senders that ask it for credit, and the sender's half of
//! the exchange (DEMAND out when a flow runs out of credit, GRANT in).
//!
//! The receiver shares its own line among the senders that want it: a
//! pacer hands out one packet's worth of credit at a time, to the senders
//! in turn (address order after the one served last), at 97 % of the line
//! rate (the rest is Ethernet, IP and UDP framing the datagram sizes do
//! not count). Bytes a sender says it sent unscheduled are charged to the
//! pacer too, so the first window of an incast drains before the grants
//! that follow it arrive. Counts are cumulative both ways; a DEMAND is
//! answered at once with the sender's current grant, so a lost GRANT costs
//! one repair interval, not the flow.

use super::*;

/// What a receiver knows of one sender's demand (all cumulative).
#[derive(Debug, Clone, Copy, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Grantee {
    wanted: u64,
    free: u64,
    granted: u64,
    /// Data bytes that arrived from the sender.
    arrived: u64,
}

impl Grantee {
    fn need(&self) -> u64 {
        self.wanted.saturating_sub(self.free + self.granted)
    }
}

/// The receiver's grant scheduler.
#[derive(Debug, Default)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct Grants {
    peers: BTreeMap<NodeAddr, Grantee>,
    /// The pacer's clock: the next grant goes no earlier.
    next: Instant,
    /// The pacer's wake-up, when armed.
    armed: Option<Instant>,
    /// The sender granted last (turns go in address order after it).
    last: Option<NodeAddr>,
}

impl Grants {
    /// Forgets `peer` (an evicted peer holding no work).
    pub(super) fn forget(&mut self, peer: NodeAddr) {
        self.peers.remove(&peer);
        if self.last == Some(peer) {
            self.last = None;
        }
    }
}

/// Grants go at this share of the line rate, in percent.
const GRANT_RATE_PCT: u64 = 97;

impl Nic {
    fn credit_reply(to: NodeAddr, body: ReplyBody) -> Reply {
        Reply {
            port: 0,
            to,
            src_ep: 0,
            dst_ep: 0,
            op_num: 0,
            msg_id: 0,
            seg_index: 0,
            seg_count: 1,
            body,
        }
    }

    /// The time `bytes` of granted data take on this host's line.
    fn grant_time(&self, bytes: u64) -> udrma_proto::time::Duration {
        let rate = self.cfg.cc.line_rate_bps / 100 * GRANT_RATE_PCT;
        crate::cc::serialization(bytes, rate)
    }

    /// A sender wants `wanted` bytes in all, `free` of them sent
    /// unscheduled.
    pub(super) fn on_demand(&mut self, now: Instant, from: NodeAddr, wanted: u64, free: u64) {
        self.stats.demands_received += 1;
        let g = self.grants.peers.entry(from).or_default();
        // Unscheduled bytes still on their way (the sender sent at most
        // its free and granted bytes; those not arrived yet are coming).
        let coming = (free + g.granted).saturating_sub(g.arrived);
        let fresh_free = free.saturating_sub(g.free).min(coming);
        g.wanted = g.wanted.max(wanted);
        g.free = g.free.max(free);
        let granted = g.granted;
        if granted > 0 {
            // It may have missed the last GRANT: say it again.
            self.send_grant(from, granted);
        }
        if fresh_free > 0 {
            // Those bytes are on the line now: later grants wait for them.
            let t = self.grant_time(fresh_free);
            self.grants.next = self.grants.next.max(now) + t;
        }
        self.arm_grants(now);
    }

    /// A data packet of `len` bytes arrived from `from` (counted for the
    /// grant scheduler when this NIC runs receiver credit, or already
    /// grants to that sender).
    pub(super) fn credit_arrived(&mut self, from: NodeAddr, len: usize) {
        let on = self.cfg.cc.algorithm == crate::cc::CcAlgorithm::Rccc;
        if let Some(g) = self.grants.peers.get_mut(&from) {
            g.arrived += len as u64;
        } else if on {
            self.grants.peers.insert(
                from,
                Grantee {
                    arrived: len as u64,
                    ..Grantee::default()
                },
            );
        }
    }

    fn send_grant(&mut self, to: NodeAddr, granted: u64) {
        if self.push_reply(Nic::credit_reply(to, ReplyBody::Grant { granted })) {
            self.stats.grants_sent += 1;
        }
    }

    fn arm_grants(&mut self, now: Instant) {
        if self.grants.armed.is_some() || self.grants.peers.values().all(|g| g.need() == 0) {
            return;
        }
        let t = self.grants.next.max(now);
        self.grants.armed = Some(t);
        self.timers.insert((t, Timer::Grant));
    }

    /// The pacer's turn: one packet's worth of credit to the next sender
    /// that wants some.
    pub(super) fn grant_tick(&mut self, now: Instant) {
        self.grants.armed = None;
        if now < self.grants.next {
            self.arm_grants(now);
            return;
        }
        let last = self.grants.last;
        let turn = |a: NodeAddr| (last.is_some_and(|l| a <= l), a);
        let pick = self
            .grants
            .peers
            .iter()
            .filter(|(_, g)| g.need() > 0)
            .map(|(a, _)| *a)
            .min_by_key(|a| turn(*a));
        let Some(peer) = pick else {
            return;
        };
        let quantum = self.cfg.cc.mtu_bytes.max(1);
        let g = self
            .grants
            .peers
            .get_mut(&peer)
            .expect("picked from the map");
        let step = g.need().min(quantum);
        g.granted += step;
        let granted = g.granted;
        self.grants.last = Some(peer);
        self.send_grant(peer, granted);
        let t = self.grant_time(step);
        let from = crate::cc::pace_from(Some(self.grants.next), now, self.cfg.cc.pace_slack);
        self.grants.next = from + t;
        self.arm_grants(now);
    }

    /// A receiver granted us `granted` bytes in all.
    pub(super) fn on_grant(&mut self, now: Instant, from: NodeAddr, granted: u64) {
        self.stats.grants_received += 1;
        self.flow(from).cc.on_grant(now, granted);
    }

    /// The flow to `peer` is out of credit with `backlog` new bytes
    /// waiting: sends a DEMAND if the receiver does not know yet (or has
    /// not answered for a while); returns when to ask again.
    pub(super) fn ask_credit(
        &mut self,
        now: Instant,
        peer: NodeAddr,
        backlog: u64,
    ) -> Option<Instant> {
        let f = self.flow(peer);
        let demand = f.cc.demand(now, backlog);
        let due = f.cc.demand_due();
        if let Some((wanted, free)) = demand {
            if self.push_reply(Nic::credit_reply(peer, ReplyBody::Demand { wanted, free })) {
                self.stats.demands_sent += 1;
            }
        }
        due
    }

    /// Bytes the senders asking this NIC for credit still want beyond what
    /// it has granted them, summed over the senders (for tests and
    /// reports).
    pub fn grant_backlog(&self) -> u64 {
        self.grants.peers.values().map(Grantee::need).sum()
    }
}
