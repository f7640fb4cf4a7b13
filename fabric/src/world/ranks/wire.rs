//! What ranks send each other, as bytes: the message of a window (the
//! sender's next event, the earliest arrival among the packets it hands
//! on, the packets for the receiver's lines, and for rank 0 the
//! sender's node runs), the greeting at the start and the figures at
//! the end. Little-endian, fixed widths, no padding; a reader names the
//! byte where a message stops making sense instead of panicking.

use super::super::mail::Mail;
use super::super::port_state::InFlight;
use super::super::windows;
use super::super::*;
use crate::trace::RunDigest;

/// Bytes of a packet's fields before its datagram's.
const FLIGHT: usize = 8 + 8 + 4 + 4 + 2 + 2 + 4 + 1 + 4;

/// Writes the fields of a message.
#[derive(Debug, Default)]
pub(super) struct Writer {
    pub(super) bytes: Vec<u8>,
}

impl Writer {
    /// A writer in `room` (emptied) with space for `bytes` bytes.
    pub(super) fn reusing(mut room: Vec<u8>, bytes: usize) -> Writer {
        room.clear();
        room.reserve(bytes);
        Writer { bytes: room }
    }

    /// The bytes [`Writer::mail`] writes for `m`.
    pub(super) fn mail_len(m: &Mail) -> usize {
        let flights = |f: &InFlight| FLIGHT + f.pkt.bytes.len();
        8 + m.line.iter().map(|(_, f)| 4 + flights(f)).sum::<usize>()
            + m.ahead
                .iter()
                .map(|(_, _, f)| 20 + flights(f))
                .sum::<usize>()
    }

    pub(super) fn u8(&mut self, x: u8) {
        self.bytes.push(x);
    }
    pub(super) fn u16(&mut self, x: u16) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
    pub(super) fn u32(&mut self, x: u32) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
    pub(super) fn u64(&mut self, x: u64) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
    fn u128(&mut self, x: u128) {
        self.bytes.extend_from_slice(&x.to_le_bytes());
    }
    /// A time or none: a flag byte, then the time if there is one.
    pub(super) fn time(&mut self, t: Option<Instant>) {
        match t {
            Some(t) => {
                self.u8(1);
                self.u64(t.as_ps());
            }
            None => self.u8(0),
        }
    }
    /// A length-prefixed run of bytes.
    pub(super) fn blob(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.bytes.extend_from_slice(b);
    }
    fn flight(&mut self, f: &InFlight) {
        let p = &f.pkt;
        self.u64(f.arrive.as_ps());
        self.u64(p.serial);
        self.u32(p.src.0);
        self.u32(p.dst.0);
        self.u16(p.src_port);
        self.u16(p.elided);
        self.u32(p.nic_work_ps);
        self.u8(u8::from(p.ce) | u8::from(p.trimmed) << 1);
        self.blob(&p.bytes);
    }
    /// The packets for one rank's lines.
    pub(super) fn mail(&mut self, m: &Mail) {
        self.u32(m.line.len() as u32);
        for (i, (port, f)) in m.line.iter().enumerate() {
            // A kept packet's datagram was written windows ago: cold.
            if let Some((_, ahead)) = m.line.get(i + WRITE_AHEAD) {
                windows::prefetch_bytes(&ahead.pkt);
            }
            self.u32(*port);
            self.flight(f);
        }
        self.u32(m.ahead.len() as u32);
        for (port, key, f) in &m.ahead {
            self.u32(*port);
            self.u128(*key);
            self.flight(f);
        }
    }
    /// Node runs (for rank 0).
    pub(super) fn runs(&mut self, runs: &[RunDigest]) {
        self.u32(runs.len() as u32);
        for (node, digest, n) in runs {
            self.u32(*node);
            self.u64(*digest);
            self.u64(*n);
        }
    }
}

/// How many packets ahead [`Writer::mail`] asks for a datagram.
const WRITE_AHEAD: usize = 4;

/// Reads the fields of a message from rank `from`.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    from: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn new(bytes: &'a [u8], from: usize) -> Reader<'a> {
        Reader { bytes, at: 0, from }
    }

    fn bad(&self, what: &str) -> String {
        format!(
            "rank {}'s message is malformed at byte {} of {}: {what}",
            self.from,
            self.at,
            self.bytes.len()
        )
    }

    #[inline]
    fn take<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let b = self
            .bytes
            .get(self.at..self.at + N)
            .ok_or_else(|| self.bad(&format!("{what} runs past the end")))?;
        self.at += N;
        Ok(b.try_into().expect("N bytes"))
    }
    #[inline]
    pub(super) fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take::<1>(what)?[0])
    }
    #[inline]
    pub(super) fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(what)?))
    }
    #[inline]
    pub(super) fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(what)?))
    }
    #[inline]
    fn u128(&mut self, what: &str) -> Result<u128, String> {
        Ok(u128::from_le_bytes(self.take(what)?))
    }
    pub(super) fn time(&mut self, what: &str) -> Result<Option<Instant>, String> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => Ok(Some(Instant(self.u64(what)?))),
            x => Err(self.bad(&format!("{what}: flag {x}, not 0 or 1"))),
        }
    }
    pub(super) fn blob(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u32(what)? as usize;
        self.run(n, what)
    }
    /// The next `n` bytes.
    #[inline(always)]
    fn run(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        match self.bytes.get(self.at..self.at.saturating_add(n)) {
            Some(b) => {
                self.at += n;
                Ok(b)
            }
            None => Err(self.past_end(n, what)),
        }
    }
    /// Why `n` bytes cannot be read (out of line: every datagram is read
    /// through [`Reader::run`], and with the message built here it was
    /// not inlined).
    #[cold]
    #[inline(never)]
    fn past_end(&self, n: usize, what: &str) -> String {
        self.bad(&format!("{what}: {n} bytes run past the end"))
    }
    /// A count of items, each at least `least` bytes long: refused if
    /// the rest of the message cannot hold them (so no room is made for
    /// a count a message does not back).
    fn count(&mut self, what: &str, least: usize) -> Result<usize, String> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(least) > self.bytes.len() - self.at {
            return Err(self.bad(&format!("{n} {what} cannot fit")));
        }
        Ok(n)
    }
    /// A packet, its datagram copied into room from `pool` if it has any.
    /// Its fixed fields are taken at once, with one bounds check: read
    /// field by field, each with its own, reading took several times as
    /// long as writing (docs/benchmarks.md, "Runs on MPI ranks").
    #[inline]
    fn flight(&mut self, pool: &mut Vec<Vec<u8>>) -> Result<InFlight, String> {
        let f: [u8; FLIGHT] = self.take("a packet's header")?;
        let le = |at: usize, n: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&f[at..at + n]);
            u64::from_le_bytes(b)
        };
        let arrive = Instant(le(0, 8));
        let serial = le(8, 8);
        let src = NodeAddr(le(16, 4) as u32);
        let dst = NodeAddr(le(20, 4) as u32);
        let src_port = le(24, 2) as u16;
        let elided = le(26, 2) as u16;
        let nic_work_ps = le(28, 4) as u32;
        let marks = f[32];
        if marks > 3 {
            // Name the marks' own byte.
            self.at -= FLIGHT - 32;
            return Err(self.bad(&format!("marks {marks:#x}")));
        }
        let blob = self.run(le(33, 4) as usize, "datagram")?;
        // Read from the message, not the copy: the copy's room is cold,
        // and reading it back at once waited for it (4 % of a rank).
        let head = Head::of(blob);
        let mut bytes = pool.pop().unwrap_or_default();
        if let Some(b) = pool.len().checked_sub(6).and_then(|i| pool.get(i)) {
            crate::prefetch::prefetch(b.as_ptr());
            crate::prefetch::prefetch(b.as_ptr().wrapping_add(64));
        }
        bytes.clear();
        bytes.extend_from_slice(blob);
        Ok(InFlight {
            arrive,
            pkt: Pkt {
                serial,
                src,
                dst,
                src_port,
                head,
                bytes,
                elided,
                nic_work_ps,
                ce: marks & 1 != 0,
                trimmed: marks & 2 != 0,
            },
        })
    }
    /// The packets for this rank's lines; each port must be below
    /// `ports`.
    #[cfg(test)]
    pub(super) fn mail(&mut self, ports: usize) -> Result<Mail, String> {
        let mut mail = Mail::default();
        self.mail_each(ports, &mut Vec::new(), &mut |p, key, f| match key {
            None => mail.line.push((p, f)),
            Some(k) => mail.ahead.push((p, k, f)),
        })?;
        Ok(mail)
    }
    /// The same, each packet handed to `take` as it is read (with its
    /// key if it went ahead of a queue): no list in between. Datagrams
    /// are copied into room taken from `pool` while it lasts.
    pub(super) fn mail_each(
        &mut self,
        ports: usize,
        pool: &mut Vec<Vec<u8>>,
        take: &mut dyn FnMut(PortId, Option<u128>, InFlight),
    ) -> Result<(), String> {
        let port = |r: &mut Self| -> Result<PortId, String> {
            let p = r.u32("port")?;
            if p as usize >= ports {
                return Err(r.bad(&format!("port {p} of {ports}")));
            }
            Ok(p)
        };
        let n = self.count("packets on lines", 4 + FLIGHT)?;
        for _ in 0..n {
            let p = port(self)?;
            take(p, None, self.flight(pool)?);
        }
        let n = self.count("packets ahead of queues", 4 + 16 + FLIGHT)?;
        for _ in 0..n {
            let p = port(self)?;
            let key = self.u128("key")?;
            take(p, Some(key), self.flight(pool)?);
        }
        Ok(())
    }
    /// Node runs, into `runs` (emptied first, its room used again).
    pub(super) fn runs(&mut self, runs: &mut Vec<RunDigest>) -> Result<(), String> {
        let n = self.count("node runs", 20)?;
        runs.clear();
        runs.reserve(n);
        for _ in 0..n {
            runs.push((self.u32("node")?, self.u64("digest")?, self.u64("events")?));
        }
        Ok(())
    }
    /// The message must end here.
    pub(super) fn end(&self) -> Result<(), String> {
        if self.at != self.bytes.len() {
            return Err(self.bad("bytes left over"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flight(bytes: Vec<u8>) -> InFlight {
        InFlight {
            arrive: Instant(0x0102),
            pkt: Pkt {
                serial: 7,
                src: NodeAddr(1),
                dst: NodeAddr(2),
                src_port: 0xc000,
                head: Head::of(&bytes),
                bytes,
                elided: 3,
                nic_work_ps: 9,
                ce: true,
                trimmed: false,
            },
        }
    }

    /// One packet on a line, byte for byte: port, arrival, serial,
    /// source, destination, source port, elided length, NIC work, marks,
    /// then the datagram with its length.
    #[test]
    fn a_packet_on_a_line_is_these_bytes() {
        let mut w = Writer::default();
        let mail = Mail {
            line: vec![(5, flight(vec![0xaa, 0xbb]))],
            ahead: vec![],
        };
        w.mail(&mail);
        #[rustfmt::skip]
        let want: Vec<u8> = vec![
            1, 0, 0, 0,                 // one packet on a line
            5, 0, 0, 0,                 // port 5
            0x02, 0x01, 0, 0, 0, 0, 0, 0, // arrives at 0x0102 ps
            7, 0, 0, 0, 0, 0, 0, 0,     // serial 7
            1, 0, 0, 0,                 // from h1
            2, 0, 0, 0,                 // to h2
            0x00, 0xc0,                 // source port 0xc000
            3, 0,                       // 3 zero bytes elided
            9, 0, 0, 0,                 // 9 ps of NIC work
            1,                          // marked CE, not trimmed
            2, 0, 0, 0, 0xaa, 0xbb,     // the datagram
            0, 0, 0, 0,                 // nothing ahead of a queue
        ];
        assert_eq!(w.bytes, want);
        let mut r = Reader::new(&w.bytes, 1);
        let back = r.mail(6).unwrap();
        r.end().unwrap();
        let (port, f) = &back.line[0];
        assert_eq!(*port, 5);
        assert_eq!(f.arrive, Instant(0x0102));
        assert_eq!(
            (f.pkt.serial, f.pkt.src, f.pkt.dst, f.pkt.src_port),
            (7, NodeAddr(1), NodeAddr(2), 0xc000)
        );
        assert_eq!((f.pkt.elided, f.pkt.nic_work_ps), (3, 9));
        assert!(f.pkt.ce && !f.pkt.trimmed);
        assert_eq!(f.pkt.bytes, [0xaa, 0xbb]);
    }

    /// Every combination of the two marks reads back as written.
    #[test]
    fn both_marks_read_back_in_every_combination() {
        for (ce, trimmed) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut f = flight(vec![3; 12]);
            f.pkt.ce = ce;
            f.pkt.trimmed = trimmed;
            let mut w = Writer::default();
            w.mail(&Mail {
                line: vec![(0, f)],
                ahead: vec![],
            });
            let back = Reader::new(&w.bytes, 0).mail(1).unwrap();
            let p = &back.line[0].1.pkt;
            assert_eq!((p.ce, p.trimmed), (ce, trimmed));
        }
    }

    /// A packet read into room the pool gives back holds its own bytes
    /// and header only, whatever the room held before; the pool gives
    /// what it has, then reading makes room.
    #[test]
    fn a_packet_read_into_used_room_is_its_own() {
        let datagram: Vec<u8> = (0..64).collect();
        let mut w = Writer::default();
        w.mail(&Mail {
            line: vec![(0, flight(datagram.clone())), (1, flight(vec![4; 5]))],
            ahead: vec![],
        });
        let mut pool = vec![vec![0xee; 100]];
        let mut got = Vec::new();
        Reader::new(&w.bytes, 0)
            .mail_each(2, &mut pool, &mut |p, _, f| got.push((p, f)))
            .unwrap();
        assert!(pool.is_empty());
        assert_eq!(got[0].1.pkt.bytes, datagram);
        assert_eq!(got[0].1.pkt.bytes.capacity(), 100, "the pool's room");
        assert_eq!(got[1].1.pkt.bytes, vec![4; 5]);
        let (head, own) = (got[0].1.pkt.head, Head::of(&datagram));
        assert!(own.opcode.is_some());
        assert_eq!(
            (head.opcode, head.flags, head.msg, head.seg),
            (own.opcode, own.flags, own.msg, own.seg)
        );
    }

    /// What a message is sized for before it is written is what it takes.
    #[test]
    fn a_mail_is_sized_before_it_is_written() {
        let mail = Mail {
            line: vec![(5, flight(vec![0xaa, 0xbb])), (1, flight(vec![7; 300]))],
            ahead: vec![(2, 9, flight(vec![1; 40]))],
        };
        let mut w = Writer::default();
        w.mail(&mail);
        assert_eq!(Writer::mail_len(&mail), w.bytes.len());
        assert_eq!(Writer::mail_len(&Mail::default()), 8);
    }

    /// Packets ahead of a queue carry their arrival's key, and node runs
    /// read back as written.
    #[test]
    fn keys_and_runs_read_back() {
        let mut w = Writer::default();
        let mail = Mail {
            line: vec![],
            ahead: vec![(2, u128::MAX - 1, flight(vec![1; 40]))],
        };
        w.mail(&mail);
        w.runs(&[(3, 0xfeed, 12), (9, 1, 1)]);
        w.time(Some(Instant(77)));
        w.time(None);
        let mut r = Reader::new(&w.bytes, 0);
        let back = r.mail(3).unwrap();
        assert_eq!(back.ahead[0].0, 2);
        assert_eq!(back.ahead[0].1, u128::MAX - 1);
        assert_eq!(back.ahead[0].2.pkt.bytes, vec![1; 40]);
        let mut runs = vec![(1, 1, 1)];
        r.runs(&mut runs).unwrap();
        assert_eq!(runs, vec![(3, 0xfeed, 12), (9, 1, 1)]);
        assert_eq!(r.time("t").unwrap(), Some(Instant(77)));
        assert_eq!(r.time("t").unwrap(), None);
        r.end().unwrap();
    }

    /// A message cut short, with a port out of range, a count it cannot
    /// back, a bad flag or bytes left over is refused, naming the rank
    /// and the byte; never a panic.
    #[test]
    fn malformed_messages_are_refused_by_rank_and_byte() {
        let mut w = Writer::default();
        w.mail(&Mail {
            line: vec![(5, flight(vec![0xaa, 0xbb]))],
            ahead: vec![],
        });
        let whole = w.bytes.clone();
        for cut in 0..whole.len() {
            let e = Reader::new(&whole[..cut], 2).mail(6).unwrap_err();
            assert!(
                e.starts_with("rank 2's message is malformed at byte"),
                "{e}"
            );
        }
        let e = Reader::new(&whole, 2).mail(5).unwrap_err();
        assert!(e.contains("port 5 of 5"), "{e}");
        let mut huge = whole.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = Reader::new(&huge, 1).mail(6).unwrap_err();
        assert!(e.contains("cannot fit"), "{e}");
        let e = Reader::new(&[7], 3).time("next event").unwrap_err();
        assert!(e.contains("next event: flag 7"), "{e}");
        let mut longer = whole.clone();
        longer.push(0);
        let mut r = Reader::new(&longer, 1);
        r.mail(6).unwrap();
        assert!(r.end().unwrap_err().contains("bytes left over"));
        let mut marks = whole;
        let at = 4 + 4 + 8 + 8 + 4 + 4 + 2 + 2 + 4;
        marks[at] = 4;
        let e = Reader::new(&marks, 1).mail(6).unwrap_err();
        assert!(e.contains("marks 0x4"), "{e}");
        // The byte named is the marks' own.
        assert!(e.contains(&format!("at byte {at} of")), "{e}");
    }
}
