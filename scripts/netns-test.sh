#!/usr/bin/env bash
# The UDP bridge between two network namespaces joined by a veth pair, with
# the kernel itself damaging the traffic:
#   - nftables drops 5 % of the protocol's datagrams at random (numgen
#     random), in each direction;
#   - a tbf rate limit with a small queue on each veth end drops what
#     overflows it (congestion drops);
#   - where the kernel has the netem qdisc, netem also delays, duplicates
#     and reorders (these kernels usually lack it; the script says so).
# Then `udrma bridge serve` runs in one namespace and `udrma bridge put
# --verify` of SIZE (default 256MiB) in the other; the test passes when the
# bytes read back equal the bytes written and the kernel really dropped
# packets. Second, two two-host scenarios (scenarios/examples/two-hosts.toml,
# RDMA; two-hosts-msg.toml, messaging) each run split across the namespaces, one `udrma host` process per host,
# finding each other with HELLO, with nftables dropping 10 % of the sends
# each way (a send is a GSO batch of up to 64 datagrams, so 5 % would often
# drop none of a run this small) on top of the scenario's own fault rules; both processes must pass their
# checks. (Between the two, the first part runs twice more: without tail
# loss probes, --no-tail-probe, for comparison (the first must have sent
# probes: they are on by default), and in authenticated mode, --key, with a
# smaller put.) Third, congestion control over the same tbf: NSCC must cut the
# tbf's drops at least 10x (goodput is printed beside it), and CE marks
# set by nftables must come back as ECN echoes. Everything is
# removed on exit, failure included.
#
# Usage: sudo scripts/netns-test.sh [SIZE]      (UDRMA_BIN overrides the binary)
# Exit: 0 pass, 1 fail, 0 with "SKIPPED: ..." when it cannot run here.
set -euo pipefail

SIZE="${1:-256MiB}"
PORT=18791
BIN="${UDRMA_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/udrma}"
TAG="udrma$$"
NS_A="${TAG}a"
NS_B="${TAG}b"
ADDR_A=10.77.0.1
ADDR_B=10.77.0.2
RATE="${UDRMA_TBF_RATE:-1gbit}"
TBF_BURST="${UDRMA_TBF_BURST:-64kb}"
TBF_LIMIT="${UDRMA_TBF_LIMIT:-256kb}"
SERVER_PID=""
# Without a controller (the first two parts) WRITE bursts (256 packets in
# flight) overflow the tbf queue: those are the congestion drops. A READ request
# calls for a whole 64 KiB op of responses and a retried READ calls for all
# of them again, so a response burst larger than the queue would be
# tail-dropped the same way on every retry: the READ window keeps one burst
# (47 datagrams) inside the queue.
WINDOW="${UDRMA_WINDOW:---read-window 64KiB}"
LOG="$(mktemp -d)"

skip() { echo "SKIPPED: $*"; exit 0; }

[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, nftables, tc)"
for tool in ip nft tc; do
    command -v "$tool" >/dev/null || skip "'$tool' not found (apt-get install iproute2 nftables)"
done
[ -x "$BIN" ] || skip "no udrma binary at $BIN (cargo build --release first)"

cleanup() {
    set +e
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    ip netns del "$NS_A" 2>/dev/null
    ip netns del "$NS_B" 2>/dev/null
    rm -rf "$LOG"
}
trap cleanup EXIT INT TERM

ip netns add "$NS_A" || skip "cannot create network namespaces here"
ip netns add "$NS_B"
ip link add "${TAG}va" type veth peer name "${TAG}vb"
ip link set "${TAG}va" netns "$NS_A"
ip link set "${TAG}vb" netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev "${TAG}va"
ip -n "$NS_B" addr add "$ADDR_B/24" dev "${TAG}vb"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "${TAG}va" up
ip -n "$NS_B" link set "${TAG}vb" up

# 5 % random drop of udrma datagrams leaving each namespace.
nft_rules() {
    local match="$1"
    ip netns exec "$2" nft -f - <<NFT
table inet udrma {
    chain out {
        type filter hook output priority 0; policy accept;
        udp $match $PORT numgen random mod 100 < 5 counter drop
    }
}
NFT
}
nft_rules dport "$NS_A"   # client -> server
nft_rules sport "$NS_B"   # server -> client

# Rate limit with a small queue on both ends (congestion drops).
NETEM=no
if ip netns exec "$NS_B" tc qdisc add dev "${TAG}vb" root netem delay 1ms 200us duplicate 2% reorder 25% 50% 2>/dev/null; then
    NETEM=yes
    ip netns exec "$NS_B" tc qdisc add dev "${TAG}vb" parent 1: handle 10: tbf rate "$RATE" burst "$TBF_BURST" limit "$TBF_LIMIT" 2>/dev/null || true
else
    ip netns exec "$NS_B" tc qdisc add dev "${TAG}vb" root tbf rate "$RATE" burst "$TBF_BURST" limit "$TBF_LIMIT"
fi
ip netns exec "$NS_A" tc qdisc add dev "${TAG}va" root tbf rate "$RATE" burst "$TBF_BURST" limit "$TBF_LIMIT"
if [ "$NETEM" = yes ]; then
    echo "netem: delay 1ms±200us, duplicate 2%, reorder 25% on the server's egress"
else
    echo "netem: not available in this kernel; damage is nftables random drop + tbf congestion drops"
fi

# Not --quiet: the server's per-second stats lines carry its count of
# data that arrived twice, read below.
ip netns exec "$NS_B" "$BIN" bridge serve --bind "$ADDR_B:$PORT" --region "$SIZE" $WINDOW >"$LOG/serve.out" 2>&1 &
SERVER_PID=$!
sleep 0.5

echo "put --verify $SIZE from $NS_A to $ADDR_B:$PORT (tbf $RATE, 5% nft drop each way)"
set +e
ip netns exec "$NS_A" "$BIN" bridge put --peer "$ADDR_B:$PORT" --size "$SIZE" --verify --json $WINDOW >"$LOG/put.json" 2>"$LOG/put.err"
RC=$?
set -e
cat "$LOG/put.json" "$LOG/put.err"

counter() { ip netns exec "$1" nft list ruleset | sed -n 's/.*counter packets \([0-9]*\).*/\1/p' | head -1; }
DROP_A=$(counter "$NS_A")
DROP_B=$(counter "$NS_B")
TBF_A=$(ip netns exec "$NS_A" tc -s qdisc show dev "${TAG}va" | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1)
TBF_B=$(ip netns exec "$NS_B" tc -s qdisc show dev "${TAG}vb" | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | paste -sd+ | bc)
echo "kernel drops: nftables client->server $DROP_A, server->client $DROP_B; tbf client $TBF_A, server $TBF_B"

if [ "$RC" -ne 0 ]; then
    echo "FAIL: put exited $RC"
    exit 1
fi
grep -q '"verified": true' "$LOG/put.json" || { echo "FAIL: not verified"; exit 1; }
if [ "${DROP_A:-0}" -eq 0 ] || [ "${DROP_B:-0}" -eq 0 ]; then
    echo "FAIL: nftables dropped nothing in one direction: the test proved nothing"
    exit 1
fi
if [ "${TBF_A:-0}" -eq 0 ]; then
    echo "FAIL: tbf dropped nothing: no congestion drops, the test proved less than it claims"
    exit 1
fi
echo "PASS: $SIZE byte-exact through kernel drops"

# ---- retransmissions against what was lost. nftables counts the bytes
# of the sends it drops (a GSO send carries many datagrams), so bytes over
# a full datagram's size (MTU 1400 + 68 B of udrma header and ICRC + 28 B
# of UDP/IP) estimates the datagrams lost; the tbf counts datagrams. A
# retransmission is spurious when its packet had arrived: the server then
# drops the copy as a duplicate (its stats line's "dup"), as does the
# client for a READ response asked for twice ("dup_dropped").
# A send the kernel drops on the server's side is a batch of
# acknowledgements, and the client cannot tell a lost acknowledgement from
# lost data: each such drop may cost one retransmission of data that had
# arrived (a tail probe or the timer re-asks, and the server's answer to the
# copy is the acknowledgement the client missed). Measured 2026-12-04: with
# the server->client rule off, 405 copies arrived twice; with it on, about
# one more per dropped server send (1,264 for 1,294 drops; 2,004 for 1,414 on
# a busy CI machine). So those are allowed for, and the check is on the rest.
nft_bytes() { ip netns exec "$1" nft list ruleset | sed -n 's/.*counter packets [0-9]* bytes \([0-9]*\).*/\1/p' | head -1; }
sleep 1.2   # one more of the server's per-second stats lines
DUP_SRV=$(sed -n 's/.*| dup \([0-9]*\) retx.*/\1/p' "$LOG/serve.out" | tail -1)
DUP_CLI=$(sed -n 's/.*"dup_dropped": \([0-9]*\).*/\1/p' "$LOG/put.json" | head -1)
RETX=$(sed -n 's/.*"retransmits": \([0-9]*\).*/\1/p' "$LOG/put.json" | head -1)
LOST=$(( ($(nft_bytes "$NS_A") + $(nft_bytes "$NS_B")) / 1496 + ${TBF_A:-0} + ${TBF_B:-0} ))
TWICE=$(( ${DUP_SRV:-0} + ${DUP_CLI:-0} ))
BEYOND=$(( TWICE - ${DROP_B:-0} ))
[ "$BEYOND" -lt 0 ] && BEYOND=0
echo "retransmissions: $RETX (data resent and READ re-asks) for about $LOST datagrams lost; $TWICE arrived twice (server $DUP_SRV, client $DUP_CLI), $BEYOND beyond one per dropped acknowledgement send ($DROP_B)"
if [ -z "$DUP_SRV" ] || [ -z "$RETX" ] || [ "$((BEYOND * 10))" -gt "$RETX" ]; then
    echo "FAIL: beyond one per lost acknowledgement send, more than a tenth of the retransmissions were of datagrams that had arrived (or the server or client printed no figures)"
    exit 1
fi
echo "PASS: beyond one per lost acknowledgement send, at most a tenth of the retransmissions were spurious ($BEYOND of $RETX)"

# ---- tail loss probes (on by default over sockets): the put above must
# have sent some; the same put with --no-tail-probe, for comparison.
field() { sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p" "$2" | head -1; }
figures() { echo "$(field gbps "$1") Gb/s, $(field tail_probes "$1") probes ($(field spurious_tail_probes "$1") spurious), $(field timeouts "$1") timeouts, $(field retransmits "$1") retransmits ($(field spurious_fast_retransmits "$1") fast ones found spurious)"; }
echo "with tail probes: $(figures "$LOG/put.json")"
if [ "$(field tail_probes "$LOG/put.json")" -eq 0 ]; then
    echo "FAIL: no tail probe went through the drops: the test proved nothing about them"
    exit 1
fi
# The timer is a last resort: most losses are found by a later packet's
# acknowledgement or a probe's (231-296 timeouts for 22-37 thousand
# retransmissions with the timeout hold, 2026-12; 465-1,442 before it and
# about 10,000 for 27,000 before lost answers stopped widening the
# reordering window, docs/congestion.md). On a busy host the hold is what
# keeps this: without it, 6,554-8,907 timeouts on one shared core.
if [ "$(( $(field timeouts "$LOG/put.json") * 10 ))" -gt "$(field retransmits "$LOG/put.json")" ]; then
    echo "FAIL: more than a tenth of the retransmissions waited for the timer"
    exit 1
fi
echo "PASS: the timer found at most a tenth of the losses"
set +e
ip netns exec "$NS_A" "$BIN" bridge put --peer "$ADDR_B:$PORT" --size "$SIZE" --verify --json $WINDOW --no-tail-probe >"$LOG/put-noprobe.json" 2>"$LOG/put-noprobe.err"
RC=$?
set -e
if [ "$RC" -ne 0 ] || ! grep -q '"verified": true' "$LOG/put-noprobe.json"; then
    cat "$LOG/put-noprobe.json" "$LOG/put-noprobe.err"
    echo "FAIL: put with --no-tail-probe exited $RC or did not verify"
    exit 1
fi
echo "without (--no-tail-probe): $(figures "$LOG/put-noprobe.json")"
echo "PASS: $SIZE byte-exact with and without tail probes"

# ---- the same in authenticated mode (--key): every datagram sealed, the
# kernel still dropping 5 % each way and the tbf overflowing.
kill "$SERVER_PID" 2>/dev/null || true
wait "$SERVER_PID" 2>/dev/null || true
AUTH_SIZE="${UDRMA_AUTH_SIZE:-64MiB}"
printf '7 %s\n' "$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')" > "$LOG/keys.txt"
ip netns exec "$NS_B" "$BIN" bridge serve --bind "$ADDR_B:$PORT" --region "$AUTH_SIZE" --quiet $WINDOW --key "$LOG/keys.txt" >"$LOG/serve-auth.out" 2>&1 &
SERVER_PID=$!
sleep 0.5
echo "put --verify $AUTH_SIZE, authenticated (--key), same drops"
set +e
ip netns exec "$NS_A" "$BIN" bridge put --peer "$ADDR_B:$PORT" --size "$AUTH_SIZE" --verify --json $WINDOW --key "$LOG/keys.txt" >"$LOG/put-auth.json" 2>"$LOG/put-auth.err"
RC=$?
set -e
if [ "$RC" -ne 0 ] || ! grep -q '"verified": true' "$LOG/put-auth.json"; then
    cat "$LOG/put-auth.json" "$LOG/put-auth.err"
    echo "FAIL: authenticated put exited $RC or did not verify"
    exit 1
fi
OPENED=$(sed -n 's/.*"opened": \([0-9]*\).*/\1/p' "$LOG/put-auth.json" | head -1)
BAD=$(sed -n 's/.*"bad_tag": \([0-9]*\).*/\1/p' "$LOG/put-auth.json" | head -1)
sed -n 's/.*"\(gbps\|retransmits\)": \([0-9.]*\).*/  \1 \2/p' "$LOG/put-auth.json"
echo "authenticated: $OPENED datagrams opened by the client, $BAD bad tags"
if [ "${OPENED:-0}" -eq 0 ]; then
    echo "FAIL: nothing was opened: the put did not run authenticated"
    exit 1
fi
echo "PASS: $AUTH_SIZE byte-exact, authenticated, through kernel drops"

# ---- scenarios split across the namespaces: h0 in A, h1 in B
H0_PORT=19000
H1_PORT=19001
host_drop() {
    ip netns exec "$1" nft -f - <<NFT
table inet udrmahost {
    chain out {
        type filter hook output priority 0; policy accept;
        udp dport $2 numgen random mod 100 < 10 counter drop
    }
}
NFT
}
split() {
    local name="$1"
    local scenario
    scenario="$(cd "$(dirname "$0")/.." && pwd)/scenarios/examples/$name"
    for ns in "$NS_A" "$NS_B"; do ip netns exec "$ns" nft flush ruleset; done
    host_drop "$NS_A" "$H1_PORT"   # h0 -> h1
    host_drop "$NS_B" "$H0_PORT"   # h1 -> h0
    echo "udrma host: $name, h0 at $ADDR_A:$H0_PORT, h1 at $ADDR_B:$H1_PORT (10% nft drop each way)"
    set +e
    ip netns exec "$NS_B" "$BIN" host "$scenario" --as h1 --bind "$ADDR_B:$H1_PORT" --peer "h0=$ADDR_A:$H0_PORT" >"$LOG/h1.out" 2>&1 &
    local h1_pid=$!
    ip netns exec "$NS_A" "$BIN" host "$scenario" --as h0 --bind "$ADDR_A:$H0_PORT" --peer "h1=$ADDR_B:$H1_PORT" >"$LOG/h0.out" 2>&1
    local rc0=$?
    wait "$h1_pid"
    local rc1=$?
    set -e
    echo "--- h0"; cat "$LOG/h0.out"
    echo "--- h1"; cat "$LOG/h1.out"
    local drop_a drop_b
    drop_a=$(counter "$NS_A")
    drop_b=$(counter "$NS_B")
    echo "kernel drops: nftables h0->h1 $drop_a, h1->h0 $drop_b"
    if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ]; then
        echo "FAIL: udrma host ($name) exited $rc0 (h0) and $rc1 (h1)"
        exit 1
    fi
    if [ "${drop_a:-0}" -eq 0 ] && [ "${drop_b:-0}" -eq 0 ]; then
        echo "FAIL: nftables dropped nothing between the hosts ($name): the test proved less than it claims"
        exit 1
    fi
    echo "PASS: $name across two namespaces, every check of both hosts"
}
# RDMA WRITEs and a READ; then the messaging layer (osu_latency and
# osu_bw loops at once).
split two-hosts.toml
split two-hosts-msg.toml

# ---- congestion control over real UDP: the same tbf (1 Gbit/s, 256 kB
# queue), no random drop. Without a controller the OP table's 256 packets
# overflow the tbf queue; with NSCC (told the 1 Gbit/s rate and a 1 ms
# round trip) the tbf must drop at least 10x fewer.
# Then nftables marks 2 % of the ECN-capable datagrams Congestion
# Experienced (these kernels have no fq_codel or red to mark them): the
# marks must come back to the sender as ECN echoes read off the socket.
CC_SIZE="${UDRMA_CC_SIZE:-256MiB}"
if [ -n "$SERVER_PID" ]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
fi
cc_run() {
    local cc="$1" mark="$2"
    for ns in "$NS_A" "$NS_B"; do ip netns exec "$ns" nft flush ruleset; done
    # A fresh tbf on each end (and fresh drop counters).
    ip netns exec "$NS_A" tc qdisc del dev "${TAG}va" root 2>/dev/null || true
    ip netns exec "$NS_B" tc qdisc del dev "${TAG}vb" root 2>/dev/null || true
    ip netns exec "$NS_A" tc qdisc add dev "${TAG}va" root tbf rate "$RATE" burst "$TBF_BURST" limit "$TBF_LIMIT"
    ip netns exec "$NS_B" tc qdisc add dev "${TAG}vb" root tbf rate "$RATE" burst "$TBF_BURST" limit "$TBF_LIMIT"
    if [ "$mark" -gt 0 ]; then
        ip netns exec "$NS_A" nft -f - <<NFT
table inet udrmaecn {
    chain out {
        type filter hook output priority 0; policy accept;
        udp dport $PORT ip ecn ect0 numgen random mod 1000 < $mark ip ecn set ce counter
    }
}
NFT
    fi
    # (UDRMA_CC_FLAGS: more bridge flags for both ends, to try a knob.)
    local flags="--cc $cc --cc-rate 1Gbps --cc-rtt 1ms $WINDOW ${UDRMA_CC_FLAGS:-}"
    ip netns exec "$NS_B" "$BIN" bridge serve --bind "$ADDR_B:$PORT" --region "$CC_SIZE" --quiet $flags >"$LOG/cc-serve.out" 2>&1 &
    SERVER_PID=$!
    sleep 0.5
    set +e
    ip netns exec "$NS_A" "$BIN" bridge put --peer "$ADDR_B:$PORT" --size "$CC_SIZE" --verify --json $flags >"$LOG/cc.json" 2>"$LOG/cc.err"
    local rc=$?
    set -e
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
    if [ "$rc" -ne 0 ] || ! grep -q '"verified": true' "$LOG/cc.json"; then
        cat "$LOG/cc.json" "$LOG/cc.err"
        echo "FAIL: put with --cc $cc exited $rc or did not verify"
        exit 1
    fi
    CC_DROPS=$(ip netns exec "$NS_A" tc -s qdisc show dev "${TAG}va" | sed -n 's/.*dropped \([0-9]*\).*/\1/p' | head -1)
    CC_GBPS=$(sed -n 's/.*"gbps": \([0-9.e-]*\).*/\1/p' "$LOG/cc.json")
    CC_ECHOES=$(sed -n 's/.*"ecn_echoes": \([0-9]*\).*/\1/p' "$LOG/cc.json")
    CC_RETX=$(sed -n 's/.*"retransmits": \([0-9]*\).*/\1/p' "$LOG/cc.json")
    echo "cc $cc, CE marking $mark/1000: tbf drops $CC_DROPS, goodput $CC_GBPS Gb/s, retransmits $CC_RETX, ECN echoes $CC_ECHOES"
}
# A pair of runs, without a controller and with NSCC.
cc_pair() {
    cc_run none 0
    NONE_DROPS=$CC_DROPS NONE_GBPS=$CC_GBPS
    cc_run nscc 0
    NSCC_DROPS=$CC_DROPS NSCC_GBPS=$CC_GBPS
}
cc_pair
if [ "$NONE_DROPS" -lt $(( 10 * (NSCC_DROPS > 0 ? NSCC_DROPS : 1) )) ]; then
    echo "FAIL: NSCC left $NSCC_DROPS tbf drops against $NONE_DROPS without a controller (want 10x fewer)"
    exit 1
fi
# Goodput is a figure, not a verdict: real-time runs on a shared machine
# are no place for a performance target (docs/benchmarks.md holds those).
# In the runs docs/congestion.md lists, NSCC moved 256 MiB at 0.93-0.94
# Gb/s with nothing resent, no controller at 0.78-0.91 with hundreds to
# thousands of drops. On 2026-11-27 the same machine gave NSCC 0.70-0.78
# against 0.93 with the engine of 181d5a1 as with this one, so the ratio is
# printed for whoever tracks it, and the pass rests on the drops.
RATIO=$(echo "scale=3; $NSCC_GBPS / $NONE_GBPS" | bc -l)
echo "NOTE: NSCC goodput $NSCC_GBPS Gb/s against $NONE_GBPS without a controller (ratio $RATIO)"
echo "PASS: NSCC over the tbf: $NSCC_DROPS drops against $NONE_DROPS, $NSCC_GBPS Gb/s against $NONE_GBPS"
cc_run nscc 20
if [ "${CC_ECHOES:-0}" -eq 0 ]; then
    echo "FAIL: CE marks set by nftables never came back as ECN echoes"
    exit 1
fi
echo "PASS: real CE marks read off the socket and echoed ($CC_ECHOES echoes; goodput $CC_GBPS Gb/s against $NSCC_GBPS unmarked)"
