//! What the CLI tests share: running the binary, scratch paths, examples.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `udrma ARGS` to completion.
pub fn udrma(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_udrma"))
        .args(args)
        .output()
        .expect("running udrma")
}

/// A scratch path for this test binary.
pub fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The path of a shipped example scenario.
pub fn example(name: &str) -> String {
    format!("{}/scenarios/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}
