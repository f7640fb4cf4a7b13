//! The `udrma` binary as a user runs it: output, errors and exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn udrma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_udrma"))
        .args(args)
        .output()
        .expect("running udrma")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

#[test]
fn decode_prints_every_kind_and_flags_the_corrupted_packet() {
    let pcap = tmp("cli-every-kind.pcap");
    let frames =
        udrma::proto::samples::write_capture(std::fs::File::create(&pcap).unwrap()).unwrap();
    let out = udrma(&["decode", pcap.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // Header, one line per frame, summary.
    assert_eq!(lines.len(), frames.len() + 2, "{text}");
    for kind in [
        "WRITE_FIRST",
        "WRITE_MIDDLE",
        "WRITE_LAST",
        "WRITE_ONLY",
        "READ_REQ",
        "READ_RESP_ONLY",
        "SEND_ONLY",
        "ACK",
        "SACK",
        "NACK",
        "COMPLETION",
        "DATA_ARRIVED",
        "CREDIT",
        "RTS",
        "CTS",
        "FIN",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.split_whitespace().nth(3) == Some(kind)),
            "{kind} missing:\n{text}"
        );
    }
    let bad: Vec<&&str> = lines.iter().filter(|l| l.contains("BAD:")).collect();
    assert_eq!(bad.len(), 1, "{text}");
    assert!(bad[0].contains("BAD: bad checksum"), "{}", bad[0]);
    // The line still says what the header claims.
    assert!(bad[0].contains("WRITE_FIRST"), "{}", bad[0]);
    assert_eq!(
        lines.last().unwrap(),
        &format!(
            "{} packets, {} udrma, 1 bad",
            frames.len(),
            frames.len() - 1
        )
    );
    // Fields land in their columns.
    let first = lines[1];
    assert!(first.contains("10.0.0.1:49152"), "{first}");
    assert!(first.contains("10.0.0.2:18791"), "{first}");
    assert!(first.contains(" 0/4 "), "{first}");
    assert!(first.contains("0x00010000"), "{first}");
    assert!(first.contains("ACK_REQ|FIRST"), "{first}");
}

#[test]
fn bad_input_exits_2_with_a_message_naming_it() {
    let out = udrma(&["decode", "/nonexistent/capture.pcap"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot open /nonexistent/capture.pcap"),
        "{err}"
    );

    let not_pcap = tmp("cli-not-a-pcap.pcap");
    std::fs::write(&not_pcap, b"this is not a capture").unwrap();
    let out = udrma(&["decode", not_pcap.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cli-not-a-pcap.pcap") && err.contains("pcap"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    let out = udrma(&["decode", "--port", "seventy", "x.pcap"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port"));

    let out = udrma(&["decod"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("decode"),
        "suggests the right command"
    );
}

#[test]
fn truncated_capture_reports_the_damage_after_what_it_could_read() {
    let pcap = tmp("cli-truncated.pcap");
    let mut bytes = Vec::new();
    udrma::proto::samples::write_capture(&mut bytes).unwrap();
    bytes.truncate(bytes.len() - 10);
    std::fs::write(&pcap, &bytes).unwrap();
    let out = udrma(&["decode", pcap.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().count() > 10,
        "frames before the damage are printed:\n{text}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: decoding"));
}

#[test]
fn no_arguments_runs_the_demo() {
    let out = udrma(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("udrma wire demo"), "{text}");
    assert!(text.contains("23 packets, 22 udrma, 1 bad"), "{text}");
}
