//! The send path: pending datagrams to the kernel, grouped into GSO
//! batches per destination, socket and size.

use std::io;

use quinn_udp::{EcnCodepoint, Transmit};
use tokio::io::Interest;

use super::Endpoint;
use crate::sockets::PathSocket;
use crate::BridgeError;

impl Endpoint {
    /// Hands every pending datagram to the kernel: data first (on
    /// loopback every `sendmsg` delivers inline, so an acknowledgement sent
    /// ahead of an echo would delay it), then runs of the same destination
    /// and size as one GSO batch.
    pub async fn flush(&mut self) -> Result<(), BridgeError> {
        self.collect();
        if self.pending.len() > 1 {
            let is_data = |b: &Vec<u8>| {
                // (A sealed datagram's opcode follows its security header.)
                let at = if udrma_proto::secure::is_sealed(b) {
                    udrma_proto::secure::SEC_HEADER_LEN + 1
                } else {
                    1
                };
                b.get(at).is_some_and(|op| matches!(op, 0x01..=0x04))
            };
            // Stable: the order within data and within control is kept,
            // and with several sockets each one's datagrams are grouped,
            // so that they still leave in GSO batches. (Measured on a
            // 64 MiB loopback put over 8 ports: one datagram per `sendmsg`
            // ran at 0.76 Gb/s with 2,597 timeouts, the receiver
            // overwhelmed by small packets; grouped, 3–5 Gb/s and none.)
            // Sprayed packets take different paths anyway; their order
            // across paths is not worth a system call each.
            self.pending
                .make_contiguous()
                .sort_by_key(|(_, path, b)| (!is_data(b), *path));
        }
        let mut batch: Vec<u8> = Vec::new();
        while !self.pending.is_empty() {
            self.release_due_holds();
            let (to, path, first_len) = {
                let (to, path, b) = &self.pending[0];
                (*to, *path, b.len())
            };
            let max_segments = self.socks[path].state.max_gso_segments().max(1);
            // How many of the following datagrams can join the batch.
            let limit = max_segments.min((65_000 / first_len.max(1)).max(1));
            let mut n = 1;
            while n < limit && n < self.pending.len() {
                let (t, p, b) = &self.pending[n];
                if *t != to || *p != path || b.len() != first_len {
                    break;
                }
                n += 1;
            }
            batch.clear();
            for (_, _, b) in self.pending.iter().take(n) {
                batch.extend_from_slice(b);
            }
            let transmit = Transmit {
                destination: to,
                ecn: self.cfg.ecn.then_some(EcnCodepoint::Ect0),
                contents: &batch,
                segment_size: (n > 1).then_some(first_len),
                src_ip: None,
            };
            let r = {
                let PathSocket { sock, state } = &self.socks[path];
                sock.try_io(Interest::WRITABLE, || {
                    state.try_send(sock.into(), &transmit)
                })
            };
            match r {
                Ok(()) => {
                    self.stats.tx_calls += 1;
                    self.stats.tx_datagrams += n as u64;
                    self.path_tx[path] += n as u64;
                    self.stats.tx_bytes += batch.len() as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.socks[path]
                        .sock
                        .writable()
                        .await
                        .map_err(BridgeError::Io)?;
                    continue;
                }
                Err(e) => {
                    // The network said no (unreachable, no buffer): the
                    // datagrams are lost like any other; retransmits follow.
                    tracing::debug!(error = %e, to = %to, "udp send error");
                    self.stats.tx_calls += 1;
                    self.stats.tx_errors += n as u64;
                }
            }
            for _ in 0..n {
                if let Some((_, _, b)) = self.pending.pop_front() {
                    if self.pool.len() < 1024 {
                        self.pool.push(b);
                    }
                }
            }
        }
        Ok(())
    }

    /// Puts the egress rules' held datagrams that are due at the head of
    /// the send queue. A long flush (a burst of operations posted at once
    /// is hundreds of datagrams, milliseconds of `sendmsg`) checks between
    /// batches, so a datagram held for 20 µs is overtaken by what leaves
    /// in those 20 µs, as behind netem or on a simulated link, and not by
    /// the whole rest of the burst: released only after the flush, a
    /// reordered first packet arrived behind every later packet of its
    /// operation, and with two of them in one burst the receiver's
    /// escape channel overflowed.
    fn release_due_holds(&mut self) {
        let now = std::time::Instant::now();
        let mut due = Vec::new();
        while let Some(held) = self.egress.release(now) {
            due.push(held);
        }
        for held in due.into_iter().rev() {
            self.pending.push_front(held);
        }
    }
}
