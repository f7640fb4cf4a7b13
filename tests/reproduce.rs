//! `udrma reproduce`: every published trend holds (exit 0), and
//! docs/reproduce.md is what the command writes today (regenerate it with
//! `cargo run --release -- reproduce --markdown docs/reproduce.md --plots docs/img`).

use std::process::Command;

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "reruns ~300 simulations of up to 2 MiB transfers: run with --release (CI does)"
)]
fn every_trend_holds_and_the_doc_is_current() {
    let dir = std::env::temp_dir().join(format!("udrma-reproduce-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let md = dir.join("reproduce.md");
    let out = Command::new(env!("CARGO_BIN_EXE_udrma"))
        .args(["reproduce", "--markdown"])
        .arg(&md)
        .arg("--plots")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a trend does not hold:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Non-contiguous study"), "{stdout}");
    assert!(stdout.contains("MPI's collective algorithms"), "{stdout}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let ours = std::fs::read_to_string(&md).unwrap();
    let shipped = std::fs::read_to_string(root.join("docs/reproduce.md")).unwrap_or_default();
    assert!(
        ours == shipped,
        "docs/reproduce.md is out of date: run `cargo run --release -- reproduce --markdown docs/reproduce.md --plots docs/img`"
    );
    for svg in ["noncontig-count.svg", "noncontig-size.svg"] {
        let a = std::fs::read_to_string(dir.join(svg)).unwrap();
        let b = std::fs::read_to_string(root.join("docs/img").join(svg)).unwrap_or_default();
        assert!(a == b, "docs/img/{svg} is out of date");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
