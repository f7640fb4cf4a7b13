#!/usr/bin/env bash
# A crate outside the workspace that depends on udrma-sim by path, as the
# README shows: its dependency tree must hold none of the CLI's and the
# bridge's heavy crates, and examples/custom_app.rs, copied in as its
# main, must build and pass. Run from the repository root (CI does).
set -euo pipefail
repo=$PWD
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/src"
cat > "$scratch/Cargo.toml" <<TOML
[package]
name = "scratch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
udrma-sim = { path = "$repo/sim" }

[workspace]
TOML
cp examples/custom_app.rs "$scratch/src/main.rs"
# The workspace's lock file, so the scratch crate builds the versions CI
# tested (cargo drops what it does not use).
cp Cargo.lock "$scratch/"
cd "$scratch"
tree=$(cargo tree -e normal --prefix none)
echo "udrma-sim's tree: $(echo "$tree" | sort -u | wc -l) crates"
heavy=$(echo "$tree" | grep -E '^(clap|tokio|quinn-udp|ring|rayon|indicatif) v' | sort -u || true)
if [ -n "$heavy" ]; then
    echo "udrma-sim pulls in what a library user's tests should not compile:"
    echo "$heavy"
    exit 1
fi
CARGO_TARGET_DIR="$repo/target/scratch" cargo run --quiet > out.txt
tail -n 2 out.txt
grep -q '^invariants  all held' out.txt
