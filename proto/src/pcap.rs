//! Nanosecond pcap files of Ethernet frames (via the `pcap-file` crate).
//!
//! Timestamps are whatever the caller says: simulated time in the fabric,
//! wall time since the UNIX epoch in the bridge. The reader also accepts
//! microsecond captures (tcpdump's default) and returns nanoseconds.

use std::io::{Read, Write};
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::{DataLink, Endianness, TsResolution};
use thiserror::Error;

/// Snapshot length written in the file header: large enough for any frame
/// that carries a maximum-size udrma datagram.
pub const SNAPLEN: u32 = 262_144;

/// A pcap file could not be written or read.
#[derive(Debug, Error)]
pub enum CaptureError {
    /// The underlying reader/writer or the pcap format failed.
    #[error("pcap: {0}")]
    Pcap(pcap_file::PcapError),
    /// The capture's link type is not Ethernet.
    #[error("unsupported pcap link type {0:?} (udrma captures are Ethernet)")]
    LinkType(DataLink),
    /// The file does not start with a readable pcap header.
    #[error("not a pcap capture: {0}")]
    Header(String),
    /// A frame record could not be read (1-based frame number).
    #[error("frame {index}: {reason}")]
    Frame {
        /// Which frame, counting from 1.
        index: u64,
        /// What was wrong with it.
        reason: String,
    },
}

/// Says what a pcap reading error means, in words a user can act on
/// (`pcap-file` reports every I/O failure as "Error reading bytes").
fn reason(e: &pcap_file::PcapError, what: &str) -> String {
    use pcap_file::PcapError as E;
    match e {
        E::IoError(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            format!("the file ends inside {what} (cut short)")
        }
        E::IoError(io) if io.kind() == std::io::ErrorKind::IsADirectory => {
            "it is a directory, not a file".to_string()
        }
        E::IoError(io) => format!("cannot read {what}: {io}"),
        E::IncompleteBuffer => format!("the file ends inside {what} (truncated)"),
        E::InvalidField(field) => format!("{what} has an invalid field: {field}"),
        other => format!("{what}: {other}"),
    }
}

// Not `#[from]`: that would also report the inner error as the source, and
// error chains would print it twice.
impl From<pcap_file::PcapError> for CaptureError {
    fn from(e: pcap_file::PcapError) -> Self {
        CaptureError::Pcap(e)
    }
}

/// Writes frames to a nanosecond pcap file.
#[derive(Debug)]
pub struct PcapSink<W: Write> {
    writer: PcapWriter<W>,
}

impl<W: Write> PcapSink<W> {
    /// Writes the file header (Ethernet link type, nanosecond timestamps).
    pub fn new(out: W) -> Result<PcapSink<W>, CaptureError> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        Ok(PcapSink {
            writer: PcapWriter::with_header(out, header)?,
        })
    }

    /// Appends one frame captured at `time_ns`.
    pub fn write_frame(&mut self, time_ns: u64, frame: &[u8]) -> Result<(), CaptureError> {
        let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let packet = PcapPacket::new(Duration::from_nanos(time_ns), len, frame);
        self.writer.write_packet(&packet)?;
        Ok(())
    }

    /// Gives back the writer (flush it if it buffers).
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
    }
}

/// One frame read back from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    /// Capture time in nanoseconds.
    pub time_ns: u64,
    /// Length on the wire (may exceed `data.len()` if the capture was cut).
    pub orig_len: u32,
    /// Captured bytes.
    pub data: Vec<u8>,
}

/// Reads frames from a pcap file (nanosecond or microsecond).
#[derive(Debug)]
pub struct PcapSource<R: Read> {
    reader: PcapReader<R>,
    /// Set after the first error: a broken file yields one error, then ends.
    failed: bool,
    /// Frames read so far.
    frames: u64,
}

impl<R: Read> PcapSource<R> {
    /// Reads and checks the file header.
    pub fn new(input: R) -> Result<PcapSource<R>, CaptureError> {
        let reader = PcapReader::new(input)
            .map_err(|e| CaptureError::Header(reason(&e, "the 24-byte pcap file header")))?;
        let link = reader.header().datalink;
        if link != DataLink::ETHERNET {
            return Err(CaptureError::LinkType(link));
        }
        Ok(PcapSource {
            reader,
            failed: false,
            frames: 0,
        })
    }
}

impl<R: Read> Iterator for PcapSource<R> {
    type Item = Result<CapturedFrame, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let packet = self.reader.next_packet()?;
        self.failed = packet.is_err();
        self.frames += 1;
        let index = self.frames;
        Some(
            packet
                .map_err(|e| CaptureError::Frame {
                    index,
                    reason: reason(&e, "its packet record"),
                })
                .map(|p| CapturedFrame {
                    time_ns: u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX),
                    orig_len: p.orig_len,
                    data: p.data.into_owned(),
                }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_nanosecond_times() {
        let mut sink = PcapSink::new(Vec::new()).unwrap();
        sink.write_frame(1, b"first").unwrap();
        sink.write_frame(1_500_000_123, b"second").unwrap();
        let bytes = sink.into_inner();
        // Nanosecond magic, little-endian.
        assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        let frames: Vec<_> = PcapSource::new(&bytes[..])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].time_ns, 1);
        assert_eq!(frames[1].time_ns, 1_500_000_123);
        assert_eq!(frames[1].data, b"second");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let message = |bytes: &[u8]| PcapSource::new(bytes).unwrap_err().to_string();
        assert!(message(b"not a pcap file at all").starts_with("not a pcap capture: "));
        assert_eq!(
            message(b""),
            "not a pcap capture: the file ends inside the 24-byte pcap file header (cut short)"
        );
        let mut sink = PcapSink::new(Vec::new()).unwrap();
        sink.write_frame(5, b"abcdef").unwrap();
        let bytes = sink.into_inner();
        // Cut the last record in half: the reader reports it.
        let cut = &bytes[..bytes.len() - 3];
        let results: Vec<_> = PcapSource::new(cut).unwrap().collect();
        assert_eq!(results.len(), 1, "one error, then the iterator ends");
        let e = results[0].as_ref().unwrap_err().to_string();
        assert!(
            e.starts_with("frame 1: the file ends inside its packet record"),
            "{e}"
        );
    }
}
