#!/usr/bin/env bash
# Measures the running monitor's own CPU and memory on a simulated node, from /proc, over a
# given time: partop itself (utime+stime) apart from its children (the amd-smi calls, cutime+
# cstime of reaped children). Usage: scripts/measure-monitor.sh [SCENARIO] [SECONDS] [REFRESH]
set -euo pipefail
BIN=${BIN:-target/release/partop}
SCEN=${1:-cpx-64-busy}
SECS=${2:-60}
REFRESH=${3:-1}
sock="partop-measure-$$"
home=$(mktemp -d)
tmux -L "$sock" new-session -d -x 200 -y 60 "env XDG_STATE_HOME=$home $BIN --sim $SCEN --refresh $REFRESH"
trap 'tmux -L "$sock" kill-server 2>/dev/null || true; rm -rf "$home"' EXIT
sleep 5
pid=$(pgrep -n -f "$BIN --sim $SCEN")
hz=$(getconf CLK_TCK)
read -r ut st cut cst < <(awk '{print $14, $15, $16, $17}' "/proc/$pid/stat")
sleep "$SECS"
read -r ut2 st2 cut2 cst2 < <(awk '{print $14, $15, $16, $17}' "/proc/$pid/stat")
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
awk -v a=$((ut2 + st2 - ut - st)) -v c=$((cut2 + cst2 - cut - cst)) -v hz="$hz" -v s="$SECS" -v rss="$rss" -v hwm="$hwm" -v sc="$SCEN" -v r="$REFRESH" 'BEGIN {
  printf "scenario %s, refresh %ss, %ss measured\n", sc, r, s
  printf "partop own CPU:          %.2f%% of one core\n", a / hz / s * 100
  printf "amd-smi calls (children): %.2f%% of one core\n", c / hz / s * 100
  printf "partop resident memory:  %.1f MiB (peak %.1f MiB)\n", rss / 1024, hwm / 1024
}'
tmux -L "$sock" send-keys q
sleep 2
