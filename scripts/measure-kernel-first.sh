#!/usr/bin/env bash
# Issue 15's benchmark: the running monitor on the simulated 64-logical-GPU node with the real
# amd-smi's cost (most of a second of CPU a call, 3 s for the first), 2,000 extra processes on
# the host, 1 s refresh, in a 200x60 tmux pane. Side by side in one run:
#   kernel first (the default, --source auto), the amd-smi-every-tick path (--source amd-smi),
#   and kernel first while amd-smi hangs.
# For each: partop's own CPU and its children's (the amd-smi calls) over the window, amd-smi
# calls per minute (the fake amd-smi's call log), RSS, the time to the first full screen, and
# key-to-screen latency (a Tab every 0.5 s; PARTOP_KEY_LATENCY_LOG, from the input thread's read
# to the frame on the terminal), which spans the full /proc scans (every 30 s).
# Usage: scripts/measure-kernel-first.sh [SECONDS] [EXTRA_PROCESSES] [AMD_SMI_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/partop}
SECS=${1:-60}
EXTRA=${2:-2000}
AMD_SECS=${3:-20}
KEYS=${KEYS:-65}
SCEN=cpx-64-busy
hz=$(getconf CLK_TCK)

extra=()
cleanup() {
    ((${#extra[@]})) && kill "${extra[@]}" 2>/dev/null || true
    tmux -L pkf-$$ kill-server 2>/dev/null || true
}
trap cleanup EXIT
for ((i = 0; i < EXTRA; i++)); do
    sleep 100000 &
    extra+=($!)
done
echo "host: $(nproc) CPUs, $(ls /proc | grep -c '^[0-9]') processes; $SCEN at a 1 s refresh"
printf '%-28s %8s %9s %9s %10s %7s %10s %9s %9s\n' path own% children% tree% amd-smi/min RSS_MiB first_ms key_p50ms key_p99ms

measure() {
    local label=$1 secs=$2 cost=$3
    shift 3
    local home sock lat t0 t1 pid calls c0 c1
    home=$(mktemp -d)
    sock=pkf-$$
    lat=$home/latency.log
    t0=$(date +%s%N)
    tmux -L "$sock" new-session -d -x 200 -y 60 \
        "env XDG_STATE_HOME=$home PARTOP_SIM_AMD_SMI_COST=$cost PARTOP_KEY_LATENCY_LOG=$lat $BIN --sim $SCEN --refresh 1 --timeout 600 $*"
    until tmux -L "$sock" capture-pane -p 2>/dev/null | grep -q "64 logical"; do sleep 0.02; done
    t1=$(date +%s%N)
    sleep 15 # past the first amd-smi reads (3 s cold, then steady)
    pid=$(pgrep -n -f "$BIN --sim $SCEN")
    calls=$(ls "$home"/partop/sim/node-*.amdsmi-calls 2>/dev/null | head -1)
    # The cost window: nobody at the keyboard (the monitor's steady state).
    read -r ut st cut cst < <(awk '{print $14, $15, $16, $17}' "/proc/$pid/stat")
    c0=$(awk -v p="$pid" '$2 == p' "$calls" 2>/dev/null | wc -l)
    sleep "$secs"
    read -r ut2 st2 cut2 cst2 < <(awk '{print $14, $15, $16, $17}' "/proc/$pid/stat")
    c1=$(awk -v p="$pid" '$2 == p' "$calls" 2>/dev/null | wc -l)
    rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
    # The latency window: a Tab every 0.5 s for KEYS seconds (past at least one full /proc
    # scan, every 30 s).
    : >"$lat"
    for ((i = 0; i < KEYS * 2; i++)); do
        tmux -L "$sock" send-keys Tab
        sleep 0.5
    done
    sort -n "$lat" | awk -v label="$label" -v a=$((ut2 + st2 - ut - st)) -v c=$((cut2 + cst2 - cut - cst)) \
        -v hz="$hz" -v s="$secs" -v calls=$((c1 - c0)) -v rss="$rss" -v first=$(((t1 - t0) / 1000000)) '
        { v[NR] = $1 }
        END {
            p50 = NR ? v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))] / 1000 : -1
            p99 = NR ? v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))] / 1000 : -1
            printf "%-28s %7.2f%% %8.2f%% %8.2f%% %10.1f %7.1f %10d %9.2f %9.2f\n", label,
                a / hz / s * 100, c / hz / s * 100, (a + c) / hz / s * 100, calls * 60 / s,
                rss / 1024, first, p50, p99
        }'
    tmux -L "$sock" send-keys q
    sleep 2
    tmux -L "$sock" kill-server 2>/dev/null || true
    rm -rf "$home"
}

measure "kernel first (default)" "$SECS" on
measure "amd-smi every tick" "$AMD_SECS" on --source amd-smi
measure "kernel first, amd-smi hung" "$AMD_SECS" hang
