//! Peers: credits carried on every packet, NOOPs, HELLO introductions,
//! control messages, and boot epochs that keep a restarted peer's lives
//! apart.

use super::*;

/// Most peers whose credit advertisements are tracked; beyond, new peers'
/// advertisements are ignored (and counted), so a flood of forged sources
/// cannot grow the table.
pub const MAX_CREDIT_PEERS: usize = 65_536;

/// NOOPs one doubted credit count draws at most while its peer stays
/// silent, each a doubled retransmit timeout after the last
/// ([`Nic`]'s credit echo, docs/wire-format.md "Credit echo").
pub const CREDIT_REPAIRS: u32 = 8;

/// Most peers whose boot epochs are tracked. Packets from further peers are
/// still served, but their restarts go unnoticed (counted in
/// `Stats::epoch_peers_overflow`).
pub const MAX_PEERS: usize = 65_536;

/// Whether epoch `a` is newer than `b`, in serial-number arithmetic
/// (RFC 1982): the difference, read as a signed 32-bit number, is positive.
/// A restarted peer's epoch is newer than its previous life's as long as the
/// two lives are less than 2^31 epoch ticks apart.
pub fn epoch_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// The first message id of the life that boots with `epoch`. Replies (ACK,
/// NACK, SACK, completion notices, READ responses) name the message they
/// answer, and some of a previous life's may still be on the wire when a
/// host restarts: if the new life numbered its messages from 1 again, a
/// late ACK for the old message 1 would complete the new message 1 (the
/// state machine test found a READ completed that way, its bytes never
/// read). So each life starts far from the others, as InfiniBand starts a
/// new queue pair at a fresh packet sequence number: lives whose epochs
/// differ by one start 0x9E37_79B9 ids apart (over 1.6 billion either way).
/// Epoch 1, the simulator's default, starts at 1.
pub fn first_msg_id(epoch: u32) -> u32 {
    epoch
        .wrapping_sub(1)
        .wrapping_mul(0x9E37_79B9)
        .wrapping_add(1)
        .max(1)
}

impl Nic {
    /// From now on every packet to `peer` carries `cumulative` (the count
    /// of receive buffers re-posted for it, modulo 2^16) with the CREDITS
    /// flag. A cumulative count survives loss, duplication and reordering:
    /// the peer keeps the newest it has seen.
    pub fn advertise_credits(&mut self, peer: NodeAddr, cumulative: u16) {
        self.advertised.insert(peer, cumulative);
    }

    /// The newest credit count that has really left toward `peer` on a
    /// packet (any packet: data, ACK or NOOP). The messaging layer compares
    /// it with what it re-posted to decide whether a NOOP is owed.
    pub fn credits_carried(&self, peer: NodeAddr) -> Option<u16> {
        self.credits_carried.get(&peer).copied()
    }

    /// Sends a CREDIT (NOOP) packet to `peer` now carrying the current
    /// advertisement: for when nothing else would carry it. Not
    /// acknowledged: the next advertisement repairs a lost one.
    pub fn send_noop(&mut self, peer: NodeAddr, src_ep: u16, dst_ep: u16) {
        self.push_noop(peer, src_ep, dst_ep, Noop::Advertise);
    }

    /// Queues a CREDIT (NOOP) packet of `kind` to `to` (it names no
    /// operation); whether it was queued.
    fn push_noop(&mut self, to: NodeAddr, src_ep: u16, dst_ep: u16, kind: Noop) -> bool {
        let queued = self.push_reply(Reply {
            port: 0,
            to,
            src_ep,
            dst_ep,
            op_num: 0,
            msg_id: 0,
            seg_index: 0,
            seg_count: 0,
            body: ReplyBody::Credit(kind),
        });
        if queued {
            self.stats.noops_sent += 1;
        }
        queued
    }

    /// Chooses the region this NIC's HELLOs (asks and replies) announce:
    /// its address, length and rkey travel in the packet, so a peer learns
    /// where to WRITE and READ without any side channel. `None` announces
    /// nothing (zeros).
    pub fn announce(&mut self, region: Option<MrKey>) {
        self.announced = region;
    }

    /// Sends a HELLO to `peer` now, announcing this NIC's region. The peer
    /// answers with a HELLO reply echoing `nonce`; both sides raise
    /// [`Event::Hello`]. HELLOs are not acknowledged or retransmitted: the
    /// asker repeats its HELLO until it hears the reply.
    pub fn hello(&mut self, peer: NodeAddr, nonce: u32) {
        self.hello_with_cookie(peer, nonce, [0; 16]);
    }

    /// [`Nic::hello`], echoing the admission `cookie` a peer's HELLO retry
    /// gave (see `udrma_proto::Hello::retry`).
    pub fn hello_with_cookie(&mut self, peer: NodeAddr, nonce: u32, cookie: [u8; 16]) {
        if self.push_reply(Reply {
            port: 0,
            to: peer,
            src_ep: 0,
            dst_ep: 0,
            op_num: 0,
            msg_id: 0,
            seg_index: 0,
            seg_count: 0,
            body: ReplyBody::Hello {
                reply: false,
                nonce,
                cookie,
            },
        }) {
            self.stats.hellos_sent += 1;
        }
    }

    pub(super) fn on_hello(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        hello: udrma_proto::Hello,
    ) {
        self.stats.hellos_received += 1;
        self.events.push_back(Event::Hello {
            from,
            hello,
            at: now,
        });
        if !hello.reply
            && self.push_reply(Nic::header_reply(
                from,
                r,
                ReplyBody::Hello {
                    reply: true,
                    nonce: hello.nonce,
                    cookie: [0; 16],
                },
            ))
        {
            self.stats.hellos_sent += 1;
        }
    }

    /// A repair NOOP from `from` asks for an echo of the count it carried
    /// (already noted): one NOOP answers it, and draws nothing itself.
    pub(super) fn answer_repair(&mut self, from: NodeAddr) {
        self.push_noop(from, 0, 0, Noop::Echo);
    }

    /// A packet from `from` arrived, echoing the newest count of ours it
    /// has seen (`Some`), or advertising its own instead (`None`: the two
    /// share the header field). If it does not show our newest carried
    /// count, that count may have crossed it on the wire, or the packet
    /// that carried it was lost (a count that rode on an ACK is not sent
    /// again with the ACK). A check one retransmit timeout later tells
    /// them apart: unless an echo has caught up by then, a NOOP carries
    /// the count again. A peer that never speaks again never draws one.
    pub(super) fn note_echo(&mut self, now: Instant, from: NodeAddr, echo: Option<u16>) {
        if let Some(echo) = echo {
            let newer = match self.credits_echoed.get(&from) {
                None => true,
                Some(old) => (1..0x8000).contains(&echo.wrapping_sub(*old)),
            };
            if newer {
                self.credits_echoed.insert(from, echo);
            }
        }
        self.doubt(now, from, 0);
    }

    /// Puts the count carried to `peer` in doubt unless an echo has shown
    /// it: a `CreditCheck` one retransmit timeout from now, which may draw
    /// up to `CREDIT_REPAIRS - tries` NOOPs. A count already in doubt keeps
    /// its check.
    pub(super) fn doubt(&mut self, now: Instant, peer: NodeAddr, tries: u32) {
        if !self.cfg.credit_repair {
            return;
        }
        let Some(carried) = self.credits_carried.get(&peer).copied() else {
            return;
        };
        let echoed = self.credits_echoed.get(&peer).copied().unwrap_or(0);
        let behind = |count: u16| (1..0x8000).contains(&count.wrapping_sub(echoed));
        if !behind(carried) {
            return;
        }
        if let Some((doubted, at, _)) = self.credits_doubted.get(&peer).copied() {
            if behind(doubted) {
                // Its check is armed: that count has had less than a
                // retransmit timeout to be echoed.
                return;
            }
            // Echoed since: doubt the newer count from now on.
            self.timers.remove(&(at, Timer::CreditCheck(peer)));
        }
        let at = now + self.rtt_to(peer).rto();
        self.credits_doubted.insert(peer, (carried, at, tries));
        self.timers.insert((at, Timer::CreditCheck(peer)));
    }

    /// The `CreditCheck` timer of [`Nic::note_echo`].
    pub(super) fn check_echo(&mut self, now: Instant, peer: NodeAddr) {
        let Some((doubted, _, tries)) = self.credits_doubted.remove(&peer) else {
            return;
        };
        let echoed = self.credits_echoed.get(&peer).copied().unwrap_or(0);
        if !(1..0x8000).contains(&doubted.wrapping_sub(echoed)) {
            return;
        }
        // Forget that it was carried: the NOOP carries it as news.
        self.credits_carried.insert(peer, echoed);
        if self.push_noop(peer, 0, 0, Noop::Repair) {
            self.stats.credit_repairs += 1;
        }
        // The NOOP asks for an echo; it or the echo may be lost too:
        // check again, later each time (up to `rto_max` apart), a bounded
        // number of times.
        if tries + 1 < CREDIT_REPAIRS {
            let count = self.advertised.get(&peer).copied().unwrap_or(doubted);
            let at = now + self.rtt_to(peer).backoff(tries + 1);
            self.credits_doubted.insert(peer, (count, at, tries + 1));
            self.timers.insert((at, Timer::CreditCheck(peer)));
        }
    }

    /// Raises `Event::Credits` when `from` advertises a newer count
    /// (modulo 2^16: newer means 1..32767 ahead).
    pub(super) fn note_credits(&mut self, now: Instant, from: NodeAddr, cumulative: u16) {
        let newer = match self.credits_seen.get(&from) {
            None => true,
            Some(old) => (1..0x8000).contains(&cumulative.wrapping_sub(*old)),
        };
        if !newer {
            return;
        }
        if !self.credits_seen.contains_key(&from) && self.credits_seen.len() >= MAX_CREDIT_PEERS {
            self.stats.credit_peers_overflow += 1;
            return;
        }
        self.credits_seen.insert(from, cumulative);
        self.stats.credit_updates += 1;
        self.events.push_back(Event::Credits {
            from,
            cumulative,
            at: now,
        });
    }

    /// Whether a single-packet message (control, data-arrived) is seen
    /// for the first time: remembers it with a tombstone, or counts a
    /// stale copy. With tombstones off every copy is new (the hazard).
    pub(super) fn first_sighting(&mut self, key: OpKey) -> bool {
        if self.tombstones.contains(&key) {
            self.stats.stale_dropped += 1;
            return false;
        }
        if self.tombstones.finished(&key) {
            self.stats.stale_finished += 1;
            return false;
        }
        self.remember(key);
        true
    }

    /// Remembers a completed operation (a tombstone), counting what the
    /// memory could not keep.
    pub(super) fn remember(&mut self, key: OpKey) {
        if self.tombstones.insert(key) {
            self.stats.tombstone_evictions += 1;
        }
        self.stats.tombstone_peers_overflow = self.tombstones.peers_overflow();
    }

    /// A control message: raised once (a tombstone drops later copies),
    /// acknowledged every time.
    pub(super) fn on_control(
        &mut self,
        now: Instant,
        from: NodeAddr,
        r: &Repr<'_>,
        control: Control,
    ) {
        let key = OpKey {
            from,
            src_ep: r.src_ep,
            msg_id: r.msg_id,
        };
        if self.first_sighting(key) {
            self.stats.controls_delivered += 1;
            self.events.push_back(Event::Control {
                from,
                src_ep: r.src_ep,
                dst_ep: r.dst_ep,
                control,
                at: now,
            });
        }
        let ece = self.rx_ce;
        self.push_reply(Nic::header_reply(
            from,
            r,
            ReplyBody::Ack { ece, dup: Dup::No },
        ));
    }

    /// Compares a packet's epoch with the newest `from` has shown. An older
    /// epoch is a packet of the peer's previous life: dropped (`false`). A
    /// newer one means the peer restarted: everything remembered about its
    /// previous life is forgotten before the packet is processed.
    pub(super) fn check_epoch(&mut self, now: Instant, from: NodeAddr, epoch: u32) -> bool {
        match self.peer_epochs.get(&from).copied() {
            Some(known) if known == epoch => true,
            Some(known) if epoch_newer(epoch, known) => {
                self.peer_epochs.insert(from, epoch);
                self.forget_peer(now, from, epoch);
                true
            }
            Some(_) => {
                self.stats.stale_epoch += 1;
                false
            }
            None => {
                if self.peer_epochs.len() >= MAX_PEERS {
                    self.stats.epoch_peers_overflow += 1;
                } else {
                    self.peer_epochs.insert(from, epoch);
                }
                true
            }
        }
    }

    /// The boot epoch `peer` last showed, once it has sent a valid packet.
    pub fn peer_epoch(&self, peer: NodeAddr) -> Option<u32> {
        self.peer_epochs.get(&peer).copied()
    }

    /// Whether this NIC holds any work with `peer`: a request toward it, an
    /// operation it is receiving from it, an escaped packet, a pending
    /// acknowledgement or a queued reply. A host that wants to forget an
    /// idle peer ([`Nic::release_peer`]) asks this first.
    pub fn busy_with(&self, peer: NodeAddr) -> bool {
        self.requests
            .values()
            .any(|r| r.req.dst == peer && r.req.kind != WrKind::Recv)
            || !self.registry.keys_from(peer).is_empty()
            || self.escape.holds_from(peer)
            || self.sacks.keys().any(|k| k.from == peer)
            || self.replies.iter().any(|r| r.to == peer)
    }

    /// Forgets everything kept about `peer` (its RTT, congestion state,
    /// credits, boot epoch, grants and tombstones), when it holds no work
    /// ([`Nic::busy_with`]); `false`, and nothing forgotten, otherwise. A
    /// host that evicts silent peers calls this so that a stream of
    /// short-lived peers cannot grow the engine's per-peer state.
    pub fn release_peer(&mut self, peer: NodeAddr) -> bool {
        if self.busy_with(peer) {
            return false;
        }
        self.rtt.remove(&peer);
        self.advertised.remove(&peer);
        self.credits_seen.remove(&peer);
        self.credits_carried.remove(&peer);
        self.echo_next.remove(&peer);
        self.credits_echoed.remove(&peer);
        self.credits_doubted.remove(&peer);
        self.peer_epochs.remove(&peer);
        if self
            .flows
            .remove(&peer)
            .is_some_and(|f| f.loss_window.is_some())
        {
            self.windowed_flows -= 1;
        }
        self.rnr_hold.remove(&peer);
        self.grants.forget(peer);
        self.tombstones.forget_peer(peer);
        // Its lost registrations stay (bounded by `registry_capacity`):
        // the sender still holds those operations and will send them
        // again, and only the refusal gets them restarted.
        true
    }

    /// `peer` restarted with `epoch`: its half-received operations, escaped
    /// packets and tombstones belong to a life that is over (an old
    /// tombstone could swallow a message of the new life), and the requests still running toward it name memory that
    /// no longer exists: they fail with [`WcError::PeerRestarted`].
    pub(super) fn forget_peer(&mut self, now: Instant, peer: NodeAddr, epoch: u32) {
        self.stats.peer_restarts += 1;
        for key in self.registry.keys_from(peer) {
            self.drop_entry(key);
        }
        for (id, e) in self.escape.take_from(peer) {
            self.timers.remove(&(e.deadline, Timer::Escape(id)));
        }
        self.lost_registrations.retain(|(k, _)| k.from != peer);
        let sacks: Vec<OpKey> = self
            .sacks
            .keys()
            .filter(|k| k.from == peer)
            .copied()
            .collect();
        for key in sacks {
            if let Some(p) = self.sacks.remove(&key) {
                self.timers.remove(&(p.deadline, Timer::Sack(key)));
            }
        }
        self.tombstones.forget_peer(peer);
        self.credits_seen.remove(&peer);
        self.replies.retain(|r| r.to != peer);
        let doomed: Vec<WrId> = self
            .requests
            .iter()
            .filter(|(_, r)| r.req.dst == peer && r.req.kind != WrKind::Recv)
            .map(|(w, _)| *w)
            .collect();
        for wr in doomed {
            self.fail_request(now, wr, WcError::PeerRestarted);
        }
        self.events.push_back(Event::PeerRestarted {
            peer,
            epoch,
            at: now,
        });
    }
}

/// What a packet's `credits` field may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) enum Carry {
    /// A data packet or an answer: news first, echoes in turn.
    Any,
    /// A NOOP that advertises (a credit return or a repair).
    Advertise,
    /// A NOOP answering a repair: the echo.
    Echo,
}

/// The per-peer credit maps [`credit_field`] reads and updates, borrowed
/// apart from the rest of the NIC (a packet's payload may borrow it).
#[cfg_attr(feature = "fingerprint", derive(serde::Serialize))]
pub(super) struct CreditBook<'a> {
    pub(super) advertised: &'a PeerMap<u16, 2>,
    pub(super) seen: &'a PeerMap<u16, 2>,
    pub(super) carried: &'a mut PeerMap<u16, 2>,
    pub(super) echo_next: &'a mut PeerMap<bool, 2>,
}

/// What the `credits` field of the next packet to `to` carries: our
/// advertisement (`CREDITS`), or an echo of the newest count `to`
/// advertised to us (`CREDITS_ECHO`). News (a count no packet has
/// carried yet) goes out at once unless the last packet carried news
/// too and an echo is owed: while our count keeps changing the two take
/// turns. An advertising NOOP always advertises; an echo NOOP always
/// echoes.
pub(super) fn credit_field(b: CreditBook<'_>, to: NodeAddr, carry: Carry) -> (Flags, u16, bool) {
    let adv = b.advertised.get(&to).copied();
    // Counts start at zero: a peer that advertises to us and has not
    // reached us yet is echoed as 0.
    let seen = b.seen.get(&to).copied().or(adv.map(|_| 0));
    if adv.is_none() && seen.is_none() {
        // No credits between us (RDMA only): the echo's state stays cold.
        return (Flags::empty(), 0, false);
    }
    let news = adv.is_some() && adv != b.carried.get(&to).copied();
    let echo_next = b.echo_next.get(&to).copied().unwrap_or(false);
    let echo = match carry {
        Carry::Echo => true,
        Carry::Advertise => adv.is_none(),
        Carry::Any => adv.is_none() || !news || echo_next,
    };
    if let Some(s) = seen.filter(|_| echo) {
        b.echo_next.insert(to, false);
        return (Flags::CREDITS_ECHO, s, false);
    }
    let Some(a) = adv else {
        return (Flags::empty(), 0, false);
    };
    if news {
        b.carried.insert(to, a);
    }
    if seen.is_some() {
        b.echo_next.insert(to, true);
    }
    (Flags::CREDITS_VALID, a, news)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PEER: NodeAddr = NodeAddr(1);

    /// The four maps of one NIC toward `PEER`: what it advertises, the
    /// newest count it saw, what a packet last carried, whether an echo
    /// is owed next.
    #[derive(Default)]
    struct Book {
        advertised: PeerMap<u16, 2>,
        seen: PeerMap<u16, 2>,
        carried: PeerMap<u16, 2>,
        echo_next: PeerMap<bool, 2>,
    }

    impl Book {
        fn new(adv: Option<u16>, seen: Option<u16>, carried: Option<u16>) -> Book {
            let mut b = Book::default();
            for (map, v) in [
                (&mut b.advertised, adv),
                (&mut b.seen, seen),
                (&mut b.carried, carried),
            ] {
                if let Some(v) = v {
                    map.insert(PEER, v);
                }
            }
            b
        }

        fn field(&mut self, carry: Carry) -> (Flags, u16, bool) {
            credit_field(
                CreditBook {
                    advertised: &self.advertised,
                    seen: &self.seen,
                    carried: &mut self.carried,
                    echo_next: &mut self.echo_next,
                },
                PEER,
                carry,
            )
        }
    }

    #[test]
    fn no_credits_either_way_carry_nothing() {
        let mut b = Book::new(None, None, None);
        assert_eq!(b.field(Carry::Any), (Flags::empty(), 0, false));
        assert_eq!(b.field(Carry::Echo), (Flags::empty(), 0, false));
    }

    #[test]
    fn a_host_that_advertises_nothing_echoes_the_peers_count() {
        let mut b = Book::new(None, Some(5), None);
        assert_eq!(b.field(Carry::Any), (Flags::CREDITS_ECHO, 5, false));
        assert_eq!(b.field(Carry::Advertise), (Flags::CREDITS_ECHO, 5, false));
    }

    #[test]
    fn news_and_echo_take_turns_and_old_news_is_echoed() {
        // A count no packet carried yet goes out as news...
        let mut b = Book::new(Some(4), Some(9), Some(3));
        assert_eq!(b.field(Carry::Any), (Flags::CREDITS_VALID, 4, true));
        assert_eq!(b.carried.get(&PEER), Some(&4));
        // ... the next packet owes the peer an echo ...
        assert_eq!(b.field(Carry::Any), (Flags::CREDITS_ECHO, 9, false));
        // ... and with nothing new, every packet echoes.
        assert_eq!(b.field(Carry::Any), (Flags::CREDITS_ECHO, 9, false));
        b.advertised.insert(PEER, 5);
        b.advertised.insert(PEER, 6);
        assert_eq!(b.field(Carry::Any), (Flags::CREDITS_VALID, 6, true));
        assert_eq!(b.field(Carry::Any), (Flags::CREDITS_ECHO, 9, false));
    }

    #[test]
    fn a_noop_advertises_and_an_echo_noop_echoes() {
        // A NOOP carries the count even when it is not news.
        let mut b = Book::new(Some(4), Some(9), Some(4));
        assert_eq!(b.field(Carry::Advertise), (Flags::CREDITS_VALID, 4, false));
        assert_eq!(b.field(Carry::Echo), (Flags::CREDITS_ECHO, 9, false));
        // A peer that advertised to us and has not reached us yet is
        // echoed as 0.
        let mut b = Book::new(Some(4), None, Some(4));
        assert_eq!(b.field(Carry::Echo), (Flags::CREDITS_ECHO, 0, false));
    }
}
