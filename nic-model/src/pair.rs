//! `Pair`: two NICs joined by a perfect wire in virtual time, for protocol
//! stories. The pair owns the clock, steps both engines, jumps to the
//! earliest wake-up, and lets a test judge every datagram on the wire
//! (deliver, drop, duplicate, delay), in the manner of quinn-proto's test
//! `Pair`.

use std::collections::BTreeMap;

use udrma_proto::{NodeAddr, Repr};

use crate::config::NicConfig;
use crate::nic::Nic;
use crate::wr::Event;
use udrma_proto::time::{Duration, Instant};

/// What happens to one datagram on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Arrives after the wire latency.
    Deliver,
    /// Never arrives.
    Drop,
    /// Arrives, plus this many extra copies (same time, in order).
    Duplicate(u32),
    /// Arrives this much later than the latency alone would make it.
    Delay(Duration),
    /// Arrives this much later, marked Congestion Experienced (as a queue
    /// above its ECN threshold would deliver it).
    MarkCe(Duration),
    /// Arrives as a trimming switch forwards a packet it had no room for:
    /// the header only, flagged trimmed.
    Trim,
    /// Arrives with one byte changed: byte `at % len` is XORed with `xor`
    /// (damage the integrity check must catch).
    Corrupt {
        /// Which byte (modulo the datagram's length).
        at: u16,
        /// The bits flipped.
        xor: u8,
    },
}

/// A datagram as a filter sees it.
#[derive(Debug, Clone, Copy)]
pub struct Wire<'a> {
    /// Sequence number of the datagram on this pair's wire (from 0).
    pub n: u64,
    /// When it was sent.
    pub at: Instant,
    /// Sender.
    pub from: NodeAddr,
    /// Receiver.
    pub to: NodeAddr,
    /// Parsed packet (`None` if it does not parse).
    pub repr: Option<Repr<'a>>,
    /// Its UDP source port (the sender's port plus the entropy).
    pub src_port: u16,
}

/// A datagram's fate, as recorded in [`Pair::log`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged {
    /// Sequence number on the wire.
    pub n: u64,
    /// Sent at.
    pub at: Instant,
    /// Sender.
    pub from: NodeAddr,
    /// Kind (`WRITE_FIRST`, `ACK`, ...), or `?` if it does not parse.
    pub kind: String,
    /// Message id.
    pub msg_id: u32,
    /// Segment index.
    pub seg_index: u32,
    /// The UDP source port the NIC chose (its entropy).
    pub src_port: u16,
    /// What the filter decided.
    pub verdict: Verdict,
}

type Filter = Box<dyn FnMut(&Wire<'_>) -> Verdict>;

#[derive(Debug)]
struct Flight {
    to: usize,
    from: NodeAddr,
    bytes: Vec<u8>,
    ce: bool,
    trimmed: bool,
    src_port: u16,
}

/// Two NICs (`h0` = `nics[0]`, `h1` = `nics[1]`) and the wire between them.
pub struct Pair {
    /// The two engines.
    pub nics: [Nic; 2],
    /// Virtual time now.
    pub now: Instant,
    /// One-way wire latency.
    pub latency: Duration,
    /// Every datagram sent, with its verdict.
    pub log: Vec<Logged>,
    /// Every event raised, with the index of the NIC that raised it.
    pub events: Vec<(usize, Event)>,
    wire: BTreeMap<(Instant, u64), Flight>,
    seq: u64,
    sent: u64,
    /// When each NIC's last datagram left.
    last_leave: [Instant; 2],
    filter: Option<Filter>,
    buf: Vec<u8>,
}

impl core::fmt::Debug for Pair {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pair")
            .field("now", &self.now)
            .field("in_flight", &self.wire.len())
            .field("events", &self.events.len())
            .finish()
    }
}

impl Pair {
    /// Two NICs with the same configuration and a 1 µs wire.
    pub fn new(cfg: NicConfig) -> Pair {
        Pair::with_configs(cfg.clone(), cfg)
    }

    /// Two NICs with their own configurations.
    pub fn with_configs(a: NicConfig, b: NicConfig) -> Pair {
        Pair {
            nics: [
                Nic::new(NodeAddr(0), a).expect("valid configuration"),
                Nic::new(NodeAddr(1), b).expect("valid configuration"),
            ],
            now: Instant::ZERO,
            latency: Duration::from_micros(1),
            log: Vec::new(),
            events: Vec::new(),
            wire: BTreeMap::new(),
            seq: 0,
            sent: 0,
            last_leave: [Instant::ZERO; 2],
            filter: None,
            buf: Vec::new(),
        }
    }

    /// Judges every later datagram with `f` (replacing any earlier filter).
    pub fn set_filter(&mut self, f: impl FnMut(&Wire<'_>) -> Verdict + 'static) {
        self.filter = Some(Box::new(f));
    }

    /// Delivers everything from now on.
    pub fn clear_filter(&mut self) {
        self.filter = None;
    }

    /// Datagrams on the wire now.
    pub fn in_flight(&self) -> usize {
        self.wire.len()
    }

    /// Sends what both NICs have to send and collects their events, at the
    /// current time.
    pub fn flush(&mut self) {
        for i in 0..2 {
            while let Some(t) = self.nics[i].poll_transmit(self.now, &mut self.buf) {
                let bytes = self.buf[..t.len].to_vec();
                let to = if t.dst == NodeAddr(0) { 0 } else { 1 };
                self.put_on_wire_from(i, to, bytes, t.src_port, t.leaves_in);
            }
            while let Some(e) = self.nics[i].poll_event() {
                self.events.push((i, e));
            }
        }
    }

    fn put_on_wire(&mut self, from: usize, to: usize, bytes: Vec<u8>) {
        let port = self.nics[from].config().src_port;
        self.put_on_wire_from(from, to, bytes, port, Duration::ZERO);
    }

    /// Puts a datagram on the wire; it leaves `leaves_in` from now, when
    /// its sender's NIC has gathered it ([`crate::Transmit::leaves_in`]).
    fn put_on_wire_from(
        &mut self,
        from: usize,
        to: usize,
        bytes: Vec<u8>,
        src_port: u16,
        leaves_in: Duration,
    ) {
        // A NIC's datagrams leave in the order it hands them out.
        let leaves = (self.now + leaves_in).max(self.last_leave[from]);
        self.last_leave[from] = leaves;
        let n = self.sent;
        self.sent += 1;
        let repr = Repr::parse_bytes(&bytes).ok();
        let wire = Wire {
            n,
            at: leaves,
            from: self.nics[from].addr(),
            to: self.nics[to].addr(),
            repr,
            src_port,
        };
        let verdict = match self.filter.as_mut() {
            Some(f) => f(&wire),
            None => Verdict::Deliver,
        };
        self.log.push(Logged {
            n,
            at: leaves,
            from: wire.from,
            kind: repr.map_or_else(|| "?".to_string(), |r| r.kind_name()),
            msg_id: repr.map_or(0, |r| r.msg_id),
            seg_index: repr.map_or(0, |r| r.seg_index),
            src_port,
            verdict,
        });
        let mut bytes = bytes;
        let (copies, extra) = match verdict {
            Verdict::Drop => return,
            Verdict::Deliver => (1, Duration::ZERO),
            Verdict::Duplicate(k) => (1 + k, Duration::ZERO),
            Verdict::Delay(d) | Verdict::MarkCe(d) => (1, d),
            Verdict::Trim => {
                bytes.truncate(udrma_proto::HEADER_LEN);
                (1, Duration::ZERO)
            }
            Verdict::Corrupt { at, xor } => {
                if !bytes.is_empty() {
                    let i = usize::from(at) % bytes.len();
                    bytes[i] ^= xor;
                }
                (1, Duration::ZERO)
            }
        };
        let at = leaves + self.latency + extra;
        let src = self.nics[from].addr();
        for _ in 0..copies {
            self.wire.insert(
                (at, self.seq),
                Flight {
                    to,
                    from: src,
                    bytes: bytes.clone(),
                    ce: matches!(verdict, Verdict::MarkCe(_)),
                    trimmed: verdict == Verdict::Trim,
                    src_port,
                },
            );
            self.seq += 1;
        }
    }

    /// Injects raw bytes as if `from` had sent them to the other NIC now.
    pub fn inject(&mut self, from: usize, bytes: Vec<u8>) {
        self.put_on_wire(from, 1 - from, bytes);
    }

    /// The next moment something happens: a datagram lands or a NIC
    /// deadline passes.
    pub fn next_wakeup(&self) -> Option<Instant> {
        let wire = self.wire.keys().next().map(|(t, _)| *t);
        [
            wire,
            self.nics[0].poll_timeout(),
            self.nics[1].poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Flushes, then advances to the next wake-up and handles it. Returns
    /// `false` when nothing is left to happen.
    pub fn step(&mut self) -> bool {
        self.flush();
        let Some(next) = self.next_wakeup() else {
            return false;
        };
        self.now = self.now.max(next);
        while let Some(entry) = self.wire.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let f = entry.remove();
            // No costs here, but the translation cache and its counters
            // see every packet, as in the other backends.
            let nic = &mut self.nics[f.to];
            if nic.needs_dma_work() {
                nic.receive_work(f.from, &f.bytes);
            }
            let meta = crate::RxMeta {
                ecn: crate::Ecn::marked(f.ce),
                trimmed: f.trimmed,
                src_port: f.src_port,
            };
            nic.handle_datagram_meta(self.now, f.from, meta, &f.bytes);
        }
        for nic in &mut self.nics {
            if nic.poll_timeout().is_some_and(|t| t <= self.now) {
                nic.handle_timeout(self.now);
            }
        }
        self.flush();
        true
    }

    /// Steps until nothing is left to happen or virtual time passes
    /// `limit`; returns whether it went idle.
    pub fn run_until(&mut self, limit: Instant) -> bool {
        while self.now <= limit {
            if !self.step() {
                return true;
            }
        }
        false
    }

    /// Steps until idle (panics after 10 simulated seconds: a liveness bug).
    pub fn run(&mut self) {
        let limit = self.now + Duration::from_millis(10_000);
        assert!(
            self.run_until(limit),
            "pair still busy at {}: {:?}",
            self.now,
            self
        );
    }

    /// Steps until virtual time reaches `t` (handling everything before).
    pub fn advance_to(&mut self, t: Instant) {
        loop {
            self.flush();
            match self.next_wakeup() {
                Some(next) if next <= t => {
                    self.step();
                }
                _ => break,
            }
        }
        self.now = self.now.max(t);
        self.flush();
    }

    /// Events raised by NIC `i`, in order.
    pub fn events_of(&self, i: usize) -> impl Iterator<Item = &Event> {
        self.events
            .iter()
            .filter(move |(j, _)| *j == i)
            .map(|(_, e)| e)
    }
}
