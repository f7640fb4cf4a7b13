#!/usr/bin/env bash
# Bridge vs plain UDP on loopback, side by side in one run (the figures of
# docs/benchmarks.md). Needs iperf3 (apt-get install iperf3) and a release
# build. Not a test: the numbers depend on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./target/release/udrma
PORT=18795
DGRAM=1468   # one udrma datagram: 1400 B payload + 68 B header and ICRC

"$BIN" bridge serve --bind 127.0.0.1:$PORT --region 256MiB --quiet &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
sleep 0.5

echo "== bandwidth: udrma perf bandwidth (window 64) vs iperf3 -u -l $DGRAM -b 0"
"$BIN" perf bandwidth --peer 127.0.0.1:$PORT --min-size 64KiB --max-size 1MiB --bytes 1GiB
iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
sleep 0.3
iperf3 -c 127.0.0.1 -p 5299 -u -l $DGRAM -b 0 -t 5 | grep -E "sender|receiver"
echo "== bandwidth: a plain sender with the bridge's GSO/GRO batching and no engine (udp_blast)"
cargo run --release --quiet -p udrma-bridge --example udp_blast -- 5 $DGRAM
echo "== the protocol's own cost per datagram (emit and parse, ICRC included), one core"
cargo run --release --quiet -p udrma-bridge --example datagram_floor

echo "== latency: udrma perf latency vs a plain UDP pingpong of the same size"
"$BIN" perf latency --peer 127.0.0.1:$PORT --max-size 1KiB --iterations 20000 --warmup 1000 \
    | awk 'NR <= 2 || $1 == 1 || $1 == 64 || $1 == 1024'
cargo run --release --quiet -p udrma-bridge --example udp_pingpong -- 1 64 1024

echo "== authenticated mode (--key) vs plain, side by side: put --verify 256MiB, three rounds each, alternating"
KEYS="$(mktemp)"
printf '1 %s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$KEYS"
APORT=$((PORT + 1))
"$BIN" bridge serve --bind 127.0.0.1:$APORT --region 256MiB --quiet --key "$KEYS" &
ASERVER=$!
trap 'kill $SERVER $ASERVER 2>/dev/null || true; rm -f "$KEYS"' EXIT
sleep 0.5
for round in 1 2 3; do
    "$BIN" bridge put --peer 127.0.0.1:$PORT --size 256MiB --verify | sed "s/^/plain         round $round: /"
    "$BIN" bridge put --peer 127.0.0.1:$APORT --size 256MiB --verify --key "$KEYS" | sed "s/^/authenticated round $round: /"
done
echo "== latency, authenticated"
"$BIN" perf latency --peer 127.0.0.1:$APORT --max-size 1KiB --iterations 20000 --warmup 1000 --key "$KEYS" \
    | awk 'NR <= 2 || $1 == 1 || $1 == 64 || $1 == 1024'

echo "== latency, busy-polling (--busy-poll on both sides) vs a plain pingpong spinning on both sides"
BPORT=$((PORT + 2))
"$BIN" bridge serve --bind 127.0.0.1:$BPORT --region 16MiB --quiet --busy-poll &
BSERVER=$!
trap 'kill $SERVER $ASERVER $BSERVER 2>/dev/null || true; rm -f "$KEYS"' EXIT
sleep 0.5
"$BIN" perf latency --peer 127.0.0.1:$BPORT --max-size 1KiB --iterations 20000 --warmup 1000 --busy-poll \
    | awk 'NR <= 2 || $1 == 1 || $1 == 64 || $1 == 1024'
kill $BSERVER 2>/dev/null || true
sleep 0.3
cargo run --release --quiet -p udrma-bridge --example udp_pingpong -- --spin 1 64 1024
