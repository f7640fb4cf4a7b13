//! The authenticated mode as the simulator models it: 36 more bytes on
//! every packet and the NICs' sealing and opening time.

use udrma_scenarios::{run, Report, RunOptions, Scenario};

fn pair(mode: &str, cost: &str) -> String {
    format!(
        r#"
name = "aead-{mode}"
seed = 1
time_limit = "100ms"

[topology]
kind = "pair"
bandwidth = "100Gbps"
latency = "1us"

[nic]
mtu_payload = "1KiB"

[security]
mode = "{mode}"

[cost]
{cost}

[[workload]]
kind = "many"
op = "write"
src = "h0"
dst = "h1"
size = "1MiB"
count = 8
"#
    )
}

fn report(text: &str) -> Report {
    let sc = Scenario::parse("test.toml", text).unwrap_or_else(|e| panic!("{e}"));
    run(&sc, RunOptions::default()).unwrap()
}

#[test]
fn the_seal_costs_its_header_bytes_and_the_crypto_its_time() {
    let plain = report(&pair("none", ""));
    let header = report(&pair("aead", ""));
    let inline = report(&pair(
        "aead",
        "aead_per_packet = \"20ns\"\naead_bandwidth = \"400Gbps\"",
    ));
    let (p, h, i) = (plain.goodput_gbps, header.goodput_gbps, inline.goodput_gbps);
    assert!(plain.passed() && header.passed() && inline.passed());
    // 1,024 B of payload in 1,092 B of packet plus the link's framing:
    // 36 more bytes cost about 3 %.
    let ratio = h / p;
    assert!(
        (0.95..0.99).contains(&ratio),
        "header only: {h} / {p} = {ratio}"
    );
    // An inline engine at 400 Gb/s keeps up with a 100 Gb/s line.
    assert!(i <= h && i / h > 0.99, "inline crypto: {i} against {h}");
}

#[test]
fn an_unknown_security_mode_is_named() {
    let err = match Scenario::parse("bad.toml", &pair("rot13", "")) {
        Ok(_) => panic!("an unknown mode must be refused when read"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("rot13") && err.contains("aead"), "{err}");
    assert!(
        err.contains("bad.toml:15"),
        "located at the `mode` line: {err}"
    );
}
