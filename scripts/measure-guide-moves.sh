#!/usr/bin/env bash
# The AMD partitioning guide's moves on the simulated node at real speed (time_scale 1, the
# scenario's reload time): SPX/NPS1 -> DPX/NPS2 and back, with a registered model relaunched
# each time. Prints each apply's measured downtime beside the plan's estimate and the wall time.
# Usage: scripts/measure-guide-moves.sh [RELOAD_SECS]   (default 6, the simulator's default)
set -euo pipefail
cd "$(dirname "$0")/.."
reload=${1:-6}
# PARTOP_BIN=target/debug/partop measures a debug build (the moves are waits, not CPU).
if [ -z "${PARTOP_BIN:-}" ]; then
    cargo build --release --quiet
fi
bin=$(realpath "${PARTOP_BIN:-target/release/partop}")
dir=$(mktemp -d)
trap '"$bin" sim stop --state "$dir/n.json" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
export XDG_STATE_HOME=$dir/xdg XDG_CONFIG_HOME=$dir/xdg PARTOP_SIM_AMD_SMI_COST=off
cat > "$dir/s.toml" <<TOML
name = "guide"
description = "the AMD guide's node: one model per logical GPU"
product = "mi300x"
compute = "SPX"
memory = "NPS1"
rocm = "7.0.2"
seed = 7
reload_secs = $reload
[[workload]]
name = "mistral-12b"
kind = "model-server"
gpu = 0
vram_gb = 30
busy = 60
model = "mistralai/Mistral-Nemo-Instruct-2407"
TOML
"$bin" sim start "$dir/s.toml" --state "$dir/n.json" >/dev/null
for move in "DPX NPS2" "SPX NPS1" "DPX NPS2" "SPX NPS1"; do
    set -- $move
    # The model holds its GPU before the plan is made (the apply refuses a plan made without it).
    for _ in $(seq 50); do
        "$bin" --sim-state "$dir/n.json" plan --compute "$1" --memory "$2" --json > "$dir/p.json"
        grep -q '"model": "mistral-12b"' "$dir/p.json" && break
        sleep 0.2
    done
    start=$(date +%s.%N)
    out=$("$bin" --sim-state "$dir/n.json" apply "$dir/p.json" --yes)
    end=$(date +%s.%N)
    printf '%s/%s: %s; wall %.1fs\n' "$1" "$2" "$(echo "$out" | grep '^applied' | sed 's/^applied plan [0-9a-f]*: //')" "$(echo "$end - $start" | bc)"
done
