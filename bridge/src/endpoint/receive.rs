//! The receive path: batches read off the socket (`recvmmsg`, GRO
//! segments split by their stride), opened in authenticated mode, the
//! CE mark read off each datagram, strangers sent through admission, and
//! what is left handed to the engine with its metadata.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;

use quinn_udp::{EcnCodepoint, RecvMeta, BATCH_SIZE};
use tokio::io::Interest;
use udrma_nic::{Ecn, RxMeta};
use udrma_proto::{Body, Repr};

use super::{canonical, Endpoint};
use crate::sockets::PathSocket;

impl Endpoint {
    /// Reads every datagram waiting on the socket (in batches) into the
    /// engine, or with `once` only what one read returns; the first read
    /// offers `first` slots (1 when spinning: an empty read of one slot
    /// costs the kernel a fraction of a full batch's). Returns whether
    /// anything came.
    pub(super) fn receive(&mut self, first: usize, once: bool) -> bool {
        let mut metas = [RecvMeta::default(); BATCH_SIZE];
        let mut slots = first.clamp(1, BATCH_SIZE);
        let mut got = false;
        loop {
            let Endpoint {
                socks,
                rx_buf,
                rx_slot,
                cfg,
                ..
            } = self;
            let busy_poll = &cfg.busy_poll;
            let PathSocket { sock, state } = &socks[0];
            let mut slices: Vec<IoSliceMut<'_>> = rx_buf
                .chunks_mut(*rx_slot)
                .take(slots)
                .map(IoSliceMut::new)
                .collect();
            slots = BATCH_SIZE;
            // Spinning, the runtime's readiness (cleared by the last empty
            // read and set again only when the runtime polls the kernel) is
            // bypassed: the socket is non-blocking either way.
            let r = if *busy_poll {
                state.recv(sock.into(), &mut slices, &mut metas)
            } else {
                sock.try_io(Interest::READABLE, || {
                    state.recv((&*sock).into(), &mut slices, &mut metas)
                })
            };
            drop(slices);
            let n = match r {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return got,
                Err(e) => {
                    // ICMP errors surface here on some systems; the engine's
                    // retransmits deal with what they mean.
                    tracing::debug!(error = %e, "udp receive error");
                    self.stats.rx_errors += 1;
                    return got;
                }
            };
            got = true;
            self.stats.rx_calls += 1;
            let now = self.clock.now();
            for (i, meta) in metas.iter().take(n).enumerate() {
                let start = i * self.rx_slot;
                let stride = meta.stride.max(1);
                let mut off = 0;
                while off < meta.len {
                    let end = (off + stride).min(meta.len);
                    // A range, not a slice: the engine call borrows self.
                    let range = start + off..start + end;
                    self.on_datagram(now, meta.addr, meta.ecn, range);
                    off = end;
                }
            }
            self.collect();
            if once {
                return true;
            }
        }
    }

    fn on_datagram(
        &mut self,
        now: udrma_nic::Instant,
        from: SocketAddr,
        ecn: Option<EcnCodepoint>,
        range: core::ops::Range<usize>,
    ) {
        // The buffer leaves `self` for the call (a pointer move), so the
        // handler can borrow the bytes and `self` at once.
        let rx = std::mem::take(&mut self.rx_buf);
        let bytes = &rx[range];
        self.stats.rx_datagrams += 1;
        self.stats.rx_bytes += bytes.len() as u64;
        match self.secure.as_mut() {
            None => self.on_plain(now, from, ecn, bytes),
            Some(sec) => {
                // Authenticated mode: nothing unsealed, forged, modified
                // or replayed goes further (counted in `Secure::stats`).
                let mut opened = std::mem::take(&mut self.open_buf);
                if sec.open(bytes, &mut opened) {
                    self.on_plain(now, from, ecn, &opened);
                }
                self.open_buf = opened;
            }
        }
        self.rx_buf = rx;
    }

    /// A plain packet from `from` (opened first in authenticated mode).
    fn on_plain(
        &mut self,
        now: udrma_nic::Instant,
        from: SocketAddr,
        ecn: Option<EcnCodepoint>,
        bytes: &[u8],
    ) {
        let ecn = match ecn {
            None => Ecn::NotEct,
            Some(EcnCodepoint::Ect0) => Ecn::Ect0,
            Some(EcnCodepoint::Ect1) => Ecn::Ect1,
            Some(EcnCodepoint::Ce) => {
                self.stats.rx_ce += 1;
                Ecn::Ce
            }
        };
        let from = canonical(from);
        let known = self.peers.node(from);
        // HELLOs are parsed here too (the opcode byte says which): a
        // stranger's ask goes through admission, and a peer's retry or
        // "full" answers this host's ask, not the engine.
        let hello = match (known, bytes.get(1)) {
            (None, _) | (_, Some(0x24)) => match Repr::parse_bytes(bytes) {
                Ok(Repr {
                    body: Body::Hello(h),
                    ..
                }) => Some(h),
                _ => None,
            },
            _ => None,
        };
        let node = match known {
            Some(n) => n,
            None => match self.admit_stranger(now, from, hello) {
                Some(n) => n,
                None => return,
            },
        };
        let os_now = self.clock.to_os(now);
        let Some(p) = self.peers.get_mut(node) else {
            return;
        };
        p.last_heard = Some(os_now);
        if let Some(h) = hello.filter(|h| h.reply && (h.retry || h.full)) {
            if h.full {
                p.refused_full = true;
            } else {
                p.cookie = Some(h.cookie);
            }
            return;
        }
        if self.nic.needs_dma_work() {
            // Real time applies here; the call keeps the translation cache
            // and its counters as in the simulator.
            self.nic.receive_work(node, bytes);
        }
        // With several paths, the peer's source port says which entropy
        // the datagram took (its own numbering, from the engine's base
        // port), and the engine answers on the same one.
        let src_port = match self.peers.get(node) {
            Some(p) if self.socks.len() > 1 => self
                .cfg
                .nic
                .src_port
                .wrapping_add(from.port().wrapping_sub(p.addr.port())),
            _ => 0,
        };
        let meta = RxMeta {
            ecn,
            trimmed: false,
            src_port,
        };
        self.nic.handle_datagram_meta(now, node, meta, bytes);
    }
}
