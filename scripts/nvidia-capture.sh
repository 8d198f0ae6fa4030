#!/usr/bin/env bash
# Captures, read only, what partop's NVIDIA fixtures hold, on a machine with an NVIDIA GPU:
# nvidia-smi's view (GPM through `dmon --gpm-metrics`, XID lines of the kernel log where
# readable), partop's NVML recording idle and under a PyTorch load (graphics-engine activity
# needs work to show), its snapshot and its /metrics. Changes no setting of the GPU (no MIG
# mode, clock, power limit, persistence or reset).
# Usage: scripts/nvidia-capture.sh PARTOP_BINARY OUT_DIR
set -u
b=$(realpath "$1")
o=$2
mkdir -p "$o"
home=$(mktemp -d)
export HOME=$home XDG_STATE_HOME=$home/state XDG_CONFIG_HOME=$home/cfg
log=$o/log.txt
{
    uname -a
    ldd "$b" | head -5
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,mig.mode.current,pci.bus_id --format=csv
    echo "== dmon --gpm-metrics 1,2 (graphics and SM activity through GPM)"
    timeout 20 nvidia-smi dmon --gpm-metrics 1,2 -c 3
    echo "== XID lines in the kernel log"
    (dmesg 2>&1 | grep -i xid | tail -20) || true
} >"$log" 2>&1
nvidia-smi -q -x >"$o/q.xml" 2>>"$log"
echo "== record idle" >>"$log"
"$b" nvidia record --out "$o/nvml-record-idle.json" >>"$log" 2>&1
load=
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>>"$log"; then
    python3 - <<'PY' >>"$log" 2>&1 &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 45:
    a = a @ a
    a = a / a.norm()
torch.cuda.synchronize()
PY
    load=$!
    sleep 10
else
    echo "no torch: no load" >>"$log"
fi
echo "== record busy" >>"$log"
"$b" nvidia record --out "$o/nvml-record-busy.json" >>"$log" 2>&1
echo "== snapshot" >>"$log"
"$b" snapshot --json >"$o/snapshot.json" 2>>"$log"
echo "== serve" >>"$log"
"$b" serve --listen 127.0.0.1:9477 >>"$log" 2>&1 &
serve=$!
get() {
    exec 3<>/dev/tcp/127.0.0.1/9477 || return 1
    printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$1" >&3
    cat <&3
    exec 3<&-
}
for _ in $(seq 1 30); do
    get /-/ready 2>/dev/null | head -1 | grep -q 200 && break
    sleep 1
done
sleep 3
get /metrics >"$o/metrics.txt" 2>>"$log"
kill "$serve"
[ -n "$load" ] && wait "$load"
echo "== done" >>"$log"
