//! What the CLI tests share: running the binary, scratch paths, examples.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The variables a batch system sets that make `udrma sweep` run one
/// shard: cleared, so that tests run inside a Slurm job or a Kubernetes
/// Indexed Job behave as anywhere else.
pub const BATCH_VARS: [&str; 6] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
    "JOB_COMPLETION_INDEX",
];

/// `udrma` with the batch system's variables cleared.
pub fn command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_udrma"));
    for v in BATCH_VARS {
        c.env_remove(v);
    }
    c
}

/// Runs `udrma ARGS` to completion.
pub fn udrma(args: &[&str]) -> Output {
    command().args(args).output().expect("running udrma")
}

/// A scratch path for this test binary.
pub fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The path of a shipped example scenario.
pub fn example(name: &str) -> String {
    format!("{}/scenarios/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}
