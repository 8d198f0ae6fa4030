#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for rehearsal and measurement (issue 26): Debian's
# etcd, and kube-apiserver + kube-controller-manager built by scripts/control-plane.sh, started
# as the tests start them (tests/common/control_plane.rs). Writes DIR/admin.kubeconfig (the
# administrator's token), DIR/viewer.kubeconfig (a second administrator, `viewer`, so that one
# client's requests can be told apart), DIR/audit.log (every request as received: user, verb,
# resource) and DIR/pids; `scripts/cluster-up.sh --stop DIR` ends them.
# Usage: scripts/cluster-up.sh DIR        then: partop sim cluster --kubeconfig DIR/admin.kubeconfig …
#        scripts/cluster-up.sh --stop DIR
set -euo pipefail
if [ "${1:-}" = --stop ]; then
    d=$2
    # Last started first (the controller-manager, the API server, then etcd: an API server
    # whose etcd went first waits on it), then SIGKILL what is left after 10 s.
    if [ -f "$d/pids" ]; then
        mapfile -t pids < <(tac "$d/pids")
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        for _ in $(seq 1 50); do
            alive=0
            for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
            [ "$alive" = 0 ] && break
            sleep 0.2
        done
        for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    fi
    rm -f "$d/pids"
    exit 0
fi
d=${1:?usage: scripts/cluster-up.sh DIR}
mkdir -p "$d"
d=$(cd "$d" && pwd)
bin=$(bash "$(dirname "$0")/control-plane.sh")
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
client=$(port); peer=$(port); secure=$(port)
[ -f "$d/sa.key" ] || { openssl genrsa -out "$d/sa.key" 2048 2>/dev/null; openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null; }
token=partop-rehearsal-admin
echo "$token,admin,1,system:masters" > "$d/tokens.csv"
echo "partop-rehearsal-viewer,viewer,3,system:masters" >> "$d/tokens.csv"
cat > "$d/audit-policy.yaml" <<'POL'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted", "ResponseComplete", "Panic"]
rules:
- level: Metadata
POL
: > "$d/pids"
etcd --data-dir "$d/etcd" --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "default=http://127.0.0.1:$peer" > "$d/etcd.log" 2>&1 &
echo $! >> "$d/pids"
"$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$client" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none --secure-port="$secure" --cert-dir="$d/certs" \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$d/sa.pub" \
    --service-account-signing-key-file="$d/sa.key" --authorization-mode=RBAC --token-auth-file="$d/tokens.csv" \
    --service-cluster-ip-range=10.96.0.0/16 --audit-policy-file="$d/audit-policy.yaml" \
    --audit-log-path="$d/audit.log" --audit-log-maxsize=1000 > "$d/kube-apiserver.log" 2>&1 &
echo $! >> "$d/pids"
kubeconfig() {
cat <<KC
apiVersion: v1
kind: Config
clusters:
- name: rehearsal
  cluster:
    server: https://127.0.0.1:$secure
    certificate-authority: $d/certs/apiserver.crt
users:
- name: $1
  user:
    token: $2
contexts:
- name: rehearsal
  context:
    cluster: rehearsal
    user: $1
current-context: rehearsal
KC
}
kubeconfig admin "$token" > "$d/admin.kubeconfig"
kubeconfig viewer partop-rehearsal-viewer > "$d/viewer.kubeconfig"
for _ in $(seq 1 450); do
    if [ -f "$d/certs/apiserver.crt" ] && "$bin/kubectl" --kubeconfig="$d/admin.kubeconfig" get --raw /readyz >/dev/null 2>&1; then
        "$bin/kube-controller-manager" --kubeconfig="$d/admin.kubeconfig" --bind-address=127.0.0.1 --secure-port=0 \
            --leader-elect=false --controllers=disruption,daemonset,replicaset,deployment,garbagecollector,serviceaccount-token \
            --service-account-private-key-file="$d/sa.key" --use-service-account-credentials=false > "$d/kube-controller-manager.log" 2>&1 &
        echo $! >> "$d/pids"
        echo "$d/admin.kubeconfig"
        exit 0
    fi
    sleep 0.2
done
echo "cluster-up.sh: the API server was not ready in 90 s; its log: $d/kube-apiserver.log" >&2
tail -20 "$d/kube-apiserver.log" >&2
"$0" --stop "$d"
exit 1
