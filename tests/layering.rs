//! The workspace's crates are floors with one-way dependencies (see
//! docs/design.md): proto ← nic-model ← app ← host; app ← fabric,
//! bridge (which drive apps without the host software) ← scenarios ←
//! the root; fault-injection depends on proto only. A crate that depends
//! on one above it (fabric or bridge on host, say) fails this test.

use std::path::Path;

/// (directory, package, the udrma crates it may depend on).
const FLOORS: [(&str, &str, &[&str]); 9] = [
    ("proto", "udrma-proto", &[]),
    ("fault-injection", "udrma-faults", &["udrma-proto"]),
    ("nic-model", "udrma-nic", &["udrma-proto"]),
    ("app", "udrma-app", &["udrma-proto", "udrma-nic"]),
    (
        "host",
        "udrma-host",
        &["udrma-proto", "udrma-nic", "udrma-app"],
    ),
    (
        "fabric",
        "udrma-fabric",
        &["udrma-proto", "udrma-nic", "udrma-app", "udrma-faults"],
    ),
    (
        "sim",
        "udrma-sim",
        &[
            "udrma-proto",
            "udrma-nic",
            "udrma-app",
            "udrma-faults",
            "udrma-fabric",
        ],
    ),
    (
        "bridge",
        "udrma-bridge",
        &["udrma-proto", "udrma-nic", "udrma-app", "udrma-faults"],
    ),
    (
        "scenarios",
        "udrma-scenarios",
        &[
            "udrma-proto",
            "udrma-nic",
            "udrma-app",
            "udrma-host",
            "udrma-faults",
            "udrma-fabric",
            "udrma-bridge",
        ],
    ),
];

/// The `udrma-*` names in a manifest's `[dependencies]` table.
fn udrma_deps(manifest: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps {
            if let Some(name) = line.split(['.', ' ', '=']).next() {
                if name.starts_with("udrma-") {
                    out.push(name.to_string());
                }
            }
        }
    }
    out
}

#[test]
fn crates_depend_only_on_the_floors_below_them() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for (dir, package, allowed) in FLOORS {
        let manifest = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(&format!("name = \"{package}\"")),
            "{dir} is {package}"
        );
        for dep in udrma_deps(&manifest) {
            if !allowed.contains(&dep.as_str()) {
                wrong.push(format!("{package} depends on {dep}, which is not below it"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_engine_holds_no_host_software() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("nic-model/src");
    for f in ["messaging.rs", "via.rs"] {
        assert!(!src.join(f).exists(), "{f} belongs in host/");
    }
}

#[test]
fn the_reader_finds_dependencies() {
    let m = "[package]\nname = \"x\"\n[dependencies]\nudrma-proto.workspace = true\nserde = \"1\"\nudrma-nic = { path = \"../nic\" }\n[dev-dependencies]\nudrma-fabric.workspace = true\n";
    assert_eq!(udrma_deps(m), vec!["udrma-proto", "udrma-nic"]);
}
