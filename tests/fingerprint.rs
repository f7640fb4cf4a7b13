//! The state fingerprint `udrma check --merge-states` merges on is sound:
//! two runs that reach one fingerprint by different paths go on alike.
//! Here a run with no fault and runs with one fault each (a duplicated,
//! a delayed, a dropped packet) are fingerprinted before every event;
//! wherever two of them meet at one fingerprint, what each judges from
//! there on (every packet, at its gap from the meeting) and every check
//! at the end are the same. The faulted runs do meet the fault-free one
//! (else the test would prove nothing).

use udrma_fabric::Egress;
use udrma_proto::Opcode;
use udrma_scenarios::{run, Report, RunOptions, Scenario};

const PAIR: &str = include_str!("../scenarios/examples/check-pair.toml");

/// One fault rule on the `nth` (from 1) packet of `opcode`, as a file gives it.
fn with_fault(model: &str, extra: &str, opcode: &str, nth: u32) -> String {
    format!(
        "{PAIR}\n[[fault]]\nname = \"f\"\nmodel = \"{model}\"\n{extra}every = {nth}\noffset = {}\ntimes = 1\nopcodes = [\"{opcode}\"]\n",
        nth - 1
    )
}

/// `text` with one more rule: drop the packet at position `at` of the
/// run `r` of `text` (the n-th of its opcode, as a rule counts).
fn dropping(text: &str, r: &Report, at: usize) -> Option<String> {
    let e = r.egress.as_ref().unwrap();
    let op = e[at].opcode?;
    let n = 1 + (0..at).filter(|&i| e[i].opcode == Some(op)).count();
    let name = OPCODES.iter().find(|(_, o)| *o == op)?.0;
    Some(format!(
        "{text}\n[[fault]]\nname = \"then\"\nmodel = \"loss\"\np = 1.0\nevery = {n}\noffset = {}\ntimes = 1\nopcodes = [\"{name}\"]\n",
        n - 1
    ))
}

const OPCODES: [(&str, Opcode); 6] = [
    ("write", Opcode::Write),
    ("read-request", Opcode::ReadRequest),
    ("read-response", Opcode::ReadResponse),
    ("ack", Opcode::Ack),
    ("sack", Opcode::SelectiveAck),
    ("completion", Opcode::Completion),
];

fn fingerprinted(text: &str) -> Report {
    let sc = Scenario::parse("fp.toml", text).unwrap();
    run(
        &sc,
        RunOptions {
            fingerprints: Some(0),
            ..RunOptions::default()
        },
    )
    .unwrap()
}

/// What a run judges from packet `from` on, each at its gap from `at`.
fn future(egress: &[Egress], from: usize, at: u64) -> Vec<String> {
    egress[from..]
        .iter()
        .map(|e| {
            format!(
                "+{} {} {:?} {}>{} {:?} {:?} m{} s{}",
                e.t.as_ps() - at,
                e.link,
                e.direction,
                e.src,
                e.dst,
                e.opcode,
                e.flags,
                e.msg,
                e.seg
            )
        })
        .collect()
}

/// Two runs from the packets where they met at one fingerprint: the
/// same packets judged at the same gaps (from the first one's time), and
/// the same checks at the end.
fn alike((an, a, ja): (&str, &Report, usize), (bn, b, jb): (&str, &Report, usize), how: &str) {
    let (ea, eb) = (a.egress.as_ref().unwrap(), b.egress.as_ref().unwrap());
    assert_eq!(
        future(ea, ja, ea[ja].t.as_ps()),
        future(eb, jb, eb[jb].t.as_ps()),
        "{an} (from packet {ja}) and {bn} (from packet {jb}) met at one fingerprint and went on differently{how}"
    );
    assert_eq!(
        a.checks, b.checks,
        "{an} and {bn} met at one fingerprint and were judged differently{how}"
    );
}

/// Every event's (packets judged before it, its time, its fingerprint).
fn states(r: &Report) -> Vec<(usize, u128)> {
    let f = r.fingerprints.clone().expect("fingerprints asked");
    assert_eq!(f.refused, None, "a part of the state could not say");
    f.taken
        .into_iter()
        .filter(|(_, _, f)| *f != 0)
        .map(|(j, _, f)| (j as usize, f))
        .collect()
}

#[test]
fn runs_that_meet_at_one_fingerprint_go_on_alike() {
    // (Name, file, the fault's packet: its opcode and which of them.)
    let runs: Vec<(String, Report, usize, String)> = [
        ("no fault", PAIR.to_string(), None),
        (
            "dup ack 1",
            with_fault("duplicate", "p = 1.0\n", "ack", 1),
            Some((Opcode::Ack, 1)),
        ),
        (
            "delay ack 1",
            with_fault("delay", "delay = \"300ns\"\n", "ack", 1),
            Some((Opcode::Ack, 1)),
        ),
        (
            "dup write 2",
            with_fault("duplicate", "p = 1.0\n", "write", 2),
            Some((Opcode::Write, 2)),
        ),
        (
            "drop ack 2",
            with_fault("loss", "p = 1.0\n", "ack", 2),
            Some((Opcode::Ack, 2)),
        ),
    ]
    .into_iter()
    .map(|(name, text, fault)| {
        let r = fingerprinted(&text);
        // As the search reads a run: from the packet after its fault on
        // (before it, the rule still waits to strike: not yet the state
        // the fingerprint describes).
        let start = fault.map_or(0, |(op, nth)| {
            let e = r.egress.as_ref().unwrap();
            1 + (0..e.len())
                .filter(|&i| e[i].opcode == Some(op))
                .nth(nth - 1)
                .expect("the fault's packet was judged")
        });
        (name.to_string(), r, start, text)
    })
    .collect();
    let mut met = 0;
    let mut dropped_after = 0;
    for (i, (a_name, a, a_start, a_text)) in runs.iter().enumerate() {
        for (b_name, b, b_start, b_text) in &runs[i + 1..] {
            let from = |s: Vec<(usize, u128)>, start: usize| -> Vec<(usize, u128)> {
                s.into_iter().filter(|(j, _)| *j >= start).collect()
            };
            let (sa, sb) = (from(states(a), *a_start), from(states(b), *b_start));
            let ea = a.egress.as_ref().unwrap();
            let eb = b.egress.as_ref().unwrap();
            for &(ja, fa) in &sa {
                let Some(&(jb, _)) = sb.iter().find(|(_, fb)| *fb == fa) else {
                    continue;
                };
                // The events' times: the first packet each judges from
                // there is at the same gap, so compare from a shared
                // origin, the first packet's own time.
                if ja >= ea.len() || jb >= eb.len() {
                    continue;
                }
                met += 1;
                alike((a_name, a, ja), (b_name, b, jb), "");
                // And alike under one more fault: the packet each judges
                // first from there on, dropped.
                let (Some(ta), Some(tb)) = (dropping(a_text, a, ja), dropping(b_text, b, jb))
                else {
                    continue;
                };
                let (a2, b2) = (fingerprinted(&ta), fingerprinted(&tb));
                // Only where each drop struck (a copy a rule made is
                // counted by the rules but not logged: an n-th counted
                // from the log may name another packet).
                if a2.packets.dropped != a.packets.dropped + 1
                    || b2.packets.dropped != b.packets.dropped + 1
                {
                    continue;
                }
                dropped_after += 1;
                alike(
                    (a_name, &a2, ja),
                    (b_name, &b2, jb),
                    " with that packet dropped",
                );
            }
        }
    }
    assert!(met > 10, "only {met} meetings: the runs hardly meet");
    assert!(
        dropped_after >= 8,
        "only {dropped_after} meetings tried with a drop"
    );
}
