//! Stories over virtual time about a costed NIC that sends and receives
//! at once: its acknowledgements must not slow the data either way
//! (docs/collectives.md, "How close a ring gets to the wire").

use udrma_scenarios::{run, RunOptions, Scenario};

/// Completion of the last WRITE, in µs, of `8 MiB` from h0 to h1 and, if
/// `both`, from h1 to h0 at the same time, on `roce-100g`.
fn writes(both: bool) -> f64 {
    let back = if both {
        "[[workload]]\nkind = \"single\"\nop = \"write\"\nsrc = \"h1\"\ndst = \"h0\"\nsize = \"8MiB\"\n"
    } else {
        ""
    };
    let text = format!(
        r#"
name = "duplex"
seed = 1
profile = "roce-100g"
time_limit = "100ms"
[topology]
kind = "pair"
phantom = true
[[workload]]
kind = "single"
op = "write"
src = "h0"
dst = "h1"
size = "8MiB"
{back}"#
    );
    let sc = Scenario::parse("duplex.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    let r = run(&sc, RunOptions::default()).unwrap();
    assert!(r.passed(), "{:?}", r.notes);
    assert_eq!(r.timeouts, 0, "nothing is lost here");
    r.completion_ns.max as f64 / 1e3
}

/// A link is full duplex and so is PCIe: two hosts that WRITE to each
/// other at once finish within 5 % of one WRITE alone. Each receive unit
/// works the other side's data and acknowledgements of its own data; an
/// acknowledgement that cost a DMA, or a sender that read its next data
/// packet only after sending an acknowledgement, made this 1.78x (at
/// 64 MiB each way; each alone, reverted, fails it here).
#[test]
fn two_hosts_writing_to_each_other_move_each_way_at_the_one_way_rate() {
    let one = writes(false);
    let two = writes(true);
    assert!(
        two <= one * 1.05,
        "both ways {two:.1} us, one way {one:.1} us"
    );
}
