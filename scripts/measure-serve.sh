#!/usr/bin/env bash
# Issue 17's benchmark: `partop serve` on the simulated 64-logical-GPU node (CPX/NPS4) with 128
# GPU holders (two per logical GPU) among 2,000 processes, amd-smi at its real cost, sampling
# at 1 s. Side by side in one run:
#   - one scrape's render: the server's own CPU per /metrics (partop_scrape_render_cpu_seconds,
#     the thread's CPU time around the render), over 40 scrapes; series per logical GPU;
#   - `partop serve` scraped every 15 s, against the monitor at the same refresh (a 200x60
#     tmux pane), each over the same window: own CPU and children's (amd-smi), RSS.
# Usage: scripts/measure-serve.sh [SECONDS] [EXTRA_PROCESSES]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/partop}
SECS=${1:-90}
EXTRA=${2:-1870}
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
extra=()
cleanup() {
    ((${#extra[@]})) && kill "${extra[@]}" 2>/dev/null || true
    [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null || true
    tmux -L pms-$$ kill-server 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# The node: 8 MI300X in CPX/NPS4, two batch holders on every logical GPU.
scen=$work/cpx-64-128-holders.toml
{
    printf 'name = "cpx-64-128-holders"\ndescription = "64 logical GPUs, 128 holders"\n'
    printf 'product = "mi300x"\ncompute = "CPX"\nmemory = "NPS4"\nrocm = "7.0.2"\nseed = 3\n'
    for g in 0 1 2 3 4 5 6 7; do
        for p in 0 1 2 3 4 5 6 7; do
            for k in 0 1; do
                printf '\n[[workload]]\nname = "w%s_%s_%s"\nkind = "batch"\ngpu = %s\npartition = %s\nvram_gb = 4\nbusy = %s\ncomm = "python3"\n' \
                    "$g" "$p" "$k" "$g" "$p" $(((g * 8 + p) % 90 + 5))
            done
        done
    done
} >"$scen"
for ((i = 0; i < EXTRA; i++)); do
    sleep 100000 &
    extra+=($!)
done

port=$((20000 + $$ % 20000))
home=$work/serve
mkdir -p "$home"
env XDG_STATE_HOME="$home" PARTOP_SIM_AMD_SMI_COST=on "$BIN" --sim "$scen" --refresh 1 --timeout 600 \
    serve --listen "127.0.0.1:$port" 2>"$work/serve.log" &
serve_pid=$!
until curl -sf "http://127.0.0.1:$port/-/ready" >/dev/null; do sleep 0.1; done
sleep 20 # past amd-smi's first reads (3 s cold) and the workloads' start
holders=$(curl -s "http://127.0.0.1:$port/snapshot" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for p in d["processes"] if p["gpus"]), len(d["processes"]))')
echo "host: $(nproc) CPUs, $(ls /proc | grep -c '^[0-9]') processes; GPU holders / processes in the sample: $holders"

# One scrape's render CPU, 40 scrapes.
renders=()
for ((i = 0; i < 40; i++)); do
    body=$(curl -s "http://127.0.0.1:$port/metrics")
    renders+=("$(awk '/^partop_scrape_render_cpu_seconds[{ ]/{printf "%.3f", $2 * 1000}' <<<"$body")")
    sleep 0.25
done
series=$(awk '/^partop_scrape_series[{ ]/{print $2}' <<<"$body")
per_gpu=$(grep -c 'gpu_id="17"' <<<"$body" || true)
bytes=${#body}
printf 'render CPU per /metrics (ms): median %s, max %s over %d scrapes; %s series (%s carrying logical GPU 17), %s bytes\n' \
    "$(printf '%s\n' "${renders[@]}" | sort -n | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}')" \
    "$(printf '%s\n' "${renders[@]}" | sort -n | tail -1)" "${#renders[@]}" "$series" "$per_gpu" "$bytes"

cpu() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }
printf '%-40s %8s %10s %8s %8s\n' path own% children% tree% RSS_MiB
read -r a0 c0 < <(cpu "$serve_pid")
end=$(($(date +%s) + SECS))
while (($(date +%s) < end)); do
    curl -s "http://127.0.0.1:$port/metrics" >/dev/null
    sleep 15
done
read -r a1 c1 < <(cpu "$serve_pid")
rss=$(awk '/VmRSS/{print $2}' "/proc/$serve_pid/status")
awk -v a=$((a1 - a0)) -v c=$((c1 - c0)) -v hz="$hz" -v s="$SECS" -v r="$rss" 'BEGIN {
    printf "%-40s %7.2f%% %9.2f%% %7.2f%% %8.1f\n", "serve, 1 s samples, scraped every 15 s",
        a / hz / s * 100, c / hz / s * 100, (a + c) / hz / s * 100, r / 1024 }'
kill "$serve_pid"
wait "$serve_pid" 2>/dev/null || true
serve_pid=

# The monitor, same node, same refresh, same window.
mhome=$work/monitor
mkdir -p "$mhome"
tmux -L pms-$$ new-session -d -x 200 -y 60 \
    "env XDG_STATE_HOME=$mhome PARTOP_SIM_AMD_SMI_COST=on $BIN --sim $scen --refresh 1 --timeout 600"
until tmux -L pms-$$ capture-pane -p 2>/dev/null | grep -q "64 logical"; do sleep 0.1; done
sleep 20
mpid=$(pgrep -n -f "$BIN --sim $scen --refresh 1 --timeout 600$")
read -r a0 c0 < <(cpu "$mpid")
sleep "$SECS"
read -r a1 c1 < <(cpu "$mpid")
rss=$(awk '/VmRSS/{print $2}' "/proc/$mpid/status")
awk -v a=$((a1 - a0)) -v c=$((c1 - c0)) -v hz="$hz" -v s="$SECS" -v r="$rss" 'BEGIN {
    printf "%-40s %7.2f%% %9.2f%% %7.2f%% %8.1f\n", "monitor, 1 s refresh, 200x60",
        a / hz / s * 100, c / hz / s * 100, (a + c) / hz / s * 100, r / 1024 }'
tmux -L pms-$$ send-keys q
sleep 2
