//! The Wireshark dissector (tools/wireshark/udrma.lua) against a capture
//! of every packet kind: tshark must read every field of every packet as
//! udrma-proto wrote it, and flag the one packet with a corrupted ICRC.
//!
//! Without tshark the test prints a skip notice and passes, unless
//! `UDRMA_REQUIRE_TSHARK=1` (CI sets it), when it fails.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;

use udrma::proto::samples::{write_capture, SampleFrame};
use udrma::proto::{icrc::icrc, Body};

/// Every field the test compares, in the order tshark prints them.
const FIELDS: &[&str] = &[
    "udrma.version",
    "udrma.opcode",
    "udrma.flags",
    "udrma.src_ep",
    "udrma.dst_ep",
    "udrma.op_num",
    "udrma.msg_id",
    "udrma.seg_index",
    "udrma.seg_count",
    "udrma.credits",
    "udrma.payload_len",
    "udrma.epoch",
    "udrma.addr",
    "udrma.rkey",
    "udrma.total_len",
    "udrma.length",
    "udrma.offset",
    "udrma.sack.base",
    "udrma.sack.bitmap",
    "udrma.nack.syndrome",
    "udrma.nack.detail",
    "udrma.status",
    "udrma.immediate",
    "udrma.rdv.protocol",
    "udrma.rdv.tag",
    "udrma.rdv.msg_len",
    "udrma.rdv.seq",
    "udrma.hello.reply",
    "udrma.hello.max_payload",
    "udrma.hello.nonce",
    "udrma.hello.region_len",
    "udrma.hello.ports",
    "udrma.hello.retry",
    "udrma.hello.full",
    "udrma.demand.wanted",
    "udrma.demand.free",
    "udrma.grant.granted",
    "udrma.reduce.op",
    "udrma.reduce.type",
    "udrma.reduce.count",
    "udrma.reduce.branch",
    "udrma.reduce.fan_in",
    "udrma.reduce.tree",
    "udrma.reduce.level",
    "udrma.reduce.first",
    "udrma.reduce.loc",
    "udrma.reduce.acked",
    "udrma.icrc",
    "udrma.icrc_ok",
    "_ws.col.Info",
];

/// What tshark should print for one frame: field name → value; fields a
/// kind does not have are absent (tshark prints them empty).
fn expected(frame: &SampleFrame) -> BTreeMap<&'static str, u64> {
    let r = &frame.repr;
    let mut m = BTreeMap::from([
        ("udrma.version", 1),
        ("udrma.opcode", u64::from(u8::from(r.opcode()))),
        ("udrma.flags", u64::from(r.flags.bits())),
        ("udrma.src_ep", u64::from(r.src_ep)),
        ("udrma.dst_ep", u64::from(r.dst_ep)),
        ("udrma.op_num", u64::from(r.op_num)),
        ("udrma.msg_id", u64::from(r.msg_id)),
        ("udrma.seg_index", u64::from(r.seg_index)),
        ("udrma.seg_count", u64::from(r.seg_count)),
        ("udrma.credits", u64::from(r.credits)),
        ("udrma.payload_len", r.body.data().len() as u64),
        ("udrma.epoch", u64::from(r.epoch)),
        ("udrma.icrc_ok", u64::from(!frame.corrupted)),
    ]);
    let bytes = r.to_vec().unwrap();
    let mut carried = icrc(&bytes[..bytes.len() - 4]);
    if frame.corrupted {
        carried ^= 0xff00_0000;
    }
    m.insert("udrma.icrc", u64::from(carried));
    match r.body {
        Body::Write {
            remote_addr,
            rkey,
            total_len,
            ..
        } => {
            m.extend([
                ("udrma.addr", remote_addr),
                ("udrma.rkey", rkey.into()),
                ("udrma.total_len", total_len.into()),
            ]);
        }
        Body::ReadRequest {
            remote_addr,
            rkey,
            length,
        } => {
            m.extend([
                ("udrma.addr", remote_addr),
                ("udrma.rkey", rkey.into()),
                ("udrma.length", length.into()),
            ]);
        }
        Body::ReadResponse {
            offset, total_len, ..
        }
        | Body::Send {
            offset, total_len, ..
        } => {
            m.extend([
                ("udrma.offset", offset.into()),
                ("udrma.total_len", total_len.into()),
            ]);
        }
        Body::Ack | Body::Credit => {}
        Body::SelectiveAck { base, bitmap } => {
            m.extend([
                ("udrma.sack.base", base.into()),
                ("udrma.sack.bitmap", bitmap),
            ]);
        }
        Body::Nack { syndrome, detail } => {
            m.extend([
                ("udrma.nack.syndrome", u8::from(syndrome).into()),
                ("udrma.nack.detail", detail.into()),
            ]);
        }
        Body::Completion { status, length } => {
            m.extend([
                ("udrma.status", status.into()),
                ("udrma.length", length.into()),
            ]);
        }
        Body::DataArrived {
            addr,
            length,
            immediate,
        } => {
            m.extend([
                ("udrma.addr", addr),
                ("udrma.length", length.into()),
                ("udrma.immediate", immediate.into()),
            ]);
        }
        Body::Rts(rdv) | Body::Cts(rdv) => {
            m.extend([
                ("udrma.rdv.protocol", u8::from(rdv.protocol).into()),
                ("udrma.rdv.tag", rdv.tag.into()),
                ("udrma.rdv.msg_len", rdv.length),
                ("udrma.addr", rdv.addr),
                ("udrma.rkey", rdv.rkey.into()),
                ("udrma.rdv.seq", rdv.seq.into()),
            ]);
        }
        Body::Fin { protocol, tag, seq } => {
            m.extend([
                ("udrma.rdv.protocol", u8::from(protocol).into()),
                ("udrma.rdv.tag", tag.into()),
                ("udrma.rdv.seq", seq.into()),
            ]);
        }
        Body::Hello(h) => {
            m.extend([
                ("udrma.hello.reply", u64::from(h.reply)),
                ("udrma.hello.max_payload", h.max_payload.into()),
                ("udrma.hello.nonce", h.nonce.into()),
                ("udrma.addr", h.region_addr),
                ("udrma.hello.region_len", h.region_len),
                ("udrma.rkey", h.rkey.into()),
                ("udrma.hello.ports", h.ports.into()),
                ("udrma.hello.retry", u64::from(h.retry)),
                ("udrma.hello.full", u64::from(h.full)),
            ]);
        }
        Body::Demand { wanted, free } => {
            m.extend([("udrma.demand.wanted", wanted), ("udrma.demand.free", free)]);
        }
        Body::Grant { granted } => {
            m.insert("udrma.grant.granted", granted);
        }
        Body::Reduce { hdr, data } | Body::ReduceBcast { hdr, data } => {
            m.extend([
                ("udrma.reduce.op", u8::from(hdr.op).into()),
                ("udrma.reduce.type", u8::from(hdr.ty).into()),
                ("udrma.reduce.count", hdr.count.into()),
                ("udrma.reduce.branch", hdr.branch.into()),
                ("udrma.reduce.fan_in", hdr.fan_in.into()),
                ("udrma.reduce.tree", hdr.tree.into()),
                ("udrma.reduce.level", hdr.level.into()),
                ("udrma.reduce.first", hdr.first.into()),
            ]);
            if hdr.op.has_locations() {
                // The first location follows the values.
                let at = usize::from(hdr.count) * hdr.ty.width().unwrap();
                let loc = u32::from_be_bytes(data[at..at + 4].try_into().unwrap());
                m.insert("udrma.reduce.loc", loc.into());
            }
        }
        Body::ReduceAck {
            acked,
            branch,
            tree,
        } => {
            m.extend([
                ("udrma.reduce.acked", u8::from(acked).into()),
                ("udrma.reduce.branch", branch.into()),
                ("udrma.reduce.tree", tree.into()),
            ]);
        }
    }
    m
}

/// tshark prints numbers in decimal or 0x-hex by the field's base, and
/// booleans as 1/0 (True/False in older releases).
fn number(field: &str, text: &str) -> u64 {
    match text {
        "True" | "true" => return 1,
        "False" | "false" => return 0,
        _ => {}
    }
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.unwrap_or_else(|e| panic!("{field}: tshark printed {text:?}: {e}"))
}

fn tshark() -> Option<PathBuf> {
    let found = Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(PathBuf::from("tshark"));
    }
    if std::env::var_os("UDRMA_REQUIRE_TSHARK").is_some_and(|v| v == "1") {
        panic!("tshark is required (UDRMA_REQUIRE_TSHARK=1) but was not found on PATH");
    }
    // Straight to stderr, not through `eprintln!`: the test harness
    // captures the macros, and a skip must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: tshark not found on PATH; install it (apt-get install tshark) to check the Wireshark dissector"
    );
    None
}

#[test]
fn tshark_decodes_every_field_of_every_kind() {
    let Some(tshark) = tshark() else { return };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let pcap = dir.join("wireshark-every-kind.pcap");
    let frames = write_capture(std::fs::File::create(&pcap).unwrap()).unwrap();
    let lua = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/wireshark/udrma.lua");

    let mut cmd = Command::new(tshark);
    cmd.arg("-X").arg(format!("lua_script:{}", lua.display()));
    cmd.arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "separator=\t", "-E", "occurrence=f"]);
    for field in FIELDS {
        cmd.args(["-e", field]);
    }
    let out = cmd.output().expect("running tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    assert!(
        !stderr.contains("Lua: Error"),
        "the dissector failed to load: {stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), frames.len(), "one row per frame:\n{stdout}");

    let mut checked = 0;
    for (i, (frame, row)) in frames.iter().zip(&rows).enumerate() {
        let cols: Vec<&str> = row.split('\t').collect();
        assert_eq!(cols.len(), FIELDS.len(), "frame {}: {row}", i + 1);
        let want = expected(frame);
        for (field, text) in FIELDS.iter().zip(&cols) {
            if *field == "_ws.col.Info" {
                assert!(
                    text.starts_with(&frame.repr.kind_name()),
                    "frame {}: info {text:?}",
                    i + 1
                );
                assert_eq!(
                    text.contains("[BAD ICRC]"),
                    frame.corrupted,
                    "frame {}: info {text:?}",
                    i + 1
                );
                continue;
            }
            match want.get(field) {
                Some(value) => {
                    assert_eq!(
                        number(field, text),
                        *value,
                        "frame {} ({}) field {field}",
                        i + 1,
                        frame.repr.kind_name()
                    );
                    checked += 1;
                }
                None => assert_eq!(
                    *text,
                    "",
                    "frame {} ({}) has unexpected {field}",
                    i + 1,
                    frame.repr.kind_name()
                ),
            }
        }
    }
    // Every frame has at least the 14 header fields and the ICRC verdict.
    assert!(
        checked >= frames.len() * 14,
        "only {checked} values compared"
    );
    eprintln!(
        "tshark: {checked} field values of {} frames match",
        frames.len()
    );
}

#[test]
fn tshark_shows_a_sealed_datagrams_security_header_and_clear_headers() {
    use udrma::bridge::secure::{KeyRing, Secure};
    use udrma::proto::encap::{encapsulate, UdpEndpoint};
    use udrma::proto::pcap::PcapSink;
    use udrma::proto::{Flags, NodeAddr, Repr};
    let Some(tshark) = tshark() else { return };
    let ring = KeyRing::parse(
        "9 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        "keys",
    )
    .unwrap();
    let mut sec = Secure::with_sender(ring, [0x5a; 12]);
    let packet = Repr {
        flags: Flags::FIRST,
        src_ep: 1,
        dst_ep: 2,
        op_num: 3,
        msg_id: 77,
        seg_index: 0,
        seg_count: 2,
        credits: 0,
        epoch: 5,
        body: Body::Write {
            remote_addr: 0x4000,
            rkey: 0x33,
            total_len: 2048,
            data: &[0xab; 1024],
        },
    }
    .to_vec()
    .unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let pcap = dir.join("wireshark-sealed.pcap");
    let mut sink = PcapSink::new(std::fs::File::create(&pcap).unwrap()).unwrap();
    let (mut sealed, mut frame) = (Vec::new(), Vec::new());
    for t in 1..=2u64 {
        sec.seal(&packet, &mut sealed);
        encapsulate(
            &UdpEndpoint::node(NodeAddr(0), 50_000),
            &UdpEndpoint::node(NodeAddr(1), udrma::proto::DEFAULT_UDP_PORT),
            &sealed,
            &mut frame,
        )
        .unwrap();
        sink.write_frame(t * 1000, &frame).unwrap();
    }
    drop(sink);
    let lua = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/wireshark/udrma.lua");
    let out = Command::new(tshark)
        .arg("-X")
        .arg(format!("lua_script:{}", lua.display()))
        .arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "separator=\t"])
        .args([
            "-e",
            "udrma.sec.key_id",
            "-e",
            "udrma.sec.seq",
            "-e",
            "udrma.msg_id",
        ])
        .args([
            "-e",
            "udrma.rkey",
            "-e",
            "udrma.sec.sealed_payload",
            "-e",
            "_ws.col.Info",
        ])
        .output()
        .expect("running tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("Lua: Error"),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r[0], "9", "{stdout}");
        assert_eq!(r[1], (i + 1).to_string(), "{stdout}");
        assert_eq!(r[2], "77", "{stdout}");
        assert_eq!(number("udrma.rkey", r[3]), 0x33, "{stdout}");
        assert_eq!(r[4].len(), 2 * 1024, "1 KiB of sealed payload: {stdout}");
        assert!(!r[4].contains("abababab"), "the payload is not in clear");
        assert!(r[5].starts_with("SEALED key=9"), "{stdout}");
    }
}

/// PFC frames as udrma-proto writes them (`proto/src/pfc.rs`) decode in
/// tshark's own MAC Control dissector: opcode, class-enable vector and
/// the pause time of the priority they name.
#[test]
fn tshark_reads_pfc_pause_and_resume_frames() {
    use udrma::proto::pcap::PcapSink;
    use udrma::proto::pfc::PfcRepr;
    let Some(tshark) = tshark() else { return };
    let pcap = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wireshark-pfc.pcap");
    let mac = [0x02, 0, 0, 0, 0, 0x07];
    let mut sink = PcapSink::new(std::fs::File::create(&pcap).unwrap()).unwrap();
    sink.write_frame(1_000, &PfcRepr::pause(mac, 3).to_bytes())
        .unwrap();
    sink.write_frame(2_000, &PfcRepr::resume(mac, 3).to_bytes())
        .unwrap();
    drop(sink);
    let out = Command::new(tshark)
        .arg("-r")
        .arg(&pcap)
        .args(["-T", "fields", "-E", "separator=,"])
        .args(["-e", "eth.dst", "-e", "macc.opcode", "-e", "macc.cbfc.enbv"])
        .args(["-e", "macc.cbfc.pause_time.c3"])
        .output()
        .expect("running tshark");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0], "01:80:c2:00:00:01,0x0101,0x0008,65535", "{stdout}");
    assert_eq!(rows[1], "01:80:c2:00:00:01,0x0101,0x0008,0", "{stdout}");
}

/// A lossless fabric's capture: the PAUSE and RESUME frames a switch
/// sends back over a link are in it, among the datagrams, in time order,
/// and tshark reads each as PFC for priority 3, one frame per traced
/// PFC event (a WRITE of sixteen packets across a dumbbell whose middle
/// link runs at a tenth of the edge's speed, XOFF at two and a half
/// packets: fabric/tests/pfc.rs has the same run's times).
#[test]
fn tshark_reads_the_pause_frames_a_lossless_fabric_captures() {
    use udrma::fabric::{FabricConfig, LinkParams, PfcConfig, Topology, TraceEvent, World};
    use udrma::nic::{Access, WorkRequest};
    use udrma::proto::NodeAddr;
    let Some(tshark) = tshark() else { return };
    let edge = LinkParams::default();
    let slow = LinkParams {
        bandwidth_bps: 10_000_000_000,
        ..edge
    };
    let topo = Topology::dumbbell(1, edge, slow);
    let mut w = World::new(topo, FabricConfig::default(), Default::default()).unwrap();
    let len = 4096 + 52;
    w.set_pfc(PfcConfig {
        xoff_bytes: len * 5 / 2,
        xon_bytes: len / 2,
        ..PfcConfig::default()
    })
    .unwrap();
    let pcap = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wireshark-lossless.pcap");
    w.tap(&["h0-s0"], Box::new(std::fs::File::create(&pcap).unwrap()))
        .unwrap();
    let trace = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    w.set_trace_sink(
        udrma::fabric::TraceFormat::Postcard,
        Box::new(Sink(trace.clone())),
    );
    let src = w
        .nic_mut(NodeAddr(0))
        .register(0x1000, 1 << 20, Access::ALL);
    let dst = w
        .nic_mut(NodeAddr(1))
        .register(0x1000, 1 << 20, Access::ALL);
    let wr = WorkRequest::write(NodeAddr(1), src, 0x1000, 16 * 4096, dst.0, 0x1000);
    w.post(NodeAddr(0), wr).unwrap();
    w.run();
    w.finish().unwrap();
    let events = udrma::fabric::read_postcard(&trace.lock().unwrap()).unwrap();
    let traced: Vec<u16> = events
        .iter()
        .filter_map(|e| match *e {
            TraceEvent::Pfc { quanta, .. } => Some(quanta),
            _ => None,
        })
        .collect();
    assert!(traced.len() >= 2, "{traced:?}");
    let out = Command::new(tshark)
        .arg("-r")
        .arg(&pcap)
        .args(["-Y", "macc", "-T", "fields", "-E", "separator=,"])
        .args(["-e", "macc.opcode", "-e", "macc.cbfc.pause_time.c3"])
        .output()
        .expect("running tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let want: Vec<String> = traced.iter().map(|q| format!("0x0101,{q}")).collect();
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got, want, "{stdout}");
}
