//! Strangers at the door: an endpoint's side of admission (the cookie
//! round trip, "full", eviction of silent peers). The cookies and rate
//! limits themselves are `crate::admission`.

use std::net::SocketAddr;

use udrma_proto::{NodeAddr, Repr};

use super::Endpoint;

impl Endpoint {
    /// A datagram from an address not in the peer table: only a HELLO ask
    /// echoing a valid cookie for that address may create a peer. Any
    /// other ask is answered with a retry carrying a fresh cookie (nothing
    /// stored), or with "full" when the cookie checks out but the table has
    /// no room even after evicting idle peers. Rate-limited per source.
    pub(super) fn admit_stranger(
        &mut self,
        now: udrma_nic::Instant,
        from: SocketAddr,
        hello: Option<udrma_proto::Hello>,
    ) -> Option<NodeAddr> {
        let Some(h) = hello.filter(|h| !h.reply) else {
            self.stats.unknown_peer += 1;
            return None;
        };
        if !self.admission.allow(from, self.clock.to_os(now)) {
            self.stats.hello_rate_limited += 1;
            return None;
        }
        let now_s = (now.as_ps() / 1_000_000_000_000).min(u64::from(u32::MAX)) as u32;
        let valid = h.cookie != [0; 16] && self.admission.check(from, &h.cookie, now_s);
        if !valid {
            if h.cookie != [0; 16] {
                self.stats.bad_cookies += 1;
            }
            let cookie = self.admission.cookie(from, now_s);
            self.stateless_hello(from, h.nonce, true, cookie);
            self.stats.hello_retries_sent += 1;
            return None;
        }
        if self.peers.is_full() {
            self.evict_idle(now, true);
        }
        match self.peers.admit(from) {
            Some(n) => Some(n),
            None => {
                self.stats.peers_full += 1;
                self.stats.refused_full += 1;
                self.stateless_hello(from, h.nonce, false, [0; 16]);
                None
            }
        }
    }

    /// Sends a HELLO reply built here, not by the engine, so that no
    /// state is kept: a retry carrying `cookie`, or (`retry` false) "full".
    fn stateless_hello(&mut self, to: SocketAddr, nonce: u32, retry: bool, cookie: [u8; 16]) {
        let max_payload = self.nic.config().mtu_payload.min(u32::from(u16::MAX)) as u16;
        let repr = Repr::hello(
            self.nic.config().epoch,
            udrma_proto::Hello {
                retry,
                full: !retry,
                cookie,
                ..udrma_proto::Hello::new(true, max_payload, nonce)
            },
        );
        let mut buf = self.pool.pop().unwrap_or_default();
        if repr.emit_vec(&mut buf).is_ok() {
            if let Some(sec) = self.secure.as_mut() {
                let mut sealed = self.pool.pop().unwrap_or_default();
                sec.seal(&buf, &mut sealed);
                self.pool.push(std::mem::replace(&mut buf, sealed));
            }
            self.pending.push_back((to, 0, buf));
        }
    }

    /// Evicts peers admitted by HELLO that have been silent for
    /// `peer_idle` and hold no work in the engine (all such when `all`,
    /// else the oldest one), and has the engine forget them.
    pub(super) fn evict_idle(&mut self, now: udrma_nic::Instant, all: bool) {
        let Some(before) = self.clock.to_os(now).checked_sub(self.cfg.peer_idle) else {
            return;
        };
        for node in self.peers.silent_since(before) {
            if !self.nic.release_peer(node) {
                continue;
            }
            self.peers.remove(node);
            self.last_reply.remove(&node);
            self.stats.peers_evicted += 1;
            if !all {
                break;
            }
        }
    }
}
