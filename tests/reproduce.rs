//! `udrma reproduce`: every published trend holds (exit 0),
//! docs/reproduce.md is what the command writes today (regenerate it with
//! `cargo run --release -- reproduce --markdown docs/reproduce.md --plots docs/img`),
//! and the lines docs/cli.md shows are lines it prints.

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
    shown_in_cli_md(
        &stdout,
        &std::fs::read_to_string(root.join("docs/cli.md")).unwrap(),
    );
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

/// The block under `$ udrma reproduce` in docs/cli.md: each line, in
/// order, is a line `udrma reproduce` printed, or its start when the
/// shown line ends with `  ...` (the rest of a long row left out); a line
/// `...` stands for lines left out.
fn shown_in_cli_md(printed: &str, cli_md: &str) {
    let shown: Vec<&str> = cli_md
        .lines()
        .skip_while(|l| *l != "$ udrma reproduce")
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert!(
        shown.len() >= 5,
        "docs/cli.md lost its `udrma reproduce` block"
    );
    let mut rest = printed.lines();
    for line in shown.into_iter().filter(|l| *l != "...") {
        let found = match line.strip_suffix("  ...") {
            Some(start) => rest.any(|p| p.starts_with(start)),
            None => rest.any(|p| p == line),
        };
        assert!(
            found,
            "docs/cli.md shows a line `udrma reproduce` no longer prints, in this order:\n{line}\nIt printed:\n{printed}"
        );
    }
}
