#!/usr/bin/env bash
# A crate outside the workspace that depends on udrma-sim by path, as the
# README and docs/library.md show: its dependency tree must hold none of
# the CLI's and the bridge's heavy crates, its lock file must pin only
# versions the workspace's pins (docs/library.md, "Pinning the versions
# CI tested", whose steps this follows), and examples/custom_app.rs,
# copied in as its main, must build and pass. Run from the repository
# root (CI does).
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
# tested. The first cargo command (without --locked) adds the scratch
# crate to it and drops what the crate does not use.
cp Cargo.lock "$scratch/"
cd "$scratch"
tree=$(cargo tree -e normal --prefix none)
# Every package version the lock file now holds is one the workspace's
# holds: nothing was resolved afresh.
versions() { awk '/^name = /{n=$3} /^version = /{print n, $3}' "$1" | sort -u; }
fresh=$(comm -23 <(versions Cargo.lock) <(versions "$repo/Cargo.lock") | grep -v '^"scratch" ' || true)
if [ -n "$fresh" ]; then
    echo "the scratch crate's lock file has versions the workspace's does not:"
    echo "$fresh"
    exit 1
fi
crates=$(echo "$tree" | sed 's/ (\*)$//' | sort -u | wc -l)
echo "udrma-sim's tree: $crates crates"
# docs/library.md states the count.
if ! grep -q "| $crates crates; no clap" "$repo/docs/library.md"; then
    echo "docs/library.md does not say that udrma-sim's tree has $crates crates"
    exit 1
fi
heavy=$(echo "$tree" | grep -E '^(clap|tokio|quinn-udp|ring|rayon|indicatif) v' | sort -u || true)
if [ -n "$heavy" ]; then
    echo "udrma-sim pulls in what a library user's tests should not compile:"
    echo "$heavy"
    exit 1
fi
# From here on the lock file may not change, as for a user's crate.
CARGO_TARGET_DIR="$repo/target/scratch" cargo run --locked --quiet > out.txt
tail -n 2 out.txt
grep -q '^invariants  all held' out.txt
