//! `udrma decode`: one line per captured packet.
//!
//! Each line holds the capture time, source and destination (IPv4:port),
//! the packet kind, message id, segment `index/count`, op number, flags,
//! payload length and the kind's own fields. A frame that is not a valid
//! udrma packet gets `BAD: <reason>` instead of (or after) its fields, so a
//! corrupted packet is still recognisable.

use std::fmt::Write as _;
use std::io::{Read, Write};

use udrma_proto::encap::decapsulate;
use udrma_proto::pcap::{CaptureError, PcapSource};
use udrma_proto::{Error, Packet, Repr, HEADER_LEN};

/// What a decode pass saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DecodeSummary {
    /// Frames in the capture.
    pub frames: u64,
    /// Frames that decoded as udrma packets.
    pub ok: u64,
    /// Frames that did not (each printed with `BAD: <reason>`).
    pub bad: u64,
}

/// Why a capture could not be decoded at all.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The capture is not a readable Ethernet pcap, or broke off.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// Writing the output failed.
    #[error("writing output: {0}")]
    Output(std::io::Error),
}

// Not `#[from]`: that would report the inner error twice in error chains.
impl From<std::io::Error> for DecodeError {
    fn from(e: std::io::Error) -> Self {
        DecodeError::Output(e)
    }
}

impl DecodeError {
    /// Whether the reader of our output went away (`udrma decode | head`),
    /// which is not a failure of the decode.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, DecodeError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// The column header line [`decode_capture`] prints first.
pub const HEADER: &str = "       TIME(s)  SOURCE                 DESTINATION            KIND             MSG  SEG        OP          FLAGS                       CR    LEN  DETAIL";

/// Decodes every frame of a pcap read from `input`, writing one line per
/// frame to `out`. Frames whose UDP ports both differ from `port` are
/// reported as not udrma.
pub fn decode_capture<R: Read, W: Write>(
    input: R,
    port: u16,
    out: &mut W,
) -> Result<DecodeSummary, DecodeError> {
    decode_capture_with(input, port, None, out)
}

/// [`decode_capture`], opening sealed datagrams (authenticated mode) with
/// `keys` when given: their tags are verified and their payloads
/// decrypted before they are described. Without keys a sealed datagram
/// shows its security header and its packet headers (which travel in
/// clear), its tag unchecked.
pub fn decode_capture_with<R: Read, W: Write>(
    input: R,
    port: u16,
    keys: Option<&udrma_bridge::secure::KeyRing>,
    out: &mut W,
) -> Result<DecodeSummary, DecodeError> {
    let source = PcapSource::new(input)?;
    let mut summary = DecodeSummary::default();
    writeln!(out, "{HEADER}")?;
    let mut line = String::new();
    for frame in source {
        let frame = frame?;
        summary.frames += 1;
        line.clear();
        let ok = describe_frame_with(frame.time_ns, &frame.data, port, keys, &mut line);
        if ok {
            summary.ok += 1;
        } else {
            summary.bad += 1;
        }
        writeln!(out, "{line}")?;
    }
    writeln!(
        out,
        "{} packets, {} udrma, {} bad",
        summary.frames, summary.ok, summary.bad
    )?;
    Ok(summary)
}

fn time(ns: u64) -> String {
    format!(
        "{:>14}",
        format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
    )
}

/// Appends the line for one frame to `line`; returns whether it decoded.
pub fn describe_frame(time_ns: u64, frame: &[u8], port: u16, line: &mut String) -> bool {
    describe_frame_with(time_ns, frame, port, None, line)
}

/// [`describe_frame`] with keys for sealed datagrams (see
/// [`decode_capture_with`]).
pub fn describe_frame_with(
    time_ns: u64,
    frame: &[u8],
    port: u16,
    keys: Option<&udrma_bridge::secure::KeyRing>,
    line: &mut String,
) -> bool {
    let t = time(time_ns);
    if frame.get(12..14) == Some(&udrma_proto::pfc::ETHERTYPE_MAC_CONTROL.to_be_bytes()[..]) {
        return describe_pfc(&t, frame, line);
    }
    let d = match decapsulate(frame) {
        Ok(d) => d,
        Err(e) => {
            let _ = write!(line, "{t}  BAD: {e}");
            return false;
        }
    };
    let _ = write!(line, "{t}  {:<21}  {:<21}  ", d.src.addr, d.dst.addr);
    if d.src.addr.port() != port && d.dst.addr.port() != port {
        let _ = write!(
            line,
            "BAD: not udrma (UDP port {} is not {port})",
            d.dst.addr.port()
        );
        return false;
    }
    let mut opened = Vec::new();
    let mut payload = d.payload;
    let mut note = String::new();
    if !d.udp_checksum_ok {
        // What Wireshark calls unverified: offload leaves it unfilled on
        // the capturing host. The ICRC below still judges the datagram.
        note.push_str("  [UDP checksum wrong: offloaded on the capturing host?]");
    }
    if udrma_proto::secure::is_sealed(payload) {
        let Ok(s) = udrma_proto::secure::split(payload) else {
            let _ = write!(line, "BAD: sealed, but too short for its headers");
            return false;
        };
        let (k, seq) = (s.header.key_id, s.header.seq);
        match keys {
            Some(ring) => {
                // A fresh opener per frame: a capture may hold the same
                // datagram twice, and decoding is not receiving.
                let mut sec = udrma_bridge::secure::Secure::with_sender(ring.clone(), [0; 12]);
                if !sec.open(payload, &mut opened) {
                    let st = sec.stats();
                    let why = if st.unknown_key > 0 {
                        format!("no key {k} in the key file")
                    } else {
                        "the tag does not verify (forged, modified, or another key)".into()
                    };
                    let _ = write!(line, "BAD: sealed key={k} seq={seq}: {why}");
                    return false;
                }
                payload = &opened;
                note.push_str(&format!("  [sealed key={k} seq={seq}, verified]"));
            }
            None => {
                let inner = &s.aad[udrma_proto::secure::SEC_HEADER_LEN..];
                let p = Packet::new_unchecked(inner);
                let _ = write!(
                    line,
                    "{:<15} {:>4}  {:<9}  {:#010x}  {:<26} {:>3}  {:>5}  [sealed key={k} seq={seq}; no --key: tag not checked, payload sealed]",
                    p.opcode().kind_name(p.flags()),
                    p.msg_id(),
                    format!("{}/{}", p.seg_index(), p.seg_count()),
                    p.op_num(),
                    p.flags().to_string(),
                    p.credits(),
                    p.payload_len(),
                );
                return true;
            }
        }
    }
    match Repr::parse_bytes(payload) {
        Ok(r) => {
            let _ = write!(
                line,
                "{:<15} {:>4}  {:<9}  {:#010x}  {:<26} {:>3}  {:>5}  {}",
                r.kind_name(),
                r.msg_id,
                format!("{}/{}", r.seg_index, r.seg_count),
                r.op_num,
                r.flags.to_string(),
                r.credits,
                r.body.data().len(),
                r.detail()
            );
            line.truncate(line.trim_end().len());
            line.push_str(&note);
            true
        }
        Err(e) => {
            // Show what the header claims when there is one: a corrupted
            // packet is still recognisable, even if no field is trusted.
            if payload.len() >= HEADER_LEN && !matches!(e, Error::Truncated { .. }) {
                let p = Packet::new_unchecked(payload);
                let kind = p.opcode().kind_name(p.flags());
                let _ = write!(
                    line,
                    "{:<15} {:>4}  {:<9}  {:#010x}  {:<26} {:>3}  {:>5}  ",
                    kind,
                    p.msg_id(),
                    format!("{}/{}", p.seg_index(), p.seg_count()),
                    p.op_num(),
                    p.flags().to_string(),
                    p.credits(),
                    p.payload_len(),
                );
            }
            let _ = write!(line, "BAD: {e}");
            false
        }
    }
}

/// A MAC Control frame (a lossless fabric's PAUSE or RESUME): its
/// sender's MAC and, per priority it names, the pause asked for.
fn describe_pfc(t: &str, frame: &[u8], line: &mut String) -> bool {
    let mac = |m: &[u8]| {
        m.iter()
            .map(|b| format!("{b:02x}"))
            .collect::<Vec<_>>()
            .join(":")
    };
    let repr = match udrma_proto::pfc::PfcRepr::parse(frame) {
        Ok(r) => r,
        Err(e) => {
            let _ = write!(line, "{t}  BAD: {e}");
            return false;
        }
    };
    let _ = write!(
        line,
        "{t}  {:<21}  {:<21}  {:<15} ",
        mac(&repr.src),
        mac(&udrma_proto::pfc::PFC_DST),
        "PFC"
    );
    let named: Vec<String> = (0..8u8)
        .filter_map(|p| {
            repr.quanta_for(p).map(|q| match q {
                0 => format!("priority {p}: RESUME"),
                q => format!("priority {p}: PAUSE {q} quanta"),
            })
        })
        .collect();
    line.push_str(&named.join(", "));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `payload` in a frame from h0:9 to h1 on udrma's port.
    fn frame_of(payload: &[u8]) -> Vec<u8> {
        use udrma_proto::encap::{encapsulate, UdpEndpoint};
        let mut frame = Vec::new();
        encapsulate(
            &UdpEndpoint::node(udrma_proto::NodeAddr(0), 9),
            &UdpEndpoint::node(udrma_proto::NodeAddr(1), udrma_proto::DEFAULT_UDP_PORT),
            payload,
            &mut frame,
        )
        .unwrap();
        frame
    }

    #[test]
    fn every_sample_decodes_and_the_corrupted_one_is_flagged() {
        let mut pcap = Vec::new();
        let frames = udrma_proto::samples::write_capture(&mut pcap).unwrap();
        let mut out = Vec::new();
        let s = decode_capture(&pcap[..], udrma_proto::DEFAULT_UDP_PORT, &mut out).unwrap();
        assert_eq!(s.frames, frames.len() as u64);
        assert_eq!(s.bad, 1);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), frames.len() + 2);
        for (frame, line) in frames.iter().zip(&lines[1..]) {
            assert!(line.contains(&frame.repr.kind_name()), "{line}");
            assert!(
                line.contains(&format!("{:#010x}", frame.repr.op_num)),
                "{line}"
            );
            assert_eq!(
                line.contains("BAD: bad checksum"),
                frame.corrupted,
                "{line}"
            );
        }
    }

    /// A lossless fabric's capture holds PFC frames among the datagrams:
    /// each is a line of its own, a PAUSE or RESUME per priority named,
    /// and MAC Control that is not PFC (802.3x's whole-link PAUSE) is BAD
    /// with the reason.
    #[test]
    fn pfc_frames_decode_as_pause_and_resume() {
        use udrma_proto::pfc::PfcRepr;
        let mac = [0x02, 0x75, 0x73, 0, 0, 3];
        let mut line = String::new();
        assert!(describe_frame(
            7,
            &PfcRepr::pause(mac, 3).to_bytes(),
            18791,
            &mut line
        ));
        assert_eq!(
            line,
            "   0.000000007  02:75:73:00:00:03      01:80:c2:00:00:01      PFC             priority 3: PAUSE 65535 quanta"
        );
        line.clear();
        assert!(describe_frame(
            7,
            &PfcRepr::resume(mac, 6).to_bytes(),
            18791,
            &mut line
        ));
        assert!(
            line.ends_with("PFC             priority 6: RESUME"),
            "{line}"
        );
        let mut pause = PfcRepr::pause(mac, 3).to_bytes();
        pause[14] = 0x00;
        line.clear();
        assert!(!describe_frame(7, &pause, 18791, &mut line));
        assert!(line.contains("BAD: MAC Control opcode 0x0001"), "{line}");
    }

    #[test]
    fn wrong_port_and_garbage_frames_are_bad_not_fatal() {
        let mut line = String::new();
        assert!(!describe_frame(0, b"short", 18791, &mut line));
        assert!(line.contains("BAD: truncated Ethernet frame"), "{line}");
        let mut frame = Vec::new();
        let src = udrma_proto::encap::UdpEndpoint::node(udrma_proto::NodeAddr(0), 53);
        let dst = udrma_proto::encap::UdpEndpoint::node(udrma_proto::NodeAddr(1), 5353);
        udrma_proto::encap::encapsulate(&src, &dst, b"dns?", &mut frame).unwrap();
        line.clear();
        assert!(!describe_frame(0, &frame, 18791, &mut line));
        assert!(line.contains("BAD: not udrma"), "{line}");
    }

    #[test]
    fn a_sealed_datagram_shows_its_headers_and_opens_with_the_right_key_only() {
        use udrma_bridge::secure::{KeyRing, Secure};
        let key = |hex0: &str| {
            KeyRing::parse(
                &format!("4 {hex0}00102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"),
                "k",
            )
            .unwrap()
        };
        let (right, wrong) = (key("0"), key("f"));
        let packet = udrma_proto::samples::every_kind()[0].to_vec().unwrap();
        let mut sealed = Vec::new();
        Secure::with_sender(right.clone(), [1; 12]).seal(&packet, &mut sealed);
        let frame = frame_of(&sealed);
        let line = |keys: Option<&KeyRing>| {
            let mut l = String::new();
            let ok = describe_frame_with(0, &frame, udrma_proto::DEFAULT_UDP_PORT, keys, &mut l);
            (ok, l)
        };
        let (ok, l) = line(None);
        assert!(
            ok && l.contains("WRITE") && l.contains("sealed key=4 seq=1; no --key"),
            "{l}"
        );
        let (ok, l) = line(Some(&right));
        assert!(
            ok && l.contains("WRITE") && l.ends_with("[sealed key=4 seq=1, verified]"),
            "{l}"
        );
        let (ok, l) = line(Some(&wrong));
        assert!(
            !ok && l.contains("BAD: sealed key=4 seq=1: the tag does not verify"),
            "{l}"
        );
        let other = KeyRing::parse(
            "5 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "k",
        )
        .unwrap();
        let (ok, l) = line(Some(&other));
        assert!(!ok && l.contains("no key 4 in the key file"), "{l}");
    }

    /// Captured on the sending host (loopback, or a NIC with checksum
    /// offload), a datagram's UDP checksum is not filled in yet: it is
    /// decoded, with a note, and its ICRC still decides whether it is bad.
    #[test]
    fn an_unfilled_udp_checksum_is_noted_not_refused() {
        let packet = udrma_proto::samples::every_kind()[0].to_vec().unwrap();
        let mut frame = frame_of(&packet);
        // The UDP checksum field (Ethernet 14 + IPv4 20 + 6) as offload
        // leaves it: a partial sum, here just wrong.
        frame[40] ^= 0x5a;
        let mut l = String::new();
        assert!(describe_frame(
            0,
            &frame,
            udrma_proto::DEFAULT_UDP_PORT,
            &mut l
        ));
        assert!(
            l.contains("WRITE") && l.contains("[UDP checksum wrong"),
            "{l}"
        );
        // The ICRC is still checked: flip a payload bit as well.
        let last = frame.len() - 1;
        frame[last] ^= 1;
        l.clear();
        assert!(!describe_frame(
            0,
            &frame,
            udrma_proto::DEFAULT_UDP_PORT,
            &mut l
        ));
        assert!(l.contains("BAD: bad checksum"), "{l}");
    }

    #[test]
    fn not_a_pcap_is_an_error() {
        let err = decode_capture(&b"hello"[..], 18791, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().starts_with("not a pcap capture:"), "{err}");
    }
}
