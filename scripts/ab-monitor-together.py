#!/usr/bin/env python3
"""A/B of the running monitor with the binaries side by side, at the same time.

scripts/ab-monitor.sh runs the binaries one after the other; on a busy host the load moves
between windows more than two builds differ. Here every binary runs COPIES instances at once,
on the same host, in the same window, each in its own 200x60 pseudo-terminal (no tmux needed),
on the simulated 64-logical-GPU node (cpx-64-busy), 1 s refresh, nobody at the keyboard, with
2,000 extra processes on the host. For each instance: its own CPU and its reaped children's
(utime+stime from /proc/PID/stat) as % of one core over SECS seconds after a 12 s start, and
RSS; then the mean per binary. Meant for a quiet host with more cores than instances (the
lent GPU machine: 16 cores).

Usage: COPIES=3 SECS=420 scripts/ab-monitor-together.py OLD_BINARY NEW_BINARY [...]
An argument BINARY::SCENARIO runs that binary on another scenario (a name or a TOML file), so
one binary on two scenarios is an A/B of what the scenario adds (e.g. a kubelet twin's pods).
"""

import os
import pty
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import fcntl
import threading
import time

SECS = int(os.environ.get("SECS", "300"))
COPIES = int(os.environ.get("COPIES", "3"))
HZ = os.sysconf("SC_CLK_TCK")


def drain(fd):
    """Read the terminal's output so the monitor never blocks on a full pty."""
    while True:
        try:
            r, _, _ = select.select([fd], [], [], 1.0)
            if r and not os.read(fd, 65536):
                return
        except OSError:
            return


def start(arg):
    binary, _, scenario = arg.partition("::")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
    home = tempfile.mkdtemp()
    env = dict(os.environ, HOME=home, XDG_STATE_HOME=home + "/state",
               XDG_CONFIG_HOME=home + "/cfg", TERM="xterm-256color")
    p = subprocess.Popen([binary, "--sim", scenario or "cpx-64-busy"], stdin=slave, stdout=slave,
                         stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    threading.Thread(target=drain, args=(master,), daemon=True).start()
    return p, master


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime..cstime are fields 14..17.
    return [int(x) for x in fields[11:15]]


def descendants(pid):
    """The live processes under `pid` (the simulated node's workloads and twins), by parent."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def tree_ticks(pid):
    """utime+stime of every live descendant, by pid."""
    t = {}
    for d in descendants(pid):
        try:
            u = ticks(d)
            t[d] = u[0] + u[1]
        except OSError:
            pass
    return t


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1])
    return 0


def main():
    binaries = sys.argv[1:]
    if not binaries:
        sys.exit(__doc__)
    extra = [subprocess.Popen(["sleep", "100000"]) for _ in range(2000)]
    runs = []
    try:
        for _ in range(COPIES):
            for b in binaries:
                runs.append((b, *start(b)))
        time.sleep(12)
        t0 = {p.pid: ticks(p.pid) for _, p, _ in runs}
        d0 = {p.pid: tree_ticks(p.pid) for _, p, _ in runs}
        time.sleep(SECS)
        results = {}
        for b, p, _ in runs:
            t1 = ticks(p.pid)
            s0 = t0[p.pid]
            own = (t1[0] + t1[1] - s0[0] - s0[1]) * 100 / HZ / SECS
            ch = (t1[2] + t1[3] - s0[2] - s0[3]) * 100 / HZ / SECS
            rss = rss_kb(p.pid)
            d1 = tree_ticks(p.pid)
            live = sum(v - d0[p.pid].get(k, 0) for k, v in d1.items()) * 100 / HZ / SECS
            print(f"{b} pid {p.pid} own {own:.3f}% children {ch:.3f}% "
                  f"live descendants {live:.3f}% ({len(d1)}) rss {rss} kB", flush=True)
            results.setdefault(b, []).append((own, ch, rss, live))
        for b, rs in results.items():
            n = len(rs)
            print(f"mean {b}: own {sum(r[0] for r in rs) / n:.3f}% "
                  f"children {sum(r[1] for r in rs) / n:.3f}% "
                  f"live descendants {sum(r[3] for r in rs) / n:.3f}% "
                  f"rss {sum(r[2] for r in rs) / n / 1024:.1f} MiB over {n} instances")
    finally:
        for _, p, _ in runs:
            # SIGHUP, as a dropped terminal: partop stops its simulated node and exits.
            try:
                os.killpg(p.pid, signal.SIGHUP)
            except ProcessLookupError:
                pass
        for _, p, _ in runs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        for e in extra:
            e.kill()


if __name__ == "__main__":
    main()
