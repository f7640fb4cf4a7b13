//! Sending: messages cut into chunks that go through vbufs or RDMA,
//! deferred work while credits are short, the engine's completions, and
//! the end of a send.

use super::*;

impl Messenger {
    pub(super) fn queue_chunks(&mut self, now: Instant, nic: &mut Nic, id: SendId, kind: u8) {
        let Some(s) = self.sends.get(&id) else {
            return;
        };
        let len = s.data.len() as u64;
        let cap = self.cfg.chunk_payload();
        let n = self.cfg.chunks(len);
        let (dst, seq, tag) = (s.dst, s.seq, s.tag);
        let peer = self.peers.get_mut(&dst).expect("connected");
        for i in 0..n {
            let off = i * cap;
            peer.backlog.push_back(Chunk {
                send: id,
                dst,
                kind,
                index: i as u16,
                seq,
                tag,
                total: len as u32,
                data_off: off,
                data_len: cap.min(len - off.min(len)),
            });
        }
        self.drain(now, nic, dst);
        // Chunks of this message that must wait for a credit.
        let waiting = self.peers[&dst]
            .backlog
            .iter()
            .filter(|c| c.send == id)
            .count();
        self.stats.credit_stalls += waiting as u64;
    }

    /// Moves chunks with a credit toward the send vbufs, then sends what
    /// has a vbuf.
    pub(super) fn drain(&mut self, now: Instant, nic: &mut Nic, dst: NodeAddr) {
        if let Some(peer) = self.peers.get_mut(&dst) {
            while peer.remote_credit > 0 {
                let Some(c) = peer.backlog.pop_front() else {
                    break;
                };
                peer.remote_credit -= 1;
                self.stats.min_credit = self.stats.min_credit.min(u64::from(peer.remote_credit));
                self.vbuf_wait.push_back(c);
            }
        }
        while !self.vbuf_wait.is_empty() {
            let Some(slot) = self.send_free.pop() else {
                self.stats.send_vbuf_stalls += 1;
                break;
            };
            let c = self.vbuf_wait.pop_front().expect("not empty");
            // The host copies the chunk into the vbuf, then posts it.
            let done = self.cpu.take(now, nic.config().cost.copy(c.data_len));
            self.defer(now, nic, done, Deferred::PostChunk(c, slot));
        }
    }

    pub(super) fn defer(&mut self, now: Instant, nic: &mut Nic, at: Instant, d: Deferred) {
        if at <= now {
            self.run_deferred(now, nic, d);
        } else {
            self.deferred_seq += 1;
            self.deferred.insert((at, self.deferred_seq), d);
        }
    }

    pub(super) fn run_deferred(&mut self, now: Instant, nic: &mut Nic, d: Deferred) {
        match d {
            Deferred::PostChunk(c, slot) => self.post_chunk(now, nic, c, slot),
            Deferred::Repost(peer, slot) => self.repost(now, nic, peer, slot),
            Deferred::Arrived(a) => self.arrived(now, nic, a),
            Deferred::R3Done(peer, seq) => self.finish_r3_recv(now, peer, seq),
        }
    }

    pub(super) fn post_chunk(&mut self, now: Instant, nic: &mut Nic, c: Chunk, slot: u32) {
        let Some(s) = self.sends.get(&c.send) else {
            self.send_free.push(slot);
            return;
        };
        let (key, base) = self.send_region.expect("connected");
        let addr = base + u64::from(slot) * u64::from(self.cfg.vbuf_size);
        let mut bytes = Vec::with_capacity(CHUNK_HEADER + c.data_len as usize);
        bytes.push(c.kind);
        bytes.push(0);
        bytes.extend_from_slice(&c.index.to_be_bytes());
        bytes.extend_from_slice(&c.seq.to_be_bytes());
        bytes.extend_from_slice(&c.tag.to_be_bytes());
        bytes.extend_from_slice(&c.total.to_be_bytes());
        let from = c.data_off as usize;
        bytes.extend_from_slice(&s.data[from..from + c.data_len as usize]);
        if let Some(r) = nic.memory_mut().region_mut(key) {
            let at = (addr - r.base) as usize;
            r.bytes.write_at(at..at + bytes.len(), &bytes);
        }
        let ep = self.peers[&c.dst].ep;
        let wr = WorkRequest::send(c.dst, key, addr, bytes.len() as u64).endpoints(ep, self.my_ep);
        match self.via.post_send(now, nic, ep, wr) {
            Ok(id) => {
                self.purposes
                    .insert(id, Purpose::Chunk { send: c.send, slot });
            }
            Err(e) => {
                self.send_free.push(slot);
                self.fail_send(now, nic, c.send, MsgError::Refused(e.to_string()));
            }
        }
    }

    pub(super) fn control(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        dst: NodeAddr,
        c: Control,
        send: Option<SendId>,
        recv: Option<(NodeAddr, u32)>,
    ) {
        let ep = self.peers[&dst].ep;
        let wr = WorkRequest::control(dst, c).endpoints(ep, self.my_ep);
        let purpose = match (c, send) {
            (Control::Fin { .. }, Some(s)) => Purpose::Fin(s),
            _ => Purpose::Control { send, recv },
        };
        match self.via.post_send(now, nic, ep, wr) {
            Ok(id) => {
                self.purposes.insert(id, purpose);
            }
            Err(e) => {
                let err = MsgError::Refused(e.to_string());
                if let Some(s) = send {
                    self.fail_send(now, nic, s, err);
                } else if let Some((p, seq)) = recv {
                    self.fail_recv(now, nic, p, seq, err);
                }
            }
        }
    }

    /// Registers `len` bytes, or fails as configured.
    pub(super) fn register(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        len: u64,
        access: Access,
    ) -> Option<(MrKey, u64)> {
        let p = self.cfg.registration_failure;
        let in_window = self
            .cfg
            .registration_failure_window
            .is_none_or(|(a, b)| now >= a && now < b);
        if p > 0.0 && in_window {
            let u = (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
            if u < p {
                self.stats.registration_failures += 1;
                return None;
            }
        }
        let addr = self.alloc(len);
        Some((nic.register(addr, len as usize, access), addr))
    }

    pub(super) fn on_completion(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        p: Purpose,
        len: u64,
        result: Result<(), WcError>,
    ) {
        match p {
            Purpose::Vbuf { peer, slot } => {
                if result.is_ok() {
                    self.on_vbuf(now, nic, peer, slot, len);
                }
                // A failed receive descriptor (deregistered memory) is
                // not re-posted: it only happens when tearing down.
            }
            Purpose::Chunk { send, slot } => {
                self.send_free.push(slot);
                match result {
                    Ok(()) => {
                        if let Some(s) = self.sends.get_mut(&send) {
                            s.chunks_left -= 1;
                            if s.chunks_left == 0 {
                                self.finish_send(now, nic, send, Ok(()));
                            }
                        }
                    }
                    Err(e) => self.fail_send(now, nic, send, MsgError::Transport(e)),
                }
                // The freed vbuf may let a waiting chunk go.
                if let Some(dst) = self.vbuf_wait.front().map(|c| c.dst) {
                    self.drain(now, nic, dst);
                }
            }
            Purpose::Control { send, recv } => {
                if let Err(e) = result {
                    if let Some(s) = send {
                        self.fail_send(now, nic, s, MsgError::Transport(e));
                    } else if let Some((peer, seq)) = recv {
                        self.fail_recv(now, nic, peer, seq, MsgError::Transport(e));
                    }
                }
            }
            Purpose::Write(send) => match result {
                Ok(()) => {
                    let Some(s) = self.sends.get_mut(&send) else {
                        return;
                    };
                    s.state = SendState::Finishing;
                    let (dst, tag, seq) = (s.dst, s.tag, s.seq);
                    self.control(
                        now,
                        nic,
                        dst,
                        Control::Fin {
                            protocol: Protocol::Rput,
                            tag,
                            seq,
                        },
                        Some(send),
                        None,
                    );
                }
                Err(e) => self.fail_send(now, nic, send, MsgError::Transport(e)),
            },
            Purpose::Fin(send) => match result {
                Ok(()) => self.finish_send(now, nic, send, Ok(())),
                Err(e) => self.fail_send(now, nic, send, MsgError::Transport(e)),
            },
            Purpose::Read(peer, seq) => match result {
                Ok(()) => {
                    let Some(r) = self.recvs.get(&(peer, seq)) else {
                        return;
                    };
                    let tag = r.tag;
                    self.control(
                        now,
                        nic,
                        peer,
                        Control::Fin {
                            protocol: Protocol::Rget,
                            tag,
                            seq,
                        },
                        None,
                        Some((peer, seq)),
                    );
                    self.finish_region_recv(now, nic, peer, seq);
                }
                Err(e) => self.fail_recv(now, nic, peer, seq, MsgError::Transport(e)),
            },
        }
    }

    pub(super) fn finish_send(
        &mut self,
        now: Instant,
        nic: &mut Nic,
        id: SendId,
        result: Result<(), MsgError>,
    ) {
        let Some(s) = self.sends.remove(&id) else {
            return;
        };
        self.send_by_seq.remove(&(s.dst, s.seq));
        if let Some(k) = s.region {
            nic.memory_mut().deregister(k);
        }
        if result.is_ok() {
            self.stats.sends_done += 1;
        } else {
            self.stats.failed += 1;
        }
        self.events.push_back(MsgEvent::SendDone {
            id,
            protocol: s.protocol,
            result,
            at: now,
        });
    }

    pub(super) fn fail_send(&mut self, now: Instant, nic: &mut Nic, id: SendId, err: MsgError) {
        if let Some(s) = self.sends.get(&id) {
            let dst = s.dst;
            if let Some(p) = self.peers.get_mut(&dst) {
                p.backlog.retain(|c| c.send != id);
            }
            self.vbuf_wait.retain(|c| c.send != id);
        }
        self.finish_send(now, nic, id, Err(err));
    }
}
