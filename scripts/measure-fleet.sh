#!/usr/bin/env bash
# Issue 18's benchmark: the fleet view over 256 simulated nodes (`partop sim fleet`: 256
# loopback `partop serve` endpoints, each a CPX/NPS4 node of 64 logical GPUs with its own load,
# sampling every 5 s, the refresh the fleet view asks for at this size), in a 200x60 tmux pane.
# Measures the time to the first full fleet screen (every node reporting), the view's CPU over
# a window with nobody at the keyboard (own and children's), its RSS, and key-to-screen latency
# (a Down every 0.5 s; PARTOP_KEY_LATENCY_LOG, from the input thread's read to the frame).
# Usage: scripts/measure-fleet.sh [NODES] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/partop}
NODES=${1:-256}
SECS=${2:-60}
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
sock=pmf-$$
cleanup() {
    [ -n "${sim_pid:-}" ] && kill "$sim_pid" 2>/dev/null || true
    tmux -L "$sock" kill-server 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
PARTOP_SIM_AMD_SMI_COST=off XDG_STATE_HOME=$work "$BIN" --sim cpx-nps4-small-models snapshot --json >"$work/template.json"
port=$((30000 + $$ % 20000))
"$BIN" sim fleet --nodes "$NODES" --base-port "$port" --template "$work/template.json" \
    --every 5 --hosts-out "$work/hosts" >"$work/sim.log" 2>&1 &
sim_pid=$!
until [ -s "$work/hosts" ]; do sleep 0.1; done
lat=$work/latency.log
t0=$(date +%s%N)
tmux -L "$sock" new-session -d -x 200 -y 60 \
    "env XDG_STATE_HOME=$work PARTOP_KEY_LATENCY_LOG=$lat $BIN fleet --hosts-file $work/hosts"
until tmux -L "$sock" capture-pane -p 2>/dev/null | grep -q "nodes reporting $NODES of $NODES"; do sleep 0.02; done
t1=$(date +%s%N)
sleep 10
pid=$(pgrep -n -f "$BIN fleet --hosts-file")
read -r a0 c0 < <(awk '{print $14 + $15, $16 + $17}' "/proc/$pid/stat")
sleep "$SECS"
read -r a1 c1 < <(awk '{print $14 + $15, $16 + $17}' "/proc/$pid/stat")
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
: >"$lat"
for ((i = 0; i < 60; i++)); do
    tmux -L "$sock" send-keys Down
    sleep 0.5
done
echo "host: $(nproc) CPUs; $NODES simulated nodes (64 logical GPUs each), sampling every 5 s"
sort -n "$lat" | awk -v a=$((a1 - a0)) -v c=$((c1 - c0)) -v hz="$hz" -v s="$SECS" -v rss="$rss" \
    -v first=$(((t1 - t0) / 1000000)) '
    { v[NR] = $1 }
    END {
        p50 = NR ? v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))] / 1000 : -1
        p99 = NR ? v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))] / 1000 : -1
        printf "fleet view: own %.2f%% children %.2f%% of a core; RSS %.1f MiB; first full screen %d ms; key p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d keys)\n",
            a / hz / s * 100, c / hz / s * 100, rss / 1024, first, p50, p99, v[NR] / 1000, NR
    }'
tmux -L "$sock" send-keys q
sleep 1
