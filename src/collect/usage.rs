//! Host and per-process CPU and memory, read from /proc each sample after the GPU sources: the
//! host line (CPU %, load, memory) and each GPU holder's CPU %, RSS and run time, for hunting
//! noisy neighbours that live on the host side (a data loader pinning cores, a memory hog).
//! CPU shares are deltas between two samples, so the first sample has none. Runs on a blocking
//! thread (the collector moves it there); only the GPU holders are read, never all of /proc.

use crate::domain::provenance::{Missing, SourceKind, note};
use crate::domain::snapshot::{HostUsage, Snapshot};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What the previous sample read, for the deltas.
#[derive(Debug)]
pub struct Usage {
    proc_root: PathBuf,
    /// (busy ticks, all ticks) of the host's aggregate `cpu` line.
    host: Option<(u64, u64)>,
    /// Per pid: (start ticks, utime + stime ticks, when, ms).
    procs: HashMap<u32, (u64, u64, u64)>,
    tps: u64,
    page: u64,
    /// Reused for each `/proc/PID/stat` read.
    buf: Vec<u8>,
}

impl Usage {
    /// Reads under `proc_root` (`/proc` on a live node).
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        Self {
            proc_root: proc_root.into(),
            host: None,
            procs: HashMap::new(),
            tps: procfs::ticks_per_second().max(1),
            page: procfs::page_size().max(1),
            buf: Vec::with_capacity(512),
        }
    }

    /// Fills `snap.host_usage` and each process's CPU %, RSS and run time.
    pub fn observe(&mut self, snap: &mut Snapshot) {
        let at = snap.taken_at_ms;
        snap.host_usage = self.host_usage(at);
        let mut seen = HashMap::with_capacity(snap.processes.len());
        for p in &mut snap.processes {
            if let Some(started) = p.started_at_ms {
                p.running_secs = Some(at.saturating_sub(started) / 1000);
            }
            let Some((start, cpu, rss_pages)) = read_stat(&self.proc_root, p.pid, &mut self.buf)
            else {
                note(
                    &mut p.provenance,
                    "cpu_percent",
                    SourceKind::Procfs,
                    "/proc/PID/stat",
                    at,
                    Some(Missing::ReadFailed("the process is gone or hidden".into())),
                );
                continue;
            };
            p.rss_bytes = Some(rss_pages.saturating_mul(self.page));
            note(
                &mut p.provenance,
                "rss_bytes",
                SourceKind::Procfs,
                "/proc/PID/stat rss",
                at,
                None,
            );
            // The same process (pid and start time) as last sample: its CPU share since then.
            if let Some(&(s0, c0, t0)) = self.procs.get(&p.pid)
                && s0 == start
                && at > t0
            {
                #[expect(clippy::cast_precision_loss, reason = "ticks and ms")]
                let pct = cpu.saturating_sub(c0) as f64 / self.tps as f64 * 1000.0
                    / (at - t0) as f64
                    * 100.0;
                p.cpu_percent = Some((pct * 10.0).round() / 10.0);
                note(
                    &mut p.provenance,
                    "cpu_percent",
                    SourceKind::Procfs,
                    "/proc/PID/stat utime+stime since the last sample",
                    at,
                    None,
                );
            } else {
                note(
                    &mut p.provenance,
                    "cpu_percent",
                    SourceKind::Procfs,
                    "/proc/PID/stat",
                    at,
                    Some(Missing::NotApplicable(
                        "first sample of this process: a share needs two".into(),
                    )),
                );
            }
            seen.insert(p.pid, (start, cpu, at));
        }
        self.procs = seen;
    }

    fn host_usage(&mut self, at: u64) -> Option<HostUsage> {
        let stat = crate::collect::small_file::proc_text(&self.proc_root.join("stat")).ok()?;
        let (busy, all, cpus) = parse_stat(&stat)?;
        let cpu_percent = match self.host.replace((busy, all)) {
            Some((b0, a0)) if all > a0 => {
                #[expect(clippy::cast_precision_loss, reason = "ticks")]
                let p = busy.saturating_sub(b0) as f64 / (all - a0) as f64 * 100.0;
                Some((p * 10.0).round() / 10.0)
            }
            _ => None,
        };
        let load = crate::collect::small_file::proc_text(&self.proc_root.join("loadavg"))
            .ok()
            .and_then(|t| parse_loadavg(&t))
            .unwrap_or_default();
        let (total, avail) = crate::collect::small_file::proc_text(&self.proc_root.join("meminfo"))
            .ok()
            .and_then(|t| parse_meminfo(&t))?;
        Some(HostUsage {
            cpus,
            cpu_percent,
            load,
            mem_used_bytes: total.saturating_sub(avail),
            mem_total_bytes: total,
            at_ms: at,
        })
    }
}

/// `/proc/PID/stat`: (start ticks, utime + stime ticks, RSS pages). Read bounded, without
/// blocking, into a buffer kept between reads: this runs for every holder on every sample.
fn read_stat(root: &Path, pid: u32, buf: &mut Vec<u8>) -> Option<(u64, u64, u64)> {
    let mut p = root.to_path_buf();
    p.push(pid.to_string());
    p.push("stat");
    crate::collect::small_file::proc_read(&p, buf).ok()?;
    // The command name may hold any bytes; the fields after it are ASCII.
    parse_pid_stat(&String::from_utf8_lossy(buf))
}

/// Parses `/proc/PID/stat`; the command name may hold spaces and parentheses, so fields are
/// counted after the last `)`.
pub fn parse_pid_stat(text: &str) -> Option<(u64, u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After the name: state(0) ppid(1) … utime(11) stime(12) … starttime(19) vsize(20) rss(21).
    let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    // Checked: a captured /proc may hold any number, and a wrapped sum reads as plausible.
    Some((n(19)?, n(11)?.checked_add(n(12)?)?, n(21)?))
}

/// `/proc/stat`: (busy ticks, all ticks, CPUs).
pub fn parse_stat(text: &str) -> Option<(u64, u64, u32)> {
    let mut lines = text.lines();
    let cpu = lines.next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = cpu
        .split_ascii_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let all = v.iter().take(8).try_fold(0u64, |a, x| a.checked_add(*x))?;
    let idle = v
        .get(3)
        .copied()
        .unwrap_or(0)
        .checked_add(v.get(4).copied().unwrap_or(0))?;
    let cpus = lines
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    Some((
        all.saturating_sub(idle),
        all,
        u32::try_from(cpus).unwrap_or(u32::MAX),
    ))
}

/// `/proc/loadavg`.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_ascii_whitespace().map(str::parse::<f64>);
    Some([it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?])
}

/// `/proc/meminfo`: (MemTotal, MemAvailable) in bytes.
pub fn parse_meminfo(text: &str) -> Option<(u64, u64)> {
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.split_ascii_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .and_then(|v| v.checked_mul(1024))
    };
    Some((kb("MemTotal:")?, kb("MemAvailable:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
        let line = "4242 (python3 (data) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 123456 1000000 2048 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
        assert_eq!(parse_pid_stat(line), Some((123_456, 300, 2048)));
        assert_eq!(parse_pid_stat("garbage"), None);
    }

    #[test]
    fn host_figures_parse() {
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1\n";
        assert_eq!(parse_stat(stat), Some((150, 1000, 2)));
        assert_eq!(
            parse_loadavg("0.50 1.25 2.00 1/200 999\n"),
            Some([0.5, 1.25, 2.0])
        );
        assert_eq!(
            parse_meminfo("MemTotal: 1000 kB\nMemFree: 10 kB\nMemAvailable: 250 kB\n"),
            Some((1_024_000, 256_000))
        );
    }

    #[test]
    fn own_process_has_rss_and_a_cpu_share_on_the_second_sample() {
        let mut u = Usage::new("/proc");
        let me = std::process::id();
        let mut snap = Snapshot {
            taken_at_ms: crate::collect::clock::now_ms(),
            processes: vec![crate::domain::Process {
                pid: me,
                ..Default::default()
            }],
            ..Default::default()
        };
        u.observe(&mut snap);
        assert!(snap.processes[0].rss_bytes.unwrap_or(0) > 1 << 20);
        assert!(snap.processes[0].cpu_percent.is_none());
        let h = snap.host_usage.clone().expect("host usage");
        assert!(h.mem_total_bytes > h.mem_used_bytes && h.cpus >= 1);
        // Burn a little CPU so the share is above zero.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        std::hint::black_box(x);
        snap.taken_at_ms = crate::collect::clock::now_ms();
        u.observe(&mut snap);
        assert!(snap.processes[0].cpu_percent.is_some_and(|c| c > 0.0));
        assert!(snap.host_usage.and_then(|h| h.cpu_percent).is_some());
    }
}
