//! The run as a timeline in the Chrome trace-event format (the JSON that
//! Perfetto, chrome://tracing and speedscope open), made from what the
//! run records anyway: the trace's events, read from its sink as they are
//! written, and the operations' post and completion times. Nothing here
//! feeds back into the simulation, so the trace hash and the report are
//! the same with and without a timeline.
//!
//! What the file holds (docs/cli.md, "A timeline"):
//! - per host, a process named after it: each operation (an RDMA
//!   operation, a message, a round trip, a collective's iteration) as a
//!   complete event from its start to its end (threads `ops 0`,
//!   `ops 1`, ... so that overlapping operations never share one), and
//!   on thread `events` instants for the NACKs it sent and its
//!   retransmissions (a WRITE or SEND packet or READ request it had sent
//!   before, sent again);
//! - a process `fabric`: per switch egress port, its queue depth in bytes
//!   as a counter, sampled only when it changes (a packet joins the
//!   queue as it arrives, computed from its previous hop's start, length
//!   and the link's rate and latency, and leaves it as it starts on the
//!   wire); on a lossless fabric, per paused port, a 0/1 counter of PFC
//!   pauses; and drops as instants.
//!
//! Times are the simulated clock's, in microseconds with six decimals
//! (exact picoseconds), written without floating point: the same run
//! writes the same bytes.
//!
//! Child: `spans` (the operations' spans, from every workload family).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::Write;
use std::sync::{Arc, Mutex};

use udrma_fabric::{Topology, TraceEvent, TraceFormat};

mod spans;

use spans::spans;
pub use spans::OpSpan;

/// What a timeline is asked for ([`crate::RunOptions::timeline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// At most this many events (spans, instants, counter samples) are
    /// kept; past it the timeline ends where the run was when it filled,
    /// and says so.
    pub max_events: usize,
}

impl Timeline {
    /// The default cap: about 40 MB of JSON.
    pub const DEFAULT_MAX: usize = 400_000;
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            max_events: Timeline::DEFAULT_MAX,
        }
    }
}

/// One end of a link, as the timeline needs it.
#[derive(Debug, Clone)]
struct LinkInfo {
    /// The hosts at each end (`None`: a switch), `[a, b]`.
    host: [Option<u32>; 2],
    /// The ends' names, `[a, b]`.
    name: [String; 2],
    bps: u64,
    latency_ps: u64,
}

/// An instant on a host or the fabric.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Mark {
    t: u64,
    /// The host (`u32::MAX`: the fabric).
    host: u32,
    name: &'static str,
    /// What it was about, as JSON object members.
    args: String,
}

/// What the trace has shown so far.
#[derive(Debug, Default)]
struct Seen {
    links: Vec<LinkInfo>,
    /// Packets inside the fabric: when each reaches the switch it is
    /// going to.
    arriving: BTreeMap<u64, u64>,
    /// Queue changes: (time, port as link × 2 + direction, bytes).
    depth: Vec<(u64, u32, i64)>,
    /// PFC: (time, paused port, pause ends at (0: resumed)).
    pfc: Vec<(u64, u32, u64)>,
    marks: Vec<Mark>,
    /// Data packets each host sent: (host, opcode, msg, seg) → last sent.
    sent: BTreeMap<(u32, u8, u32, u32), u64>,
    /// NACKs each host received, by message: (host, msg) → last arrival.
    nacked: BTreeMap<(u32, u32), u64>,
    /// Per link, a duplicate fault on a host's own egress: the packet it
    /// struck and how many copies are still to go out. The copies leave
    /// just ahead of it, with its opcode, message and segment: they are
    /// not the host's retransmissions.
    host_copies: BTreeMap<u32, (u64, u64)>,
    kept: usize,
    max: usize,
    /// When the cap was reached (the trace's time then).
    full_at: Option<u64>,
    /// When the packets sent grew past [`SENT_MAX`].
    untracked_at: Option<u64>,
    last_t: u64,
    pfc_ports: BTreeSet<u32>,
}

/// The timeline's view of the run, shared by its trace sink and the
/// runner that writes the file at the end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recording(Arc<Mutex<Seen>>);

/// The trace sink that reads the events as the world writes them
/// (postcard) and passes them on to the trace file asked for, if any,
/// in its own format.
pub(crate) struct Sink {
    seen: Recording,
    buf: Vec<u8>,
    inner: Option<(TraceFormat, Box<dyn Write + Send>)>,
}

const OP_NACK: u8 = 0x12;
/// WRITE and SEND data, and READ requests: what a host sends under its
/// own message ids (a READ response carries its requester's, which
/// another requester may use too, so its copies are not told apart).
const DATA: [u8; 3] = [0x01, 0x02, 0x04];
/// Data packets followed for retransmissions (some 50 MB of map at most).
const SENT_MAX: usize = 1 << 20;
/// Bytes a link adds to each datagram on the wire (as the fabric counts).
const WIRE: u64 = udrma_fabric::WIRE_OVERHEAD;

impl Recording {
    /// A recording over `topo`, keeping at most `spec.max_events`.
    pub(crate) fn new(topo: &Topology, spec: Timeline) -> Recording {
        let end = |n: u32| {
            let node = &topo.nodes[n as usize];
            (topo.host_addr(n).map(|a| a.0), node.name.clone())
        };
        let links = topo
            .links
            .iter()
            .map(|l| {
                let (ha, na) = end(l.a);
                let (hb, nb) = end(l.b);
                LinkInfo {
                    host: [ha, hb],
                    name: [na, nb],
                    bps: l.params.bandwidth_bps.max(1),
                    latency_ps: l.params.latency.as_ps(),
                }
            })
            .collect();
        Recording(Arc::new(Mutex::new(Seen {
            links,
            max: spec.max_events,
            ..Seen::default()
        })))
    }

    /// The sink to give the world, passing events on to `inner`.
    pub(crate) fn sink(&self, inner: Option<(TraceFormat, Box<dyn Write + Send>)>) -> Sink {
        Sink {
            seen: self.clone(),
            buf: Vec::new(),
            inner,
        }
    }

    /// The file's text: the events seen, the operations' spans, and a
    /// note on anything left out.
    /// `timeouts`: the NICs' retransmit timeouts (host, picoseconds,
    /// message id).
    pub(crate) fn json(
        &self,
        n_hosts: usize,
        ops: &[OpSpan],
        timeouts: &[(u32, u64, u32)],
        end_ps: u64,
    ) -> String {
        let mut seen = match self.0.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        // Each NIC bounds its own record; those before a cut are all kept.
        let cut = seen.full_at.unwrap_or(u64::MAX);
        for &(host, t, msg) in timeouts {
            if t < cut {
                seen.marks.push(Mark {
                    t,
                    host,
                    name: "retransmit timeout",
                    args: format!("\"msg\":{msg}"),
                });
            }
        }
        seen.json(n_hosts, ops, end_ps)
    }
}

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        let mut rest: &[u8] = &self.buf;
        let mut events = Vec::new();
        while !rest.is_empty() {
            match postcard::take_from_bytes::<TraceEvent>(rest) {
                Ok((ev, tail)) => {
                    events.push(ev);
                    rest = tail;
                }
                Err(postcard::Error::DeserializeUnexpectedEnd) => break,
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
        let used = self.buf.len() - rest.len();
        if let Some((format, inner)) = self.inner.as_mut() {
            match format {
                TraceFormat::Postcard => inner.write_all(&self.buf[..used])?,
                TraceFormat::JsonLines => {
                    for ev in &events {
                        serde_json::to_writer(&mut *inner, ev).map_err(std::io::Error::other)?;
                        inner.write_all(b"\n")?;
                    }
                }
            }
        }
        self.buf.drain(..used);
        let mut seen = match self.seen.0.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        for ev in &events {
            seen.event(ev);
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.inner.as_mut() {
            Some((_, inner)) => inner.flush(),
            None => Ok(()),
        }
    }
}

/// Picoseconds as microseconds with six decimals, exactly.
fn us(ps: u64) -> String {
    format!("{}.{:06}", ps / 1_000_000, ps % 1_000_000)
}

/// `s` as a JSON string.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

impl Seen {
    /// Whether one more event fits; marks the timeline full if not.
    fn room(&mut self, n: usize) -> bool {
        if self.full_at.is_some() {
            return false;
        }
        if self.kept + n > self.max {
            self.full_at = Some(self.last_t);
            return false;
        }
        self.kept += n;
        true
    }

    /// The wire time of `len` bytes on `link`, in picoseconds.
    fn wire_ps(&self, link: usize, len: u64) -> u64 {
        let bps = self.links[link].bps;
        ((u128::from(len + WIRE) * 8 * 1_000_000_000_000) / u128::from(bps)) as u64
    }

    fn event(&mut self, ev: &TraceEvent) {
        if self.full_at.is_some() {
            // Nothing more is kept: what the maps hold is let go.
            if !self.sent.is_empty() || !self.arriving.is_empty() {
                self.sent = BTreeMap::new();
                self.arriving = BTreeMap::new();
                self.nacked = BTreeMap::new();
                self.host_copies = BTreeMap::new();
            }
            return;
        }
        match *ev {
            TraceEvent::Tx {
                t,
                link,
                dir,
                pkt,
                opcode,
                msg,
                seg,
                len,
            } => {
                self.last_t = self.last_t.max(t);
                self.tx(t, link, dir, pkt, (opcode, msg, seg), u64::from(len));
            }
            TraceEvent::Drop {
                t,
                link,
                pkt,
                reason,
            } => {
                self.last_t = self.last_t.max(t);
                self.arriving.remove(&pkt);
                let name = self
                    .links
                    .get(link as usize)
                    .map_or("?".into(), |l| format!("{}-{}", l.name[0], l.name[1]));
                if self.room(1) {
                    self.marks.push(Mark {
                        t,
                        host: u32::MAX,
                        name: "drop",
                        args: format!(
                            "\"reason\":{},\"link\":{},\"pkt\":{pkt}",
                            quoted(&format!("{reason:?}")),
                            quoted(&name)
                        ),
                    });
                }
            }
            TraceEvent::Fault {
                pkt, kind: 2, arg, ..
            } => {
                if let Some(at) = self.arriving.get_mut(&pkt) {
                    *at += arg;
                }
            }
            // Not yet in the fabric: struck at its host's egress.
            TraceEvent::Fault {
                pkt,
                kind: 1,
                arg,
                link,
                ..
            } if !self.arriving.contains_key(&pkt) => {
                self.host_copies.insert(link, (pkt, arg));
            }
            TraceEvent::Pfc {
                t,
                link,
                dir,
                quanta,
                ..
            } => self.pause(t, link, dir, quanta),
            _ => {}
        }
    }

    /// A packet starts on `link` in direction `dir` at `t`.
    fn tx(&mut self, t: u64, link: u32, dir: u8, pkt: u64, what: (u8, u32, u32), len: u64) {
        let l = link as usize;
        let Some(info) = self.links.get(l) else {
            return;
        };
        let d = usize::from(dir & 1);
        let (from_host, to_host) = (info.host[d], info.host[1 - d]);
        let arrive = t + self.wire_ps(l, len) + info.latency_ps;
        let port = link * 2 + u32::from(dir & 1);
        match from_host {
            None => {
                if let Some(came) = self.arriving.remove(&pkt) {
                    if t > came && self.room(2) {
                        self.depth.push((came, port, len as i64));
                        self.depth.push((t, port, -(len as i64)));
                    }
                }
            }
            Some(h) => match self.host_copies.get_mut(&link) {
                Some((orig, left)) if *orig != pkt && *left > 0 => {
                    *left -= 1;
                    if self.room(1) {
                        self.marks.push(Mark {
                            t,
                            host: h,
                            name: "duplicate (fault)",
                            args: format!("\"msg\":{},\"seg\":{}", what.1, what.2),
                        });
                    }
                }
                Some((orig, _)) if *orig == pkt => {
                    self.host_copies.remove(&link);
                    self.host_sent(t, h, what);
                }
                _ => self.host_sent(t, h, what),
            },
        }
        match to_host {
            None => {
                self.arriving.insert(pkt, arrive);
            }
            // Bounded like the packets followed: past it, a NACK for a
            // message not yet seen is not remembered.
            Some(h)
                if what.0 == OP_NACK
                    && (self.nacked.len() < SENT_MAX || self.nacked.contains_key(&(h, what.1))) =>
            {
                let e = self.nacked.entry((h, what.1)).or_insert(arrive);
                *e = (*e).max(arrive);
            }
            Some(_) => {}
        }
    }

    /// Host `h` puts a packet on its link at `t`.
    fn host_sent(&mut self, t: u64, h: u32, (opcode, msg, seg): (u8, u32, u32)) {
        if opcode == OP_NACK {
            if self.room(1) {
                self.marks.push(Mark {
                    t,
                    host: h,
                    name: "NACK sent",
                    args: format!("\"msg\":{msg},\"seg\":{seg}"),
                });
            }
            return;
        }
        if !DATA.contains(&opcode) {
            return;
        }
        let key = (h, opcode, msg, seg);
        if self.sent.len() >= SENT_MAX && !self.sent.contains_key(&key) {
            // Memory, not events, bounds this map: packets first sent
            // from here on are not followed.
            self.untracked_at.get_or_insert(t);
            return;
        }
        let Some(before) = self.sent.insert(key, t) else {
            return;
        };
        let after_nack = self.nacked.get(&(h, msg)).is_some_and(|n| *n > before);
        let name = if after_nack {
            "retransmit after NACK"
        } else {
            "retransmit (timeout or SACK gap)"
        };
        if self.room(1) {
            self.marks.push(Mark {
                t,
                host: h,
                name,
                args: format!(
                    "\"msg\":{msg},\"seg\":{seg},\"first_sent_us\":{}",
                    us(before)
                ),
            });
        }
    }

    /// A PFC frame starts back over `link` in direction `dir`: it pauses
    /// (or, with no quanta, resumes) the far end's port the other way.
    fn pause(&mut self, t: u64, link: u32, dir: u8, quanta: u16) {
        let l = link as usize;
        let Some(info) = self.links.get(l) else {
            return;
        };
        let arrive = t + self.wire_ps(l, udrma_fabric::PFC_WIRE_BYTES - WIRE) + info.latency_ps;
        let port = link * 2 + u32::from(1 - (dir & 1));
        let until = if quanta == 0 {
            0
        } else {
            let bits = u128::from(quanta) * 512 * 1_000_000_000_000;
            arrive + (bits / u128::from(info.bps)) as u64
        };
        self.pfc_ports.insert(port);
        if self.room(2) {
            self.pfc.push((arrive, port, until));
        }
    }
}

/// The JSON writer's running state: the text and the events written.
struct Out {
    text: String,
    first: bool,
    /// Past this time nothing is written (the cap's cut).
    cut: u64,
}

impl Out {
    /// Writes one event (its JSON members) if it is not past the cut.
    fn event(&mut self, t: u64, members: &str) {
        if t > self.cut {
            return;
        }
        self.meta(&format!("\"ts\":{},{members}", us(t)));
    }

    /// Writes one event that has no time (metadata).
    fn meta(&mut self, members: &str) {
        self.text.push_str(if self.first { "\n{" } else { ",\n{" });
        self.first = false;
        self.text.push_str(members);
        self.text.push('}');
    }
}

impl Seen {
    fn json(&self, n_hosts: usize, ops: &[OpSpan], end_ps: u64) -> String {
        let fabric = n_hosts as u32 + 1;
        let mut out = Out {
            text: String::from("{\"traceEvents\":["),
            first: true,
            cut: self.full_at.unwrap_or(u64::MAX),
        };
        for h in 0..n_hosts as u32 {
            let pid = h + 1;
            out.meta(&format!(
                "\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_name\",\"args\":{{\"name\":\"h{h}\"}}"
            ));
            out.meta(&format!(
                "\"ph\":\"M\",\"pid\":{pid},\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{pid}}}"
            ));
            out.meta(&format!(
                "\"ph\":\"M\",\"pid\":{pid},\"tid\":0,\"name\":\"thread_name\",\"args\":{{\"name\":\"events\"}}"
            ));
        }
        out.meta(&format!(
            "\"ph\":\"M\",\"pid\":{fabric},\"name\":\"process_name\",\"args\":{{\"name\":\"fabric\"}}"
        ));
        // Every operation posted before a cut is drawn, up to the cap
        // again: spans are not crowded out by the packets' events.
        let spans = spans(&mut out, ops, self.max, end_ps);
        let mut marks: Vec<&Mark> = self.marks.iter().collect();
        marks.sort();
        for m in marks {
            let (pid, tid) = match m.host {
                u32::MAX => (fabric, 0),
                h => (h + 1, 0),
            };
            out.event(
                m.t,
                &format!(
                    "\"ph\":\"i\",\"s\":\"t\",\"pid\":{pid},\"tid\":{tid},\"name\":{},\"args\":{{{}}}",
                    quoted(m.name),
                    m.args
                ),
            );
        }
        self.queues(&mut out, fabric);
        self.pauses(&mut out, fabric, end_ps);
        let mut note = String::new();
        if let Some(at) = self.full_at {
            let _ = write!(
                note,
                "cut at {} us: the cap of {} events was reached (udrma run --timeline-max)",
                us(at),
                self.max
            );
        }
        if let Some(at) = self.untracked_at {
            let _ = write!(
                note,
                "{}retransmits of packets first sent from {} us on are not shown ({SENT_MAX} packets followed)",
                if note.is_empty() { "" } else { "; " },
                us(at)
            );
        }
        if spans < ops.len() {
            let _ = write!(
                note,
                "{}{} of {} operations shown",
                if note.is_empty() { "" } else { "; " },
                spans,
                ops.len()
            );
        }
        let _ = write!(
            out.text,
            "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"clock\":\"simulated\",\"end_us\":{},\"note\":{}}}}}\n",
            us(end_ps),
            quoted(&note)
        );
        out.text
    }

    /// Per switch port, its queue depth in bytes at every change.
    fn queues(&self, out: &mut Out, fabric: u32) {
        let mut by_port: BTreeMap<u32, Vec<(u64, i64)>> = BTreeMap::new();
        for &(t, port, d) in &self.depth {
            by_port.entry(port).or_default().push((t, d));
        }
        for (port, mut changes) in by_port {
            changes.sort_unstable();
            let name = self.port_name(port);
            let mut depth: i64 = 0;
            let mut i = 0;
            while i < changes.len() {
                let t = changes[i].0;
                while i < changes.len() && changes[i].0 == t {
                    depth += changes[i].1;
                    i += 1;
                }
                out.event(
                    t,
                    &format!(
                        "\"ph\":\"C\",\"pid\":{fabric},\"name\":{},\"args\":{{\"bytes\":{}}}",
                        quoted(&format!("queue {name}")),
                        depth.max(0)
                    ),
                );
            }
        }
    }

    /// Per paused port, 1 while PFC pauses it and 0 once it may send.
    fn pauses(&self, out: &mut Out, fabric: u32, end_ps: u64) {
        let mut by_port: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for &(t, port, until) in &self.pfc {
            by_port.entry(port).or_default().push((t, until));
        }
        for (port, mut frames) in by_port {
            frames.sort_unstable();
            let name = quoted(&format!("pfc pause {}", self.port_name(port)));
            let sample = |out: &mut Out, t: u64, v: u8| {
                out.event(
                    t,
                    &format!(
                        "\"ph\":\"C\",\"pid\":{fabric},\"name\":{name},\"args\":{{\"paused\":{v}}}"
                    ),
                );
            };
            let mut expires: Option<u64> = None;
            for (t, until) in frames {
                if let Some(e) = expires.take_if(|e| *e < t) {
                    sample(out, e, 0);
                }
                if until == 0 {
                    if expires.take().is_some() {
                        sample(out, t, 0);
                    }
                } else {
                    if expires.is_none() {
                        sample(out, t, 1);
                    }
                    expires = Some(until);
                }
            }
            if let Some(e) = expires {
                sample(out, e.min(end_ps), 0);
            }
        }
    }

    /// `s1→h3`: the port's node and the node it sends to.
    fn port_name(&self, port: u32) -> String {
        let d = (port & 1) as usize;
        match self.links.get((port / 2) as usize) {
            Some(l) => format!("{}→{}", l.name[d], l.name[1 - d]),
            None => format!("port {port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// h0 - s0 - h1 at 100 Gb/s and 1 µs a hop.
    fn two_hops(max: usize) -> Seen {
        let link = |a: &str, ha: Option<u32>| LinkInfo {
            host: [ha, None],
            name: [a.into(), "s0".into()],
            bps: 100_000_000_000,
            latency_ps: 1_000_000,
        };
        Seen {
            links: vec![link("h0", Some(0)), link("h1", Some(1))],
            max,
            ..Seen::default()
        }
    }

    fn tx(t: u64, link: u32, dir: u8, pkt: u64, seg: u32) -> TraceEvent {
        TraceEvent::Tx {
            t,
            link,
            dir,
            pkt,
            opcode: 0x01,
            msg: 7,
            seg,
            len: 1000,
        }
    }

    #[test]
    fn a_packet_waits_in_the_queue_from_its_arrival_to_its_start() {
        let mut s = two_hops(100);
        // 1000 B + the wire's overhead at 10 ps a bit, then 1 µs.
        let arrive = (1000 + WIRE) * 80 + 1_000_000;
        s.event(&tx(0, 0, 0, 1, 0));
        s.event(&tx(arrive + 500, 1, 1, 1, 0));
        assert_eq!(s.depth, [(arrive, 3, 1000), (arrive + 500, 3, -1000)]);
        // One that starts as it arrives never waits.
        s.event(&tx(10, 0, 0, 2, 1));
        s.event(&tx(arrive + 10, 1, 1, 2, 1));
        assert_eq!(s.depth.len(), 2);
        // Sent again by h0: a retransmission, at its time.
        s.event(&tx(9_000_000, 0, 0, 3, 0));
        assert_eq!(s.marks.len(), 1);
        assert_eq!(s.marks[0].t, 9_000_000);
        assert_eq!(s.marks[0].host, 0);
        let text = s.json(2, &[], 10_000_000);
        assert_eq!(text.matches("\"ph\":\"C\"").count(), 2, "{text}");
        for (t, bytes) in [(arrive, 1000), (arrive + 500, 0)] {
            let want = format!(
                "{{\"ts\":{},\"ph\":\"C\",\"pid\":3,\"name\":\"queue s0→h1\",\"args\":{{\"bytes\":{bytes}}}}}",
                us(t)
            );
            assert!(text.contains(&want), "{want} not in {text}");
        }
    }

    #[test]
    fn a_pause_holds_until_its_resume_or_its_expiry() {
        let mut s = two_hops(100);
        s.event(&TraceEvent::Pfc {
            t: 0,
            link: 0,
            dir: 1,
            priority: 3,
            quanta: 1000,
        });
        s.event(&TraceEvent::Pfc {
            t: 2_000_000,
            link: 0,
            dir: 1,
            priority: 3,
            quanta: 0,
        });
        // Another pause nobody resumes: it expires after 100 × 512 bits.
        s.event(&TraceEvent::Pfc {
            t: 5_000_000,
            link: 0,
            dir: 1,
            priority: 3,
            quanta: 100,
        });
        let text = s.json(2, &[], 100_000_000);
        let arrive = |t: u64| t + (udrma_fabric::PFC_WIRE_BYTES * 80) + 1_000_000;
        let want = [
            (arrive(0), 1),
            (arrive(2_000_000), 0),
            (arrive(5_000_000), 1),
            (arrive(5_000_000) + 100 * 512 * 10, 0),
        ]
        .map(|(t, v)| format!("{{\"ts\":{},\"ph\":\"C\",\"pid\":3,\"name\":\"pfc pause h0→s0\",\"args\":{{\"paused\":{v}}}}}", us(t)));
        for w in &want {
            assert!(text.contains(w.as_str()), "{w} not in {text}");
        }
    }

    #[test]
    fn the_cap_stops_the_timeline_and_says_where() {
        let mut s = two_hops(1);
        s.event(&tx(0, 0, 0, 1, 0));
        s.event(&tx(1_000_000, 0, 0, 2, 0));
        s.event(&tx(2_000_000, 0, 0, 3, 0));
        assert_eq!(s.marks.len(), 1);
        assert_eq!(s.full_at, Some(2_000_000));
        let text = s.json(1, &[], 3_000_000);
        assert!(text.contains("cut at 2.000000 us"), "{text}");
    }

    #[test]
    fn microseconds_are_exact() {
        assert_eq!(us(0), "0.000000");
        assert_eq!(us(1_234_567_891), "1234.567891");
    }
}
