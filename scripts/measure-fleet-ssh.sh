#!/usr/bin/env bash
# Issue 18's ssh path, measured: the fleet view over N ssh connections (a real sshd on
# loopback with generated keys, N Host aliases, each its own ControlMaster and `partop stream
# --summary` session) to one simulated node, in a 200x60 tmux pane. Reports the view's CPU, its
# ssh clients' CPU (its children, read live from /proc), and RSS, over a window with nobody at
# the keyboard. The node side (N streams and sshd sessions on this same machine) is reported
# apart. Usage: scripts/measure-fleet-ssh.sh [NODES] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${BIN:-target/release/partop}")
N=${1:-32}
SECS=${2:-60}
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
sock=pfs-$$
cleanup() {
    tmux -L "$sock" kill-server 2>/dev/null || true
    [ -n "${sshd_pid:-}" ] && kill "$sshd_pid" 2>/dev/null || true
    PARTOP_SIM_AMD_SMI_COST=off "$BIN" sim stop --state "$work/node.json" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
for k in host_key user_key; do ssh-keygen -q -t ed25519 -N '' -f "$work/$k"; done
cp "$work/user_key.pub" "$work/authorized_keys"
port=$((40000 + $$ % 20000))
mkdir -p /run/sshd
cat >"$work/sshd_config" <<CFG
Port $port
ListenAddress 127.0.0.1
HostKey $work/host_key
AuthorizedKeysFile $work/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PidFile $work/sshd.pid
AcceptEnv PARTOP_SIM_STATE XDG_STATE_HOME PARTOP_SIM_AMD_SMI_COST
MaxStartups 200
MaxSessions 200
LogLevel ERROR
CFG
/usr/sbin/sshd -D -e -f "$work/sshd_config" 2>/dev/null &
sshd_pid=$!
echo "[127.0.0.1]:$port $(cut -d' ' -f1-2 "$work/host_key.pub")" >"$work/known_hosts"
PARTOP_SIM_AMD_SMI_COST=off XDG_STATE_HOME=$work "$BIN" sim start cpx-64-busy --state "$work/node.json" >/dev/null
user=$(id -un)
: >"$work/hosts"
for ((i = 0; i < N; i++)); do
    cat >>"$work/ssh_config" <<CFG
Host n$i
  HostName 127.0.0.1
  Port $port
  User $user
  IdentityFile $work/user_key
  IdentitiesOnly yes
  UserKnownHostsFile $work/known_hosts
  StrictHostKeyChecking yes
  LogLevel ERROR
  SetEnv PARTOP_SIM_STATE=$work/node.json XDG_STATE_HOME=$work/xdg PARTOP_SIM_AMD_SMI_COST=off
CFG
    echo "n$i" >>"$work/hosts"
done
until nc -z 127.0.0.1 "$port" 2>/dev/null || (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null; do sleep 0.1; done
t0=$(date +%s%N)
tmux -L "$sock" new-session -d -x 200 -y 60 \
    "env XDG_STATE_HOME=$work/op $BIN fleet --hosts-file $work/hosts --ssh-config $work/ssh_config --remote-partop $BIN"
until tmux -L "$sock" capture-pane -p 2>/dev/null | grep -q "nodes reporting $N of $N"; do sleep 0.05; done
t1=$(date +%s%N)
sleep 10
pid=$(pgrep -n -f "$BIN fleet --hosts-file")
# The ssh clients: partop's children (mux clients) and the ControlMaster processes they detach
# (one per destination: they do the crypto), found by their control path.
sshpids() { { pgrep -P "$pid" || true; pgrep -f "^ssh: $work/op/" || true; } | sort -u; }
# ns of CPU from schedstat: an ssh process uses far less than one clock tick a minute.
kids() { for c in $(sshpids); do awk '{print $1}' "/proc/$c/schedstat"; done | awk '{s += $1} END {printf "%.0f", s + 0}'; }
streams() { for p in $(pgrep -f "$BIN --refresh [0-9]* stream --summary"); do awk '{print $14 + $15}' "/proc/$p/stat"; done | awk '{s += $1} END {print s + 0}'; }
own0=$(awk '{print $14 + $15}' "/proc/$pid/stat"); k0=$(kids); s0=$(streams)
sleep "$SECS"
own1=$(awk '{print $14 + $15}' "/proc/$pid/stat"); k1=$(kids); s1=$(streams)
rss=$(awk '/VmRSS/{print $2}' "/proc/$pid/status")
# PSS: shared pages (libcrypto, ssh itself) counted once across the processes, not per process.
sshrss=$(for c in $(sshpids); do awk '/^Pss:/{print $2}' "/proc/$c/smaps_rollup"; done | awk '{s += $1} END {print s + 0}')
nssh=$(sshpids | wc -l)
awk -v n="$N" -v a=$((own1 - own0)) -v k=$(((k1 - k0) / 1000)) -v s=$((s1 - s0)) -v hz="$hz" -v w="$SECS" \
    -v rss="$rss" -v srss="$sshrss" -v nssh="$nssh" -v first=$(((t1 - t0) / 1000000)) 'BEGIN {
    printf "%d nodes over ssh: fleet view %.2f%% of a core, its %d ssh processes (mux clients and masters) %.3f%% (RSS %.1f MiB; ssh PSS %.1f MiB); first full screen %d ms\n",
        n, a / hz / w * 100, nssh, k / 1e6 / w * 100, rss / 1024, srss / 1024, first
    printf "node side (all %d streams on this machine): %.2f%% of a core\n", n, s / hz / w * 100 }'
