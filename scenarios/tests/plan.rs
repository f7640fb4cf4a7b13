//! A run takes its plan: planning a file and running the plan is `run`;
//! a plan's fault rules can be swapped without planning again (what
//! `udrma check` does for every schedule), with the same outcome as
//! planning the file with those rules; and what a swap cannot carry is
//! refused by name.

use udrma_scenarios::file::schema::FaultSpec;
use udrma_scenarios::{plan, run, run_plan, BackendKind, RunOptions, Scenario};

const PAIR: &str = r#"
name = "plan-pair"
seed = 7
time_limit = "100ms"
[topology]
kind = "pair"
[[workload]]
kind = "many"
op = "write"
src = "h0"
dst = "h1"
size = "16KiB"
count = 4
"#;

const FAULTS: &str = r#"
[[fault]]
name = "lossy"
model = "loss"
p = 0.2
[[fault]]
name = "late"
model = "delay"
delay = "30us"
src = ["h1"]
"#;

fn faults_of(text: &str) -> Vec<FaultSpec> {
    Scenario::parse_unchecked("faults.toml", text)
        .unwrap()
        .file
        .faults
}

#[test]
fn a_plan_with_swapped_faults_runs_as_the_file_with_them() {
    let with = Scenario::parse("with.toml", &format!("{PAIR}{FAULTS}")).unwrap();
    let planned = run(&with, RunOptions::default()).unwrap();
    assert!(planned.packets.dropped > 0, "the rules struck nothing");

    let without = Scenario::parse("without.toml", PAIR).unwrap();
    let base = plan(&without, 7, BackendKind::Sim).unwrap();
    let clean = run_plan(&base, RunOptions::default()).unwrap();
    assert_eq!(clean.packets.dropped, 0);

    let swapped = base
        .with_faults(faults_of(&format!("{PAIR}{FAULTS}")))
        .unwrap();
    let report = run_plan(&swapped, RunOptions::default()).unwrap();
    assert_eq!(report.trace_hash, planned.trace_hash);
    assert_eq!(report.packets, planned.packets);
    // The base plan is untouched.
    assert_eq!(
        run_plan(&base, RunOptions::default()).unwrap().trace_hash,
        clean.trace_hash
    );
}

#[test]
fn a_swap_refuses_what_it_cannot_carry() {
    let sc = Scenario::parse("pair.toml", PAIR).unwrap();
    let base = plan(&sc, 7, BackendKind::Sim).unwrap();
    let mut registration = faults_of(&format!(
        "{PAIR}[[fault]]\nname = \"reg\"\nmodel = \"registration-failure\"\np = 0.5\n"
    ));
    let e = base.with_faults(registration.clone()).unwrap_err();
    assert!(e.message.contains("registration-failure"), "{e}");
    // A rule on a link the topology does not have is refused at its name.
    registration[0] = faults_of(&format!(
        "{PAIR}[[fault]]\nname = \"far\"\nmodel = \"loss\"\np = 0.5\nlinks = [\"nowhere\"]\n"
    ))
    .remove(0);
    let e = base.with_faults(registration).unwrap_err();
    assert!(e.message.contains("nowhere"), "{e}");
}

/// The link flow figures are read against: the topology's (here a
/// profile's 2 Gb/s, 0.5 µs) in the simulated fabric, split or not; over
/// real sockets the file's (100 Gb/s and 1 µs when it gives none).
#[test]
fn the_host_link_is_the_topologys_in_the_fabric_and_the_files_over_sockets() {
    let sc = Scenario::parse(
        "myrinet.toml",
        &PAIR.replace("[topology]", "profile = \"myrinet-lanai9\"\n[topology]"),
    )
    .unwrap();
    let sim = plan(&sc, 7, BackendKind::Sim).unwrap();
    assert_eq!(sim.host_link.0, 2_000_000_000);
    assert_eq!(sim.host_link.1.as_ps(), 500_000);
    let udp = plan(&sc, 7, BackendKind::Udp).unwrap();
    assert_eq!(udp.host_link.0, 100_000_000_000);
    assert_eq!(udp.host_link.1.as_ps(), 1_000_000);
}

/// A time limit of zero would run nothing and report it: refused, at
/// the key.
#[test]
fn a_zero_time_limit_is_refused_at_its_key() {
    let text = PAIR.replace("time_limit = \"100ms\"", "time_limit = \"0s\"");
    let e = Scenario::parse("zero.toml", &text).unwrap_err().to_string();
    assert!(
        e.starts_with("zero.toml:4:") && e.contains("time_limit = 0 lets nothing run"),
        "{e}"
    );
}
