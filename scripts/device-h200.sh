#!/bin/bash
# Real-hardware checks on a lent NVIDIA H200 (issue 9), all READ-ONLY: no MIG mode change, no
# instance created or destroyed, no reset, no clock/power/persistence change. Run by the device
# tool from the repository root with .dev/ (partop binary, tmux debs) and .whl/ (nvitop wheels)
# carried; results land in $OUT. docs/nvidia.md records what came back.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
P=$PWD/.dev/partop
export XDG_STATE_HOME=/tmp/xdg XDG_CONFIG_HOME=/tmp/xdgc TERM=xterm-256color
mkdir -p /tmp/tmuxroot && for f in .dev/*.deb; do dpkg -x "$f" /tmp/tmuxroot; done
export PATH=/tmp/tmuxroot/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/tmuxroot/usr/lib/x86_64-linux-gnu
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
log() { echo "== $*"; }
{
log "environment"; uname -a; nvidia-smi -L; tmux -V; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'
log "idle snapshot (NVML)"; $P --source nvidia snapshot; $P --source nvidia snapshot --json > /tmp/snapshot-idle.json
} >> "$OUT/run.log" 2>&1
# A real process holding memory and computing: 12 GiB plus a matmul loop.
python3 -c '
import torch, time
x = torch.empty(12 * 2**30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 400
while time.time() < end:
    for _ in range(20): b = a @ a
    torch.cuda.synchronize(); time.sleep(0.5)
' > /tmp/job.log 2>&1 &
JOB=$!
sleep 15
{
log "busy snapshot (NVML), job pid $JOB"; $P --source nvidia snapshot
$P --source nvidia snapshot --json > "$OUT/snapshot-busy.json"
log "busy snapshot (nvidia-smi -q -x path)"; $P --source nvidia --nvidia-smi "$(command -v nvidia-smi)" snapshot
nvidia-smi -q -x > /tmp/h200-busy-q.xml
log "record"; $P --source nvidia nvidia record --out "$OUT/h200-nvml.json"
log "MIG plan (dry run only)"; $P --source nvidia mig plan --gpu 0 --instances 2x1g.18gb,1g.35gb,3g.71gb
$P --source nvidia mig plan --gpu 0 --instances 2x1g.18gb,1g.35gb,3g.71gb --json > /tmp/mig.json
$P --source nvidia mig apply /tmp/mig.json --dry-run
log "the monitor in tmux (120x36)"
tmux new-session -d -s p -x 120 -y 36 "exec $P --source nvidia --refresh 1"
sleep 6; tmux capture-pane -p -t p > "$OUT/monitor.txt"
tmux send-keys -t p 2; sleep 2; tmux capture-pane -p -t p >> "$OUT/monitor.txt"
tmux send-keys -t p 3; sleep 2; tmux capture-pane -p -t p >> "$OUT/monitor.txt"
tmux send-keys -t p 4; sleep 2; tmux capture-pane -p -t p >> "$OUT/monitor.txt"
tmux send-keys -t p q; sleep 1
} >> "$OUT/run.log" 2>&1
# Side by side at the same 1 s refresh: CPU (utime+stime) and RSS of each over 60 s.
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
measure() { # name, command
  tmux new-session -d -s m -x 120 -y 36 "exec $2"
  sleep 5
  local pid; pid=$(tmux list-panes -t m -F '#{pane_pid}')
  local c0 t0 c1 t1 rss
  c0=$(cpu "$pid"); t0=$(date +%s.%N)
  sleep 60
  c1=$(cpu "$pid"); t1=$(date +%s.%N)
  rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
  { echo "== $1"; tmux capture-pane -p -t m; } >> "$OUT/screens.txt"
  tmux kill-session -t m
  echo "$1 pid $pid cpu_ticks $((c1 - c0)) wall $(echo "$t1 - $t0" | bc -l 2>/dev/null || python3 -c "print($t1-$t0)") hz $(getconf CLK_TCK) rss_kib $rss" | tee -a "$OUT/compare.txt"
}
{
log "side by side (60 s each, refresh 1 s, the job running)"
measure partop "$P --source nvidia --refresh 1"
measure nvitop "python3 -m nvitop --interval 1"
python3 - "$OUT/compare.txt" <<'PY'
import sys
rows = {}
for l in open(sys.argv[1]):
    f = l.split(); d = dict(zip(f[1::2], f[2::2])); d['name'] = f[0]; rows[f[0]] = d
for n, d in rows.items():
    pct = int(d['cpu_ticks']) / int(d['hz']) / float(d['wall']) * 100
    d['pct'] = pct
    print(f"{n}: {pct:.2f}% of one core, RSS {int(d['rss_kib'])/1024:.1f} MiB")
if 'partop' in rows and 'nvitop' in rows:
    p, v = rows['partop'], rows['nvitop']
    print(f"ratio nvitop/partop: CPU {v['pct']/max(p['pct'],1e-9):.1f}x, RSS {int(v['rss_kib'])/int(p['rss_kib']):.1f}x")
PY
} >> "$OUT/run.log" 2>&1
kill $JOB 2>/dev/null
cat "$OUT/run.log" | tail -60
