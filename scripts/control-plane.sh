#!/usr/bin/env bash
# Builds a real Kubernetes control plane for the tests (issue 25): kube-apiserver and
# kube-controller-manager from the k8s.io/kubernetes Go module at a pinned version, through a
# wrapper module that replaces each staging module (required at v0.0.0 with local replaces that
# do not apply to a dependency, kubernetes/kubernetes#79384) by its published v0.MINOR.PATCH.
# The binaries are cached under $PARTOP_CP_CACHE (default ~/.cache/partop/control-plane/VERSION):
# a machine builds them once. Prints the directory holding them.
# Usage: scripts/control-plane.sh [VERSION]   (default 1.37.2); builds kubectl of that version too.
#
# Seen here (2026-11-25): the first build took 18 min on this 2-core machine under load (about
# 1 GB of modules, 8 min of CPU), a relink 37 s. The v1.37.2 kube-apiserver runs against
# Debian's etcd-server 3.4.23 on loopback and is ready in about 2 s with:
#   etcd --data-dir D --listen-client-urls http://127.0.0.1:P --advertise-client-urls http://127.0.0.1:P
#   kube-apiserver --etcd-servers=http://127.0.0.1:P --bind-address=127.0.0.1
#     --advertise-address=127.0.0.1 --endpoint-reconciler-type=none (loopback is refused otherwise)
#     --secure-port=N --cert-dir=D --service-account-issuer=https://kubernetes.default.svc
#     --service-account-key-file=sa.pub --service-account-signing-key-file=sa.key
#     --authorization-mode=RBAC --token-auth-file=tokens.csv --service-cluster-ip-range=10.96.0.0/16
set -euo pipefail
version=${1:-1.37.2}
cache=${PARTOP_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/partop/control-plane/$version}
bin=$cache/bin
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] && [ -x "$bin/kubectl" ]; then
    echo "$bin"
    exit 0
fi
command -v go >/dev/null || { echo "control-plane.sh: needs the Go toolchain (apt-get install golang, or the one on PATH)" >&2; exit 1; }
mkdir -p "$cache/wrap" "$bin"
cd "$cache/wrap"
export GOFLAGS=-mod=mod
go mod download "k8s.io/kubernetes@v$version"
mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$version.mod"
minor=${version#*.}
{
    echo "module partop.local/controlplane"
    echo
    grep -E '^go ' "$mod"
    echo
    echo "require k8s.io/kubernetes v$version"
    echo
    echo "replace ("
    grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$mod" | awk -v m="$minor" '{print "\t" $1 " => " $1 " v0." m}'
    echo ")"
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
go mod tidy >/dev/null 2>&1 || true
# The version the binaries report (/version, --version), as a release build stamps it.
v=k8s.io/component-base/version
major=${version%%.*}
ldflags="-X $v.gitVersion=v$version -X $v.gitMajor=$major -X $v.gitMinor=${minor%%.*} -X $v.gitTreeState=clean"
go build -trimpath -ldflags "$ldflags" -o "$bin/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -trimpath -ldflags "$ldflags" -o "$bin/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
# The client of the same version (the distribution's is 1.20, too old for the server's checks).
go build -trimpath -ldflags "$ldflags" -o "$bin/kubectl" k8s.io/kubernetes/cmd/kubectl
echo "$bin"
