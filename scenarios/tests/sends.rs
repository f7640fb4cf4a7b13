//! SEND/RECV in the RDMA workloads: how a receiver posts its buffers.
//!
//! Over one receive queue any SEND may take any posted buffer: the
//! transport does not keep SENDs in order, and SENDs from several senders
//! meet in the same queue. A receiver therefore posts buffers as long as
//! the longest SEND aimed at it, as verbs applications on a shared receive
//! queue do (docs/scenarios.md, "Workloads").

use udrma_scenarios::{run, Report, RunOptions, Scenario};

fn report(text: &str) -> Report {
    let sc = Scenario::parse("sends.toml", text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    run(&sc, RunOptions::default()).unwrap()
}

fn sends(from: &str, size: &str, count: u32, start: &str) -> String {
    format!(
        "[[workload]]\nkind = \"many\"\nop = \"send\"\nsrc = \"{from}\"\ndst = \"h2\"\n\
         size = \"{size}\"\ncount = {count}\nstart = \"{start}\"\n"
    )
}

/// h2 expects eight 4 KiB SENDs from h0 and eight 100 B SENDs from h1, all
/// at once, on a clean star. The 100 B SENDs take their buffers first
/// (they are on the wire for less time), and the 4 KiB ones arrive to
/// find whatever is left. With buffers cut to each message's own size,
/// a 4 KiB SEND met a 100 B buffer and failed `remote error:
/// OUT_OF_BOUNDS`, though no packet was harmed. With every buffer as
/// long as the longest SEND, all sixteen land, each byte-exact in one
/// buffer, and nothing past its bytes changes.
#[test]
fn sends_of_different_sizes_into_one_host_all_land() {
    for (first, second) in [("0us", "0us"), ("0us", "3us"), ("3us", "0us")] {
        let text = format!(
            "name = \"sizes\"\ntime_limit = \"50ms\"\n[topology]\nkind = \"star\"\nhosts = 3\n{}{}",
            sends("h0", "4KiB", 8, first),
            sends("h1", "100B", 8, second),
        );
        let r = report(&text);
        assert!(r.passed(), "{first}/{second}: {:?}\n{}", r.notes, r.table());
        assert_eq!((r.ops.posted, r.ops.completed, r.ops.failed), (16, 16, 0));
        assert_eq!(r.packets.dropped, 0, "no fault: nothing is lost");
    }
}

/// The same mix over a path that loses, duplicates and reorders, with a
/// third size from h0 too: retransmissions and reordering change which
/// SEND takes which buffer, never whether it fits.
/// The longest SEND is planned last but arrives first: h1's 100 B SENDs
/// come first in the file (their buffers are posted first) and are held
/// 20 µs on h1's link, so h0's 4 KiB SENDs take the buffers planned for
/// them. Those buffers must have grown when the longer SENDs were planned.
#[test]
fn buffers_planned_before_a_longer_send_grow_to_fit_it() {
    let text = format!(
        "name = \"sizes\"\ntime_limit = \"50ms\"\n[topology]\nkind = \"star\"\nhosts = 3\n{}{}\
         [[fault]]\nmodel = \"delay\"\ndelay = \"20us\"\nsrc = [\"h1\"]\n",
        sends("h1", "100B", 8, "0us"),
        sends("h0", "4KiB", 8, "0us"),
    );
    let r = report(&text);
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    assert_eq!((r.ops.completed, r.ops.failed), (16, 0));
}

#[test]
fn sends_of_three_sizes_from_two_senders_land_over_a_rough_path() {
    let text = format!(
        "name = \"sizes\"\nseed = 3\ntime_limit = \"50ms\"\n\
         [topology]\nkind = \"star\"\nhosts = 3\n{}{}{}\
         [[fault]]\nmodel = \"loss\"\np = 0.05\n\
         [[fault]]\nmodel = \"reorder\"\np = 0.1\ngap = 3\ndelay = \"5us\"\n\
         [[fault]]\nmodel = \"duplicate\"\np = 0.05\n",
        sends("h0", "3000B", 6, "0us"),
        sends("h1", "1B", 6, "0us"),
        sends("h0", "9KiB", 6, "1us"),
    );
    let r = report(&text);
    assert!(r.passed(), "{:?}\n{}", r.notes, r.table());
    assert_eq!((r.ops.completed, r.ops.failed), (18, 0));
    assert!(r.retransmits > 0, "the faults bit");
}
