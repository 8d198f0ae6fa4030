#!/usr/bin/env bash
# The kernel-first monitor's own CPU by pane size: `partop --sim cpx-64-busy` at a 1 s refresh
# with 2,000 extra processes on the host, 200x60 and 80x24 alternating, each measured from
# /proc/PID/stat over a window after a 15 s warm-up (own utime+stime; children's cutime+cstime).
# Usage: scripts/measure-pane-size.sh [SECONDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/partop}
SECS=${1:-90}
ROUNDS=${2:-2}
hz=$(getconf CLK_TCK)
extra=()
trap '((${#extra[@]})) && kill "${extra[@]}" 2>/dev/null; tmux -L psz-$$ kill-server 2>/dev/null || true' EXIT
for ((i = 0; i < 2000; i++)); do
    sleep 100000 &
    extra+=($!)
done
for ((r = 0; r < ROUNDS; r++)); do
    for size in "200 60" "80 24"; do
        set -- $size
        home=$(mktemp -d)
        tmux -L psz-$$ new-session -d -x "$1" -y "$2" "env XDG_STATE_HOME=$home $BIN --sim cpx-64-busy --refresh 1"
        sleep 15
        pid=$(pgrep -n -f "$BIN --sim cpx-64-busy")
        read -r a b c d < <(awk '{print $14, $15, $16, $17}' "/proc/$pid/stat")
        sleep "$SECS"
        read -r a2 b2 c2 d2 < <(awk '{print $14, $15, $16, $17}' "/proc/$pid/stat")
        awk -v s="$1x$2" -v o=$((a2 + b2 - a - b)) -v c=$((c2 + d2 - c - d)) -v hz="$hz" -v w="$SECS" \
            'BEGIN { printf "%-7s own %.2f%%  children %.2f%%  tree %.2f%%\n", s, o / hz / w * 100, c / hz / w * 100, (o + c) / hz / w * 100 }'
        tmux -L psz-$$ send-keys q
        sleep 2
        tmux -L psz-$$ kill-server 2>/dev/null || true
        rm -rf "$home"
    done
done
