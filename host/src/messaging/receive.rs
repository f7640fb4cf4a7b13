//! Receiving: chunks landing in vbufs, tag matching in MPI order against
//! posted receives and the unexpected queue, rendezvous control messages
//! (RTS, CTS, FIN), and the end of a receive.

use super::*;

impl Messenger {
    pub(super) fn on_vbuf(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        peer: NodeAddr,
        slot: u32,
        len: u64,
    ) {
        self.heard_from(peer);
        let (key, base) = self.vbuf_regions[&peer];
        let addr = base + u64::from(slot) * u64::from(self.cfg.vbuf_size);
        let bytes = match nic.memory().region(key) {
            Some(r) => {
                let at = (addr - r.base) as usize;
                r.bytes[at..at + len as usize].to_vec()
            }
            None => Vec::new(),
        };
        // The host copies the payload out, then re-posts the vbuf.
        let done = self.cpu.take(now, nic.config().cost.copy(len));
        self.defer(now, nic, done, Deferred::Repost(peer, slot));
        if bytes.len() < CHUNK_HEADER {
            self.stats.bad_messages += 1;
            return;
        }
        let kind = bytes[0];
        let index = u16::from_be_bytes([bytes[2], bytes[3]]);
        let seq = u32::from_be_bytes(bytes[4..8].try_into().expect("4"));
        let tag = u32::from_be_bytes(bytes[8..12].try_into().expect("4"));
        let total = u64::from(u32::from_be_bytes(bytes[12..16].try_into().expect("4")));
        let data = &bytes[CHUNK_HEADER..];
        let cap = self.cfg.chunk_payload();
        let n = self.cfg.chunks(total);
        let off = u64::from(index) * cap;
        let expect_len = if u64::from(index) < n {
            cap.min(total - off)
        } else {
            u64::MAX
        };
        if data.len() as u64 != expect_len {
            self.stats.bad_messages += 1;
            return;
        }
        match kind {
            CHUNK_EAGER => {
                let behind = seq.wrapping_sub(self.peers[&peer].expect_seq);
                let max_eager = self.cfg.rendezvous_threshold.max(cap);
                // A message being assembled has a chunk in flight, which
                // holds a credit: a peer has at most vbufs_per_peer of them.
                let partial = self.assembling.range((peer, 0)..=(peer, u32::MAX)).count();
                let known = self.assembling.contains_key(&(peer, seq));
                if total > max_eager || (!known && partial >= usize::from(self.cfg.vbufs_per_peer))
                {
                    self.stats.bad_messages += 1;
                    return;
                }
                if behind >= REORDER_WINDOW {
                    // Already delivered (a duplicate) or absurdly far ahead.
                    self.stats.bad_messages += 1;
                    return;
                }
                let entry = self.assembling.entry((peer, seq)).or_insert_with(|| {
                    (vec![0; total as usize], vec![false; n as usize], tag, total)
                });
                if entry.3 != total || entry.2 != tag || entry.1[index as usize] {
                    self.stats.bad_messages += 1;
                    return;
                }
                entry.0[off as usize..(off + data.len() as u64) as usize].copy_from_slice(data);
                entry.1[index as usize] = true;
                if entry.1.iter().all(|g| *g) {
                    let (d, _, _, _) = self.assembling.remove(&(peer, seq)).expect("present");
                    let a = Arrival {
                        from: peer,
                        seq,
                        tag,
                        len: total,
                        kind: ArrivalKind::Eager(d),
                    };
                    self.defer(now, nic, done, Deferred::Arrived(a));
                }
            }
            CHUNK_R3 => {
                let Some(r) = self.recvs.get_mut(&(peer, seq)) else {
                    self.stats.bad_messages += 1;
                    return;
                };
                if r.protocol != MsgProtocol::R3
                    || r.len != total
                    || r.got.get(index as usize) != Some(&false)
                {
                    self.stats.bad_messages += 1;
                    return;
                }
                r.got[index as usize] = true;
                // A truncated receive keeps only what fits.
                let keep = (r.data.len() as u64)
                    .saturating_sub(off)
                    .min(data.len() as u64);
                if keep > 0 {
                    r.data[off as usize..(off + keep) as usize]
                        .copy_from_slice(&data[..keep as usize]);
                }
                r.chunks_left -= 1;
                if r.chunks_left == 0 {
                    self.defer(now, nic, done, Deferred::R3Done(peer, seq));
                }
            }
            _ => self.stats.bad_messages += 1,
        }
    }

    /// A whole message (eager) or an envelope (RTS) from `a.from`: it
    /// enters matching once every earlier message from that peer has.
    pub(super) fn arrived(&mut self, now: Instant, nic: &mut Nic, a: Arrival) {
        let Some(p) = self.peers.get_mut(&a.from) else {
            self.stats.bad_messages += 1;
            return;
        };
        let ahead = a.seq.wrapping_sub(p.expect_seq);
        if ahead >= REORDER_WINDOW {
            self.stats.out_of_window += 1;
            return;
        }
        if p.reorder.contains_key(&a.seq) {
            self.stats.bad_messages += 1;
            return;
        }
        let from = a.from;
        p.reorder.insert(a.seq, a);
        loop {
            let p = self.peers.get_mut(&from).expect("checked");
            let Some(a) = p.reorder.remove(&p.expect_seq) else {
                break;
            };
            p.expect_seq = p.expect_seq.wrapping_add(1);
            self.enter_matching(now, nic, a);
        }
    }

    pub(super) fn enter_matching(&mut self, now: Instant, nic: &mut Nic, a: Arrival) {
        if let Some(i) = self
            .posted
            .iter()
            .position(|p| p.src.is_none_or(|s| s == a.from) && p.tag.is_none_or(|t| t == a.tag))
        {
            let p = self.posted.remove(i).expect("found");
            self.matched(now, nic, p, a);
        } else {
            self.stats.unexpected += 1;
            if let ArrivalKind::Eager(d) = &a.kind {
                self.unexpected_bytes += d.len() as u64;
                self.stats.unexpected_bytes_peak =
                    self.stats.unexpected_bytes_peak.max(self.unexpected_bytes);
            }
            self.unexpected.push_back(a);
        }
    }

    pub(super) fn matched(&mut self, now: Instant, nic: &mut Nic, p: Posted, a: Arrival) {
        match a.kind {
            ArrivalKind::Eager(mut data) => {
                let result = truncate(&mut data, p.max_len);
                self.deliver(MsgEvent::RecvDone {
                    id: p.id,
                    src: a.from,
                    tag: a.tag,
                    seq: a.seq,
                    data,
                    result,
                    at: now,
                });
            }
            ArrivalKind::Rts(rts) => {
                let mut wanted = MsgProtocol::from_wire(rts.protocol).unwrap_or(MsgProtocol::R3);
                // A message that will not fit: RGET reads what fits; RPUT
                // cannot offer a short buffer, so it goes R3 (truncated).
                if a.len > p.max_len && wanted == MsgProtocol::Rput {
                    wanted = MsgProtocol::R3;
                }
                let reg_len = a.len.min(p.max_len);
                let mut r = RecvMsg {
                    id: p.id,
                    tag: a.tag,
                    len: a.len,
                    max_len: p.max_len,
                    protocol: wanted,
                    data: Vec::new(),
                    chunks_left: 0,
                    got: Vec::new(),
                    region: None,
                };
                if matches!(wanted, MsgProtocol::Rget | MsgProtocol::Rput) {
                    match self.register(now, nic, reg_len, Access::ALL) {
                        Some((key, addr)) => {
                            r.region = Some(key);
                            if wanted == MsgProtocol::Rget {
                                self.recvs.insert((a.from, a.seq), r);
                                let wr = WorkRequest::read(
                                    a.from, key, addr, reg_len, rts.rkey, rts.addr,
                                );
                                let ep = self.peers[&a.from].ep;
                                match self
                                    .via
                                    .post_send(now, nic, ep, wr.endpoints(ep, self.my_ep))
                                {
                                    Ok(id) => {
                                        self.purposes.insert(id, Purpose::Read(a.from, a.seq));
                                    }
                                    Err(e) => self.fail_recv(
                                        now,
                                        nic,
                                        a.from,
                                        a.seq,
                                        MsgError::Refused(e.to_string()),
                                    ),
                                }
                                return;
                            }
                            self.recvs.insert((a.from, a.seq), r);
                            self.cts(now, nic, &a, Protocol::Rput, addr, key.0);
                            return;
                        }
                        None => {
                            // Fall back to R3: the CTS says so.
                            self.stats.fallbacks += 1;
                            self.stats.fallback_registration += 1;
                            r.protocol = MsgProtocol::R3;
                        }
                    }
                }
                // R3: the data comes through vbufs after our CTS.
                let n = self.cfg.chunks(a.len);
                r.protocol = MsgProtocol::R3;
                r.data = vec![0; a.len.min(p.max_len) as usize];
                r.chunks_left = n;
                r.got = vec![false; n as usize];
                self.recvs.insert((a.from, a.seq), r);
                self.cts(now, nic, &a, Protocol::R3, 0, 0);
            }
        }
    }

    /// Answers the RTS of `a` with a CTS for `protocol` (RPUT: with our
    /// buffer's address and rkey).
    pub(super) fn cts(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        a: &Arrival,
        protocol: Protocol,
        addr: u64,
        rkey: u32,
    ) {
        let cts = Rendezvous {
            protocol,
            tag: a.tag,
            length: a.len,
            addr,
            rkey,
            seq: a.seq,
        };
        let recv = Some((a.from, a.seq));
        self.control(now, nic, a.from, Control::Cts(cts), None, recv);
    }

    pub(super) fn deliver(&mut self, e: MsgEvent) {
        self.stats.recvs_done += 1;
        self.events.push_back(e);
    }

    pub(super) fn finish_r3_recv(&mut self, now: Instant, peer: NodeAddr, seq: u32) {
        let Some(r) = self.recvs.remove(&(peer, seq)) else {
            return;
        };
        let result = fits(r.len, r.max_len);
        self.deliver(MsgEvent::RecvDone {
            id: r.id,
            src: peer,
            tag: r.tag,
            seq,
            data: r.data,
            result,
            at: now,
        });
    }

    /// RGET (READ done) or RPUT (FIN received): the bytes are in the
    /// registered region.
    pub(super) fn finish_region_recv(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        peer: NodeAddr,
        seq: u32,
    ) {
        let Some(r) = self.recvs.remove(&(peer, seq)) else {
            return;
        };
        let mut data = r
            .region
            .and_then(|k| nic.memory_mut().deregister(k))
            .map(|reg| reg.bytes.into_vec())
            .unwrap_or_default();
        data.truncate(r.len as usize);
        let result = fits(r.len, r.max_len);
        self.deliver(MsgEvent::RecvDone {
            id: r.id,
            src: peer,
            tag: r.tag,
            seq,
            data,
            result,
            at: now,
        });
    }

    pub(super) fn fail_recv(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        peer: NodeAddr,
        seq: u32,
        err: MsgError,
    ) {
        let Some(r) = self.recvs.remove(&(peer, seq)) else {
            return;
        };
        if let Some(k) = r.region {
            nic.memory_mut().deregister(k);
        }
        self.stats.failed += 1;
        self.events.push_back(MsgEvent::RecvDone {
            id: r.id,
            src: peer,
            tag: r.tag,
            data: Vec::new(),
            seq,
            result: Err(err),
            at: now,
        });
    }

    pub(super) fn on_control(&mut self, now: Instant, nic: &mut Nic, from: NodeAddr, c: Control) {
        if !self.peers.contains_key(&from) {
            self.stats.bad_messages += 1;
            return;
        }
        self.heard_from(from);
        match c {
            Control::Rts(rts) => {
                if MsgProtocol::from_wire(rts.protocol).is_none()
                    || rts.length > u64::from(u32::MAX)
                {
                    self.stats.bad_messages += 1;
                    return;
                }
                let a = Arrival {
                    from,
                    seq: rts.seq,
                    tag: rts.tag,
                    len: rts.length,
                    kind: ArrivalKind::Rts(rts),
                };
                self.arrived(now, nic, a);
            }
            Control::Cts(cts) => {
                let Some(&id) = self.send_by_seq.get(&(from, cts.seq)) else {
                    self.stats.bad_messages += 1;
                    return;
                };
                let s = self.sends.get_mut(&id).expect("indexed");
                if s.state != SendState::AwaitPeer || s.protocol == MsgProtocol::Eager {
                    self.stats.bad_messages += 1;
                    return;
                }
                match cts.protocol {
                    Protocol::Rput if s.protocol == MsgProtocol::Rput => {
                        let Some(key) = s.region else {
                            self.stats.bad_messages += 1;
                            return;
                        };
                        s.state = SendState::Writing;
                        let len = s.data.len() as u64;
                        let local = nic.memory().region(key).map_or(0, |r| r.base);
                        let ep = self.peers[&from].ep;
                        let wr = WorkRequest::write(from, key, local, len, cts.rkey, cts.addr)
                            .endpoints(ep, self.my_ep);
                        match self.via.post_send(now, nic, ep, wr) {
                            Ok(w) => {
                                self.purposes.insert(w, Purpose::Write(id));
                            }
                            Err(e) => {
                                self.fail_send(now, nic, id, MsgError::Refused(e.to_string()))
                            }
                        }
                    }
                    Protocol::R3 => {
                        // R3 from the start, or the receiver fell back.
                        if s.protocol != MsgProtocol::R3 {
                            self.stats.r3 += 1;
                            match s.protocol {
                                MsgProtocol::Rget => self.stats.rget -= 1,
                                MsgProtocol::Rput => self.stats.rput -= 1,
                                _ => {}
                            }
                            s.protocol = MsgProtocol::R3;
                            if let Some(k) = s.region.take() {
                                nic.memory_mut().deregister(k);
                            }
                        }
                        s.state = SendState::Chunks;
                        s.chunks_left = self.cfg.chunks(s.data.len() as u64);
                        self.queue_chunks(now, nic, id, CHUNK_R3);
                    }
                    _ => self.stats.bad_messages += 1,
                }
            }
            Control::Fin { protocol, seq, .. } => match protocol {
                Protocol::Rget => {
                    let Some(&id) = self.send_by_seq.get(&(from, seq)) else {
                        self.stats.bad_messages += 1;
                        return;
                    };
                    if self.sends[&id].protocol != MsgProtocol::Rget {
                        self.stats.bad_messages += 1;
                        return;
                    }
                    self.finish_send(now, nic, id, Ok(()));
                }
                Protocol::Rput => {
                    match self.recvs.get(&(from, seq)) {
                        Some(r) if r.protocol == MsgProtocol::Rput => {}
                        _ => {
                            self.stats.bad_messages += 1;
                            return;
                        }
                    }
                    self.finish_region_recv(now, nic, from, seq);
                }
                _ => self.stats.bad_messages += 1,
            },
        }
    }
}
