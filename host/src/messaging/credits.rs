//! Credits: the peer's cumulative count, NOOPs when this side is silent,
//! re-posting vbufs, releasing what waited for credits, and the check of
//! invariant 5.

use super::*;

impl Messenger {
    pub(super) fn on_credits(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        from: NodeAddr,
        cumulative: u16,
    ) {
        let max = u32::from(self.cfg.vbufs_per_peer);
        let Some(p) = self.peers.get_mut(&from) else {
            self.stats.bad_messages += 1;
            return;
        };
        let delta = cumulative.wrapping_sub(p.credits_seen);
        if delta == 0 || delta >= 0x8000 {
            return;
        }
        p.credits_seen = cumulative;
        let new = p.remote_credit + u32::from(delta);
        if new > max {
            self.stats.credit_overflow += 1;
            p.remote_credit = max;
        } else {
            p.remote_credit = new;
        }
        self.drain(now, nic, from);
    }

    pub(super) fn unadvertised(&self, nic: &Nic, peer: NodeAddr) -> u16 {
        let Some(p) = self.peers.get(&peer) else {
            return 0;
        };
        p.reposted
            .wrapping_sub(nic.credits_carried(peer).unwrap_or(0))
    }

    pub(super) fn noop(&mut self, nic: &mut Nic, peer: NodeAddr) {
        let p = self.peers.get_mut(&peer).expect("connected");
        p.noop_streak += 1;
        let ep = p.ep;
        nic.send_noop(peer, ep, self.my_ep);
        self.stats.noops += 1;
    }

    /// The peer spoke: it has been hearing us.
    pub(super) fn heard_from(&mut self, peer: NodeAddr) {
        if let Some(p) = self.peers.get_mut(&peer) {
            p.noop_streak = 0;
        }
    }

    pub(super) fn repost(&mut self, now: Instant, nic: &mut Nic, peer: NodeAddr, slot: u32) {
        if self.unexpected_bytes > self.cfg.unexpected_bytes {
            // Hold the vbuf back: the peer runs out of credits and goes
            // rendezvous until the application catches up.
            if let Some(p) = self.peers.get_mut(&peer) {
                p.deferred += 1;
            }
            self.stats.reposts_deferred += 1;
            return;
        }
        if self.post_vbuf(now, nic, peer, slot).is_err() {
            return;
        }
        let threshold = self.cfg.credit_notify_threshold;
        let interval = self.cfg.noop_interval;
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        p.reposted = p.reposted.wrapping_add(1);
        nic.advertise_credits(peer, p.reposted);
        if self.unadvertised(nic, peer) >= threshold {
            self.noop(nic, peer);
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            if p.noop_at.is_none() {
                p.noop_at = Some(now + interval);
            }
        }
    }

    /// Re-posts held-back vbufs once the unexpected bytes fell below the
    /// limit again.
    pub(super) fn release_deferred(&mut self, now: Instant, nic: &mut Nic) {
        if self.unexpected_bytes > self.cfg.unexpected_bytes {
            return;
        }
        let peers: Vec<(NodeAddr, u32)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.deferred > 0)
            .map(|(a, p)| (*a, p.deferred))
            .collect();
        for (peer, n) in peers {
            // The slots are interchangeable: the region has vbufs_per_peer
            // of them and exactly `n` are not posted.
            let posted: Vec<u32> = self
                .purposes
                .values()
                .filter_map(|p| match p {
                    Purpose::Vbuf { peer: q, slot } if *q == peer => Some(*slot),
                    _ => None,
                })
                .collect();
            let free: Vec<u32> = (0..u32::from(self.cfg.vbufs_per_peer))
                .filter(|s| !posted.contains(s))
                .take(n as usize)
                .collect();
            if let Some(p) = self.peers.get_mut(&peer) {
                p.deferred = 0;
            }
            for slot in free {
                self.repost(now, nic, peer, slot);
            }
        }
    }

    /// Checks the invariants a property test wants after every step:
    /// credits within `0..=vbufs_per_peer` (they are unsigned, so "never
    /// negative" is "never decremented at zero", which `drain` guarantees),
    /// no peer ever advertised more vbufs than it has (the excess is
    /// clamped on arrival, so only `credit_overflow` remembers it), and
    /// every peer's posted vbufs accounted for.
    pub fn check(&self) -> Result<(), String> {
        if self.stats.credit_overflow > 0 {
            return Err(format!(
                "a peer advertised more credits than vbufs_per_peer {} ({} times)",
                self.cfg.vbufs_per_peer, self.stats.credit_overflow
            ));
        }
        for (addr, p) in &self.peers {
            if p.remote_credit > u32::from(self.cfg.vbufs_per_peer) {
                return Err(format!(
                    "credit toward {addr} is {} > vbufs_per_peer {}",
                    p.remote_credit, self.cfg.vbufs_per_peer
                ));
            }
            let posted = self.via.queue_depths(p.ep).map_or(0, |(_, r)| r);
            if posted > usize::from(self.cfg.vbufs_per_peer) {
                return Err(format!(
                    "{posted} vbufs posted for {addr}, more than vbufs_per_peer"
                ));
            }
        }
        Ok(())
    }
}
