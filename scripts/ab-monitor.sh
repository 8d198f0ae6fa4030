#!/usr/bin/env bash
# A/B of the running monitor: kernel first on the simulated 64-logical-GPU node (cpx-64-busy),
# 1 s refresh, a 200x60 tmux pane, 2,000 extra processes on the host, nobody at the keyboard.
# The binaries given alternate, ROUNDS times, each for SECS seconds after a 12 s start; for
# each window: partop's own CPU and its reaped children's (utime+stime from /proc/PID/stat) as
# % of one core, and RSS. Same host, same run, so the binaries compare despite host noise.
# A binary older than commit 81eb950 aborts on the SIGHUP that ends each window and leaves its
# simulated node's workloads running; stop them after such a run.
# KEYS (tmux send-keys words, e.g. KEYS=9 for the History view's charts) are pressed 2 s after
# the start; a binary that binds nothing to them stays on its first view.
# Usage: ROUNDS=3 SECS=90 [KEYS=9] scripts/ab-monitor.sh OLD_BINARY NEW_BINARY [...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-60}
ROUNDS=${ROUNDS:-3}
(($#)) || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
extra=()
cleanup() {
    ((${#extra[@]})) && kill "${extra[@]}" 2>/dev/null || true
    tmux -L ab-$$ kill-server 2>/dev/null || true
}
trap cleanup EXIT
for ((i = 0; i < 2000; i++)); do
    sleep 100000 &
    extra+=($!)
done
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
    for b in "$@"; do
        home=$(mktemp -d)
        tmux -L ab-$$ new-session -d -x 200 -y 60 \
            "env HOME=$home XDG_STATE_HOME=$home/state XDG_CONFIG_HOME=$home/cfg $b --sim cpx-64-busy"
        if [ -n "${KEYS:-}" ]; then
            sleep 2
            # shellcheck disable=SC2086 # words, as tmux send-keys takes them
            tmux -L ab-$$ send-keys $KEYS
            sleep 10
        else
            sleep 12
        fi
        pid=$(tmux -L ab-$$ list-panes -F '#{pane_pid}' | head -1)
        read -r -a s0 < <(cut -d' ' -f14-17 "/proc/$pid/stat")
        sleep "$SECS"
        read -r -a s1 < <(cut -d' ' -f14-17 "/proc/$pid/stat")
        own=$((s1[0] + s1[1] - s0[0] - s0[1]))
        ch=$((s1[2] + s1[3] - s0[2] - s0[3]))
        rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
        printf 'round %s %s own %.3f%% children %.3f%% rss %s kB\n' "$r" "$b" \
            "$(echo "$own*100/$hz/$SECS" | bc -l)" "$(echo "$ch*100/$hz/$SECS" | bc -l)" "$rss"
        # SIGHUP, as a dropped terminal: partop stops its simulated node and exits.
        tmux -L ab-$$ kill-server
        sleep 3
        rm -rf "$home"
    done
done
