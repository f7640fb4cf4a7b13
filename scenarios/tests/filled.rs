//! `udrma validate` prints a scenario with every key filled in. Pasted
//! back, that text must be the same scenario: for every example and test
//! fixture the plan resolved from it equals the file's own, two small
//! ones run to the same report and trace hash, and filling in a filled
//! file changes no value (only the `# default` marks go).

use udrma_scenarios::plan::filled::filled;
use udrma_scenarios::plan::resolved::{plan, BackendKind};
use udrma_scenarios::{run, RunOptions, Scenario};

fn files() -> Vec<std::path::PathBuf> {
    let root = env!("CARGO_MANIFEST_DIR");
    let mut all = Vec::new();
    for dir in ["examples", "tests/ranks"] {
        for e in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "toml") {
                all.push(p);
            }
        }
    }
    all.sort();
    all
}

fn parse(name: &str, text: &str) -> Scenario {
    Scenario::parse(name, text).unwrap_or_else(|e| panic!("{name}:\n{e}\n{text}"))
}

/// What a run is made of, as text: everything but where the file's text
/// is (for errors) and the `[[fault]]` tables as written.
fn made_of(sc: &Scenario) -> String {
    let p = plan(sc, sc.file.seed, BackendKind::Sim).unwrap();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
        p.resolved, p.work, p.time_limit, p.checks, p.outputs, p.cc, p.host_link, p.kinds, p.name
    )
}

/// The values of a filled text, without its comments.
fn values(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split("  # ").next().unwrap().to_string())
        .collect()
}

#[test]
fn every_example_filled_in_is_the_same_scenario() {
    for path in files() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).unwrap();
        let sc = parse(&name, &text);
        let once = filled(&sc, None).unwrap_or_else(|e| panic!("{name}: {e}"));
        let back = parse(&name, &once);
        assert_eq!(
            made_of(&sc),
            made_of(&back),
            "{name}: the filled-in file plans otherwise:\n{once}"
        );
        let twice = filled(&back, None).unwrap();
        assert_eq!(
            values(&once)[1..],
            values(&twice)[1..],
            "{name}: filling in again changed a value"
        );
        assert!(
            !twice.contains("# default\n") && !twice.contains("  # default"),
            "{name}: {twice}"
        );
    }
}

/// Three examples, run both ways: the same report (wall time aside) and
/// trace hash; a profile's values are marked as the profile's.
#[test]
fn a_filled_in_file_runs_the_same() {
    for name in ["demo.toml", "lossy-write.toml", "myvia-pingpong.toml"] {
        let path = format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).unwrap();
        let sc = parse(name, &text);
        let once = filled(&sc, None).unwrap();
        let json = |sc: &Scenario| {
            let mut v = serde_json::to_value(run(sc, RunOptions::default()).unwrap()).unwrap();
            for k in ["wall_s", "packet_hops_per_s"] {
                v.as_object_mut().unwrap().remove(k);
            }
            v
        };
        assert_eq!(json(&sc), json(&parse(name, &once)), "{name}");
        if text.contains("profile = ") {
            assert!(once.contains("  # profile "), "{name}: {once}");
        }
    }
}
