#!/usr/bin/env bash
# Issue 26's benchmark: the live cluster view (`partop fleet --kubernetes`) over NODES
# simulated GPU nodes as API objects on a real kube-apiserver on loopback (scripts/cluster-up.sh),
# GPU of them backed by simulated GPU nodes (`partop sim cluster --gpu-nodes`), with PODS GPU
# pods bound to them, in a 200x60 tmux pane. Measures the time to the first full screen (every
# node listed), the view's CPU over an idle window and over a window of churn (10 nodes
# relabelled every second), its RSS, key-to-screen latency (a Down every 0.3 s;
# PARTOP_KEY_LATENCY_LOG) and the requests it sends the API server (the view runs as its own
# user, `viewer`; the API server's audit log counts them).
# Usage: scripts/measure-cluster.sh [NODES] [GPU_NODES] [PODS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/partop}
BIN=$(realpath "$BIN")
NODES=${1:-1000}
GPU=${2:-10}
PODS=${3:-1000}
SECS=${4:-60}
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
sock=pmc-$$
cleanup() {
    tmux -L "$sock" kill-server 2>/dev/null || true
    [ -n "${sim_pid:-}" ] && kill "$sim_pid" 2>/dev/null || true
    scripts/cluster-up.sh --stop "$work/cp" || true
    rm -rf "$work"
}
trap cleanup EXIT
kc=$(scripts/cluster-up.sh "$work/cp")
kubectl() { "$(bash scripts/control-plane.sh)/kubectl" --kubeconfig="$kc" "$@"; }
export PARTOP_SIM_AMD_SMI_COST=off
t=$(date +%s%N)
"$BIN" sim cluster --kubeconfig "$kc" --nodes "$NODES" --gpu-nodes "$GPU" --dir "$work/sim" >"$work/sim.log" 2>&1 &
sim_pid=$!
until grep -qs '^ready:' "$work/sim.log"; do kill -0 "$sim_pid"; sleep 0.2; done
echo "sim cluster: $NODES nodes ($GPU simulated GPU nodes) made in $((($(date +%s%N) - t) / 1000000)) ms"
kubectl create namespace ml >/dev/null
kubectl -n ml create serviceaccount default >/dev/null
python3 - "$NODES" "$PODS" >"$work/pods.json" <<'PY'
import json, sys
nodes, pods = int(sys.argv[1]), int(sys.argv[2])
items = [{"apiVersion": "v1", "kind": "Pod",
          "metadata": {"name": f"job-{i:05d}", "namespace": "ml"},
          "spec": {"nodeName": f"sim-amd-{i % nodes:04d}",
                   "containers": [{"name": "c", "image": "vllm/vllm-openai:latest",
                                   "resources": {"limits": {"amd.com/gpu": "1"}}}]}}
         for i in range(pods)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
[ "$PODS" -gt 0 ] && kubectl create -f "$work/pods.json" >/dev/null
viewer=$work/cp/viewer.kubeconfig
lat=$work/latency.log
audit=$work/cp/audit.log
t0=$(date +%s%N)
tmux -L "$sock" new-session -d -x 200 -y 60 \
    "env XDG_STATE_HOME=$work PARTOP_KEY_LATENCY_LOG=$lat $BIN fleet --kubernetes --kubeconfig $viewer"
until tmux -L "$sock" capture-pane -p 2>/dev/null | grep -q " $NODES GPU nodes"; do sleep 0.02; done
t1=$(date +%s%N)
pid=$(pgrep -n -f "$BIN fleet --kubernetes")
requests() { grep -c '"username":"viewer"' "$audit" || true; }
r_first=$(requests)
sleep 5
r0=$(requests)
read -r a0 < <(awk '{print $14 + $15}' "/proc/$pid/stat")
sleep "$SECS"
read -r a1 < <(awk '{print $14 + $15}' "/proc/$pid/stat")
r1=$(requests)
churners=()
for ((i = 0; i < SECS; i++)); do
    names=$(for j in $(seq 0 9); do printf 'sim-amd-%04d ' $(((i * 10 + j) % NODES)); done)
    # shellcheck disable=SC2086
    kubectl label --overwrite node $names "partop.sim/churn=$i" >/dev/null &
    churners+=($!)
    sleep 1
done
wait "${churners[@]}"
read -r a2 < <(awk '{print $14 + $15}' "/proc/$pid/stat")
r2=$(requests)
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
hwm=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
: >"$lat"
for ((i = 0; i < 60; i++)); do
    tmux -L "$sock" send-keys Down
    sleep 0.3
done
echo "host: $(nproc) CPUs; $NODES nodes as API objects ($GPU simulated GPU nodes), $PODS GPU pods; $(basename "$(dirname "$BIN")") build"
sort -n "$lat" | awk -v idle=$((a1 - a0)) -v churn=$((a2 - a1)) -v hz="$hz" -v s="$SECS" -v rss="$rss" -v hwm="$hwm" \
    -v first=$(((t1 - t0) / 1000000)) -v rf="$r_first" -v ri=$((r1 - r0)) -v rc=$((r2 - r1)) '
    { v[NR] = $1 }
    END {
        p50 = NR ? v[int(NR * 0.5) + (NR * 0.5 > int(NR * 0.5))] / 1000 : -1
        p99 = NR ? v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))] / 1000 : -1
        printf "cluster view: first full screen %d ms (%d API requests to get there)\n", first, rf
        printf "  idle: %.2f%% of a core, %.1f API requests/min; churn (10 nodes relabelled/s): %.2f%% of a core, %.1f API requests/min\n",
            idle / hz / s * 100, ri * 60 / s, churn / hz / s * 100, rc * 60 / s
        printf "  RSS %.1f MiB (peak %.1f MiB); key p50 %.2f ms, p99 %.2f ms, max %.2f ms (%d keys)\n",
            rss / 1024, hwm / 1024, p50, p99, v[NR] / 1000, NR
    }'
tmux -L "$sock" send-keys q
sleep 1
