//! Shared set-up for the protocol stories: a pair of NICs with a source
//! buffer on h0 (filled with a known pattern) and a target on h1.

#![allow(dead_code)]

use udrma_nic::pair::{Pair, Verdict, Wire};
use udrma_nic::{Access, Event, MrKey, NicConfig, WcError, WorkRequest, WrId, WrKind};
use udrma_proto::{Body, Flags, NodeAddr, Opcode};

pub const SRC: u64 = 0x1000;
pub const DST: u64 = 0x10_0000;
pub const LEN: usize = 1 << 20;

pub struct Setup {
    pub pair: Pair,
    /// Source region on h0 (also the READ destination).
    pub src: MrKey,
    /// Target region on h1 (WRITE target, READ source).
    pub dst: MrKey,
}

/// Bytes that differ at every offset and between seeds.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ seed)
        .collect()
}

/// mtu 1024 so a few KiB are many packets; threshold 256 KiB, segments 64 KiB.
pub fn config() -> NicConfig {
    NicConfig {
        mtu_payload: 1024,
        ..NicConfig::default()
    }
}

pub fn setup(cfg: NicConfig) -> Setup {
    let mut pair = Pair::new(cfg);
    let src = pair.nics[0].register(SRC, LEN, Access::ALL);
    pair.nics[0].memory_mut().region_mut(src).unwrap().bytes = pattern(LEN, 0x5a).into();
    let dst = pair.nics[1].register(DST, LEN, Access::ALL);
    pair.nics[1].memory_mut().region_mut(dst).unwrap().bytes = pattern(LEN, 0xc3).into();
    Setup { pair, src, dst }
}

impl Setup {
    pub fn write(&mut self, len: u64) -> WrId {
        let wr = WorkRequest::write(NodeAddr(1), self.src, SRC, len, self.dst.0, DST);
        self.pair.nics[0].post(self.pair.now, wr).unwrap()
    }

    pub fn write_at(&mut self, offset: u64, len: u64) -> WrId {
        let wr = WorkRequest::write(
            NodeAddr(1),
            self.src,
            SRC + offset,
            len,
            self.dst.0,
            DST + offset,
        );
        self.pair.nics[0].post(self.pair.now, wr).unwrap()
    }

    pub fn read(&mut self, len: u64) -> WrId {
        let wr = WorkRequest::read(NodeAddr(1), self.src, SRC, len, self.dst.0, DST);
        self.pair.nics[0].post(self.pair.now, wr).unwrap()
    }

    /// Bytes `[off, off+len)` of the h0 source region.
    pub fn src_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.pair.nics[0].memory().region(self.src).unwrap().bytes[off..off + len].to_vec()
    }

    /// Bytes `[off, off+len)` of the h1 target region.
    pub fn dst_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.pair.nics[1].memory().region(self.dst).unwrap().bytes[off..off + len].to_vec()
    }

    /// Every completion of `wr` raised by NIC `nic`.
    pub fn completions(&self, nic: usize, wr: WrId) -> Vec<Result<(), WcError>> {
        self.pair
            .events_of(nic)
            .filter_map(|e| match e {
                Event::Completed { wr: w, result, .. } if *w == wr => Some(*result),
                _ => None,
            })
            .collect()
    }

    /// Asserts `wr` completed exactly once, successfully.
    pub fn assert_ok_once(&self, nic: usize, wr: WrId) {
        assert_eq!(
            self.completions(nic, wr),
            vec![Ok(())],
            "{wr} on h{nic}: {:#?}",
            self.pair.log_tail()
        );
    }

    /// Posts a WRITE of `len` bytes, runs the pair until it is quiet, and
    /// asserts the WRITE completed once and every byte landed.
    pub fn write_through(&mut self, len: u64) {
        let wr = self.write(len);
        self.pair.run();
        self.assert_ok_once(0, wr);
        self.assert_written(len as usize);
    }

    /// Asserts the first `len` bytes of the WRITE landed exactly.
    pub fn assert_written(&self, len: usize) {
        assert!(
            self.dst_bytes(0, len) == self.src_bytes(0, len),
            "receiver memory differs from the sender's bytes"
        );
    }

    pub fn retransmits(&self) -> u64 {
        self.pair.nics[0].stats().retransmits
    }

    pub fn completion_time(&self, nic: usize, wr: WrId) -> udrma_nic::Instant {
        self.pair
            .events_of(nic)
            .find_map(|e| match e {
                Event::Completed { wr: w, at, .. } if *w == wr => Some(*at),
                _ => None,
            })
            .expect("completed")
    }
}

pub trait LogTail {
    fn log_tail(&self) -> Vec<String>;
}

impl LogTail for Pair {
    fn log_tail(&self) -> Vec<String> {
        let skip = self.log.len().saturating_sub(30);
        self.log[skip..]
            .iter()
            .map(|l| {
                format!(
                    "{} {} {} msg={} seg={} {:?}",
                    l.at, l.from, l.kind, l.msg_id, l.seg_index, l.verdict
                )
            })
            .collect()
    }
}

/// Data packets (WRITE/SEND/READ responses) of the first transmission.
pub fn is_data(w: &Wire<'_>) -> bool {
    w.repr
        .is_some_and(|r| r.opcode().carries_data() && !r.flags.contains(Flags::RETRANSMIT))
}

pub fn opcode(w: &Wire<'_>) -> Option<Opcode> {
    w.repr.map(|r| r.opcode())
}

pub fn is_kind(w: &Wire<'_>, kind: &str) -> bool {
    w.repr.is_some_and(|r| r.kind_name() == kind)
}

/// A filter applying `verdict` to the first `times` datagrams matching
/// `pred`, delivering the rest.
pub fn first_matching(
    mut pred: impl FnMut(&Wire<'_>) -> bool + 'static,
    verdict: Verdict,
    times: u32,
) -> impl FnMut(&Wire<'_>) -> Verdict + 'static {
    let mut left = times;
    move |w| {
        if left > 0 && pred(w) {
            left -= 1;
            verdict
        } else {
            Verdict::Deliver
        }
    }
}

pub fn body_is_write(w: &Wire<'_>) -> bool {
    w.repr.is_some_and(|r| matches!(r.body, Body::Write { .. }))
}

pub fn kind_of(e: &Event) -> Option<WrKind> {
    match e {
        Event::Completed { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// The bytes of the first packet h0 sends for a 2 KiB WRITE with `cfg`
/// (a WRITE_FIRST; the engine is deterministic, so a fresh pair sends the
/// same bytes every time).
pub fn first_write_packet(cfg: NicConfig) -> Vec<u8> {
    first_packet_of(cfg, |s| {
        WorkRequest::write(NodeAddr(1), s.src, SRC, 2048, s.dst.0, DST)
    })
}

/// The bytes of the first packet h0 sends for the request `make` builds.
pub fn first_packet_of(cfg: NicConfig, make: impl FnOnce(&Setup) -> WorkRequest) -> Vec<u8> {
    let mut fresh = setup(cfg);
    let wr = make(&fresh);
    fresh.pair.nics[0].post(fresh.pair.now, wr).unwrap();
    let mut buf = Vec::new();
    let t = fresh.pair.nics[0]
        .poll_transmit(udrma_nic::Instant::ZERO, &mut buf)
        .unwrap();
    buf.truncate(t.len);
    buf
}

/// `bytes` with a fresh ICRC (a forgery the integrity check accepts).
pub fn reseal(mut bytes: Vec<u8>) -> Vec<u8> {
    udrma_proto::Packet::new_unchecked(&mut bytes[..]).fill_icrc();
    bytes
}

/// The segments h0's WRITE packets carried a second (or later) time, in
/// the order the copies left.
pub fn resent_segments(s: &Setup) -> Vec<u32> {
    let data = writes_sent(s);
    data.iter()
        .enumerate()
        .filter(|(i, l)| data[..*i].iter().any(|e| e.seg_index == l.seg_index))
        .map(|(_, l)| l.seg_index)
        .collect()
}

/// Every WRITE packet h0 put on the wire, in order.
pub fn writes_sent(s: &Setup) -> Vec<&udrma_nic::pair::Logged> {
    s.pair
        .log
        .iter()
        .filter(|l| l.from == NodeAddr(0) && l.kind.starts_with("WRITE"))
        .collect()
}
