#!/usr/bin/env bash
# AMD's partitioning guide's experiment on the simulated node (issue 29): the 12B model as a
# `fill` replica set behind a real nginx (the distribution's, on loopback, its own prefix in a
# temp dir), SPX/NPS1 with 8 replicas against DPX/NPS2 with 16. For each layout: tokens/s and
# p99 from `partop models measure`, and the requests a client sends through nginx (one every
# 50 ms) with the members that answered them. Then the downtime of the change as the client saw
# it: the span of requests through nginx that failed while the apply ran. Before it, a change
# of part of the node (two GPUs to DPX, compute only): only the replicas it moves leave the
# upstream, and the client should see no failure.
# Usage: scripts/measure-guide-replicas.sh [MEASURE_SECS] [RELOAD_SECS]   (defaults 30 and 6)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
reload=${2:-6}
if [ -z "${PARTOP_BIN:-}" ]; then
    cargo build --release --quiet
fi
bin=$(realpath "${PARTOP_BIN:-target/release/partop}")
nginx=/usr/sbin/nginx
[ -x "$nginx" ] || { echo "install nginx-light (apt-get install nginx-light)" >&2; exit 1; }
export PARTOP_SIM_AMD_SMI_COST=off
d=$(mktemp -d)
export XDG_STATE_HOME=$d/xdg XDG_CONFIG_HOME=$d/xdg
st=$d/node.json
cleanup() {
    [ -n "${load_pid:-}" ] && kill "$load_pid" 2>/dev/null || true
    "$nginx" -p "$d/ng" -c "$d/ng/nginx.conf" -s stop 2>/dev/null || true
    "$bin" sim stop --state "$st" >/dev/null 2>&1 || true
    rm -rf "$d"
}
trap cleanup EXIT
sed "s/^seed = 12/seed = 12\nreload_secs = $reload/" scenarios/guide-12b-spx.toml > "$d/guide.toml"
"$bin" sim start "$d/guide.toml" --state "$st" >/dev/null
first=$(grep -o 'ports = "[0-9]*' "${st%.json}.models.toml" | grep -o '[0-9]*$')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$d/ng/tmp"
cat > "$d/ng/nginx.conf" <<CONF
daemon on;
pid $d/ng/nginx.pid;
error_log $d/ng/error.log;
events {}
http {
  access_log off;
  client_body_temp_path $d/ng/tmp/body; proxy_temp_path $d/ng/tmp/proxy;
  fastcgi_temp_path $d/ng/tmp/fcgi; uwsgi_temp_path $d/ng/tmp/uwsgi; scgi_temp_path $d/ng/tmp/scgi;
  include $d/ng/upstream.conf;
  server { listen 127.0.0.1:$port; location / { proxy_pass http://mistral-12b; proxy_next_upstream error timeout http_502 http_503; } }
}
CONF
{ echo "upstream mistral-12b {"; for i in $(seq 0 7); do echo "    server 127.0.0.1:$((first + i));"; done; echo "}"; } > "$d/ng/upstream.conf"
"$nginx" -p "$d/ng" -c "$d/ng/nginx.conf"
cat >> "${st%.json}.models.toml" <<TOML

[[balancer]]
set = "mistral-12b"
upstream = "$d/ng/upstream.conf"
reload = ["sh", "-c", "$nginx -t -q -p $d/ng -c $d/ng/nginx.conf && $nginx -p $d/ng -c $d/ng/nginx.conf -s reload"]
verify = "http://127.0.0.1:$port/v1/completions"
TOML
# The client: one request through nginx every 50 ms, each line "epoch_ms status served_by".
( while :; do
    t=$(date +%s%3N)
    r=$(curl -s -m 2 -w ' %{http_code}' "http://127.0.0.1:$port/v1/completions" || echo ' 000')
    by=$(printf '%s' "$r" | grep -o '"served_by":"[^"]*"' | cut -d'"' -f4 || true)
    echo "$t ${r##* } ${by:--}"
    sleep 0.05
done ) > "$d/load.log" &
load_pid=$!
sleep 3
report_load() { # FROM_MS TO_MS LABEL
    awk -v a="$1" -v b="$2" -v l="$3" '$1>=a && $1<=b {n++; if ($2=="200") {ok++; by[$3]=1} else bad++}
      END {k=0; for (x in by) k++; printf "  %s: %d requests through nginx, %d ok, %d failed, %d distinct members answered\n", l, n, ok, bad, k}' "$d/load.log"
}
measure() { # LABEL
    local a b
    a=$(date +%s%3N)
    "$bin" --sim-state "$st" models measure --secs "$secs" | grep '^mistral-12b:' | sed 's/^/  /'
    b=$(date +%s%3N)
    report_load "$a" "$b" "$1"
}
change() { # PLAN-ARGS...
    "$bin" --sim-state "$st" plan "$@" --json > "$d/plan.json"
    python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); b=(p.get("balancers") or [{}])[0]
d=[s["name"] for s in b.get("during",[]) if not s["up"]]; u=[s["name"] for s in b.get("during",[]) if s["up"]]
print("  drained during the change: %d (%s); in service throughout: %d" % (len(d), " ".join(d) or "-", len(u)))' "$d/plan.json"
    local a b
    a=$(date +%s%3N)
    "$bin" --sim-state "$st" apply "$d/plan.json" --yes --grace 5 | grep -E '^applied|services down' | sed 's/^/  /'
    b=$(date +%s%3N)
    awk -v a="$a" -v b="$b" '$1>=a && $1<=b && $2!="200" {if (!f) f=$1; l=$1; n++}
      END {if (n) printf "  through nginx: %d failed requests over %.1f s (first to last failure)\n", n, (l-f)/1000; else print "  through nginx: no request failed"}' "$d/load.log"
    report_load "$a" "$b" "during the change"
}
echo "SPX/NPS1, 8 replicas (${secs} s):"
measure "SPX/NPS1"
gpus=$("$bin" --sim-state "$st" snapshot --json | python3 -c 'import json,sys; print(" ".join(g["bdf"] for g in json.load(sys.stdin)["gpus"][:2]))')
echo "SPX/NPS1 -> DPX on 2 of 8 GPUs, compute only (reload ${reload} s):"
# shellcheck disable=SC2086 # two BDFs, one word each
change --gpu $gpus --compute DPX
sleep 2
echo "-> DPX/NPS2 on every GPU (reload ${reload} s):"
change --compute DPX --memory NPS2
sleep 2
echo "DPX/NPS2, 16 replicas (${secs} s):"
measure "DPX/NPS2"
echo "advice, with what this node measured:"
"$bin" --sim-state "$st" models advise | sed -n '/measured on this node/,$p' | grep -E 'measured|SPX/NPS1|DPX/NPS2|mistral' | sed 's/^/  /'
