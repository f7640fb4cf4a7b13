//! The crate's modules form floors: each imports only modules on the
//! floors below it (the order the crate docs in `lib.rs` give), so there
//! is no import circle (the design's rule for every crate). A `crate::`
//! path to a later module fails this test.

use std::collections::BTreeMap;
use std::path::Path;

/// The floors, bottom first (as the crate docs list them).
const FLOORS: [&str; 21] = [
    "units",
    "schema",
    "edit",
    "scenario",
    "checks",
    "applies",
    "profile",
    "build",
    "ncplan",
    "collplan",
    "validate",
    "backend",
    "report",
    "leftover",
    "svg",
    "ladder",
    "rdma",
    "messaging",
    "noncontig",
    "collective",
    "run",
];

/// Modules `lib.rs` declares (`pub mod x;` lines).
fn declared(src: &Path) -> Vec<String> {
    std::fs::read_to_string(src.join("lib.rs"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .map(|l| l.trim_end_matches(';').to_string())
        .collect()
}

/// The modules a file names through `crate::` (paths and `use` groups);
/// items re-exported at the root count as their home module.
fn imports(text: &str, modules: &[String]) -> Vec<String> {
    let root_items: BTreeMap<&str, &str> = [
        ("Scenario", "scenario"),
        ("ScenarioError", "scenario"),
        ("ScenarioFile", "schema"),
        ("Report", "report"),
        ("Ladder", "ladder"),
        ("RunOptions", "run"),
        ("run", "run"),
    ]
    .into_iter()
    .collect();
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            group[..end]
                .split(',')
                .map(|n| n.trim().split("::").next().unwrap_or("").trim())
                .collect()
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            vec![&rest[..end]]
        };
        for n in names {
            let n = n.trim_start_matches("self").trim();
            if modules.iter().any(|m| m == n) {
                out.push(n.to_string());
            } else if let Some(m) = root_items.get(n) {
                out.push(m.to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn modules_import_only_the_floors_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = declared(&src);
    modules.sort();
    let mut floors: Vec<String> = FLOORS.map(String::from).to_vec();
    floors.sort();
    assert_eq!(modules, floors, "every module has a floor, and only those");
    let order: Vec<String> = FLOORS.map(String::from).to_vec();
    let mut wrong = Vec::new();
    for (i, m) in order.iter().enumerate() {
        let text = std::fs::read_to_string(src.join(format!("{m}.rs"))).unwrap();
        // Tests inside a module may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
        for dep in imports(code, &order) {
            if dep == *m {
                continue;
            }
            let j = order.iter().position(|o| *o == dep).unwrap();
            if j > i {
                wrong.push(format!("{m} imports {dep}, a floor above it"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_check_reads_imports_as_written() {
    let modules: Vec<String> = ["build", "report", "scenario", "run"]
        .map(String::from)
        .to_vec();
    let text = "use crate::build::{self, host};\nuse crate::report::{self, Report};\nuse crate::{Scenario, ScenarioError};\nlet x = crate::run::go();";
    assert_eq!(
        imports(text, &modules),
        vec!["build", "report", "run", "scenario"]
    );
}
