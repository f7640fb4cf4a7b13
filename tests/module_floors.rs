//! Inside a crate the modules form floors too (docs/design.md §2): each
//! imports only modules on floors below its own, so no crate has an
//! import circle. A `crate::` path (or a `use crate::{..}` group) in a
//! module's code that names a module on its floor's level or above fails
//! this test. A folder module's children form floors of their own
//! (`crate::plan::build` must not import `crate::plan::validate`).
//! Comments and `#[cfg(test)]` code are not read: tests may reach
//! anywhere.

use std::path::Path;

/// A crate's folder and its top-level modules, bottom floor first; and
/// the items its root re-exports, with the module each comes from.
struct Floors {
    /// The folder of the modules.
    src: &'static str,
    /// The file that declares them (`lib.rs`, or the folder module's own).
    decl: &'static str,
    /// How code names them (`crate::`, or `crate::plan::`).
    prefix: &'static str,
    order: &'static [&'static str],
    root_items: &'static [(&'static str, &'static str)],
}

const CRATES: [Floors; 7] = [
    Floors {
        src: "nic-model/src",
        decl: "lib.rs",
        prefix: "crate::",
        order: &[
            "ids",
            "mask",
            "optable",
            "peermap",
            "rtt",
            "cc",
            "cost",
            "sgl",
            "memory",
            "translation",
            "config",
            "wr",
            "registry",
            "tombstones",
            "reduce",
            "stats",
            "nic",
            "pair",
        ],
        root_items: &[
            ("Access", "memory"),
            ("MrKey", "ids"),
            ("AckMode", "config"),
            ("NicConfig", "config"),
            ("CostModel", "cost"),
            ("Nic", "nic"),
            ("Ecn", "nic"),
            ("RxMeta", "nic"),
            ("Transmit", "nic"),
            ("WorkRequest", "wr"),
            ("Event", "wr"),
            ("WrId", "wr"),
            ("Stats", "stats"),
            ("Occupancy", "stats"),
        ],
    },
    Floors {
        src: "fabric/src",
        decl: "lib.rs",
        prefix: "crate::",
        order: &[
            "error", "matrix", "prefetch", "queue", "trace", "topology", "routing", "world",
            "shapes", "sim",
        ],
        root_items: &[
            ("LinkParams", "topology"),
            ("Topology", "topology"),
            ("World", "world"),
        ],
    },
    Floors {
        src: "scenarios/src",
        decl: "lib.rs",
        prefix: "crate::",
        order: &["file", "plan", "backend", "report", "run"],
        root_items: &[
            ("Scenario", "file"),
            ("ScenarioError", "file"),
            ("Resolved", "plan"),
            ("ScenarioFile", "file"),
            ("Report", "report"),
            ("Ladder", "report"),
            ("Timeline", "report"),
            ("RunOptions", "run"),
            ("run", "run"),
        ],
    },
    Floors {
        src: "scenarios/src/file",
        decl: "../file.rs",
        prefix: "crate::file::",
        order: &[
            "units", "cdf", "schema", "keys", "edit", "source", "checks", "applies",
        ],
        root_items: &[
            ("Scenario", "source"),
            ("ScenarioError", "source"),
            ("ScenarioFile", "schema"),
        ],
    },
    Floors {
        src: "scenarios/src/plan",
        decl: "../plan.rs",
        prefix: "crate::plan::",
        order: &[
            "profile",
            "build",
            "ncplan",
            "collplan",
            "flows",
            "rdma",
            "messaging",
            "schedplan",
            "resolved",
            "validate",
            "scenario",
            "filled",
        ],
        root_items: &[("Resolved", "resolved")],
    },
    Floors {
        src: "scenarios/src/report",
        decl: "../report.rs",
        prefix: "crate::report::",
        order: &[
            "svg", "drops", "families", "ladder", "osu", "pfc", "timeline",
        ],
        root_items: &[("Ladder", "ladder"), ("Timeline", "timeline")],
    },
    Floors {
        src: "scenarios/src/run",
        decl: "../run.rs",
        prefix: "crate::run::",
        order: &[
            "observed",
            "leftover",
            "host_end",
            "rdma",
            "messaging",
            "noncontig",
            "collective",
            "scheduled",
        ],
        root_items: &[],
    },
];

/// Modules a crate root declares.
fn declared(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))
                .and_then(|m| m.strip_suffix(';'))
        })
        .map(String::from)
        .collect()
}

/// A module's code: its file and, for a folder module, every file in the
/// folder and the folders within; comment lines and `#[cfg(test)]` code
/// left out.
fn code_of(src: &Path, m: &str) -> String {
    let mut files = vec![src.join(format!("{m}.rs"))];
    // The folder and every folder in it (`plan/build/nic.rs` is part of
    // `plan`).
    let mut dirs = vec![src.join(m)];
    while let Some(dir) = dirs.pop() {
        if !dir.is_dir() {
            continue;
        }
        let mut inner: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        inner.sort();
        for p in inner {
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let mut out = String::new();
    for f in files.iter().filter(|f| f.exists()) {
        let text = std::fs::read_to_string(f).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for l in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The modules `code` names through `crate::` (paths and `use` groups).
fn imports(code: &str, f: &Floors) -> Vec<String> {
    let mut out = Vec::new();
    // Modules by their path; root re-exports by `crate::` alone.
    for (prefix, items) in [(f.prefix, true), ("crate::", false)] {
        if !items && f.root_items.is_empty() {
            continue;
        }
        named(code, prefix, f, items, &mut out);
    }
    out.sort();
    out.dedup();
    out
}

/// Adds to `out` the floors `code` names after `prefix`: modules of the
/// floor when `modules`, otherwise the root's re-exported items.
fn named(code: &str, prefix: &str, f: &Floors, modules: bool, out: &mut Vec<String>) {
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
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
            if modules && f.order.contains(&n) {
                out.push(n.to_string());
            } else if let Some((_, m)) = f.root_items.iter().find(|(i, _)| *i == n) {
                out.push(m.to_string());
            }
        }
    }
}

#[test]
fn modules_import_only_the_floors_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for f in &CRATES {
        let src = root.join(f.src);
        let mut modules = declared(&std::fs::read_to_string(src.join(f.decl)).unwrap());
        modules.sort();
        let mut floors: Vec<String> = f.order.iter().map(|s| s.to_string()).collect();
        floors.sort();
        assert_eq!(
            modules, floors,
            "{}: every module has a floor, and only those",
            f.src
        );
        for (i, m) in f.order.iter().enumerate() {
            for dep in imports(&code_of(&src, m), f) {
                let j = f.order.iter().position(|o| *o == dep).unwrap();
                if j > i {
                    wrong.push(format!("{}: {m} imports {dep}, a floor above it", f.src));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_reader_finds_imports_as_written() {
    let f = &CRATES[2];
    let code = "use crate::plan::build::{self, host};\nuse crate::{Scenario, report::Report};\nlet x = crate::run::go();";
    assert_eq!(imports(code, f), ["file", "plan", "report", "run"]);
    let plan = &CRATES[4];
    let code = "use crate::plan::build::{self, host};\nuse crate::{Resolved, file::units};\nlet x = crate::plan::validate::go();";
    assert_eq!(imports(code, plan), ["build", "resolved", "validate"]);
}
