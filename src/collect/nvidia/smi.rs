//! `nvidia-smi -q -x` (XML, parsed with roxmltree): the fallback when NVML cannot be loaded, and
//! the path the MIG executor and the fake nvidia-smi share. Every number tolerates `N/A`.

use super::node::{NvCounters, NvGpu, NvInstance, NvNode, NvProc, NvSource};
use roxmltree::{Document, Node};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn child<'a>(n: Node<'a, 'a>, path: &str) -> Option<Node<'a, 'a>> {
    let mut cur = n;
    for name in path.split('/') {
        cur = cur.children().find(|c| c.has_tag_name(name))?;
    }
    Some(cur)
}

fn txt(n: Node<'_, '_>, path: &str) -> Option<String> {
    child(n, path)
        .and_then(|c| c.text())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty() && t != "N/A" && t != "[N/A]")
}

/// The number at the start of `12.5 W`, `5297 MiB`, `43 C`, `0 %`.
fn num(n: Node<'_, '_>, path: &str) -> Option<f64> {
    txt(n, path)?.split_whitespace().next()?.parse().ok()
}

/// A whole figure (MiB, MHz) under the one range policy: -86 or 1e308 is N/A, never 0 or
/// u64::MAX (at most 8 PiB in MiB).
fn int(n: Node<'_, '_>, path: &str) -> Option<u64> {
    let v = num(n, path)?;
    crate::domain::sanity::bytes_of(v, 1 << 20, "MiB")
        .ok()
        .map(|b| b >> 20)
}

/// Parses the XML of `nvidia-smi -q -x`.
pub fn parse(xml: &str) -> Result<NvNode, String> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    let doc = Document::parse_with_options(xml, opts)
        .map_err(|e| format!("nvidia-smi -q -x: not XML: {e}"))?;
    let root = doc.root_element();
    if !root.has_tag_name("nvidia_smi_log") {
        return Err(format!(
            "nvidia-smi -q -x: expected <nvidia_smi_log>, found <{}>",
            root.tag_name().name()
        ));
    }
    let driver = txt(root, "driver_version");
    let gpus = root
        .children()
        .filter(|c| c.has_tag_name("gpu"))
        .enumerate()
        .map(|(index, g)| gpu(index, g))
        .collect();
    Ok(NvNode {
        source: format!(
            "nvidia-smi -q -x (driver {})",
            driver.clone().unwrap_or_else(|| "?".into())
        ),
        driver,
        gpus,
    })
}

/// A count that fits `u32` (else none).
fn small(n: Node<'_, '_>, path: &str) -> Option<u32> {
    int(n, path).and_then(|v| u32::try_from(v).ok())
}

/// One `<gpu>` of the report, the `index`th.
fn gpu(index: usize, g: Node<'_, '_>) -> NvGpu {
    let bdf = g
        .attribute("id")
        .map(str::to_string)
        .or_else(|| txt(g, "pci/pci_bus_id"))
        .unwrap_or_default();
    // "00000000:00:06.0" → "0000:00:06.0"
    let bdf = match bdf.split_once(':') {
        Some((dom, rest)) if dom.len() == 8 => format!("{}:{rest}", &dom[4..]).to_lowercase(),
        _ => bdf.to_lowercase(),
    };
    NvGpu {
        index: small(g, "minor_number").unwrap_or(u32::try_from(index).unwrap_or(0)),
        bdf,
        name: txt(g, "product_name").unwrap_or_else(|| "NVIDIA GPU".into()),
        uuid: txt(g, "uuid"),
        mem_total_mib: int(g, "fb_memory_usage/total"),
        mem_used_mib: int(g, "fb_memory_usage/used"),
        util_gpu: num(g, "utilization/gpu_util"),
        util_mem: num(g, "utilization/memory_util"),
        power_w: num(g, "gpu_power_readings/instant_power_draw")
            .or_else(|| num(g, "gpu_power_readings/average_power_draw"))
            .or_else(|| num(g, "gpu_power_readings/power_draw")),
        power_limit_w: num(g, "gpu_power_readings/current_power_limit"),
        temp_c: num(g, "temperature/gpu_temp"),
        mem_temp_c: num(g, "temperature/memory_temp"),
        sm_clock_mhz: small(g, "clocks/sm_clock"),
        mem_clock_mhz: small(g, "clocks/mem_clock"),
        mig_enabled: txt(g, "mig_mode/current_mig").map(|m| m == "Enabled"),
        mig_pending: txt(g, "mig_mode/pending_mig").map(|m| m == "Enabled"),
        instances: children(g, "mig_devices", "mig_device")
            .map(instance)
            .collect(),
        processes: children(g, "processes", "process_info")
            .filter_map(process)
            .collect(),
        profiles: Vec::new(),
        counters: NvCounters {
            energy_mj: None,
            pcie_replays: int(g, "pci/replay_counter"),
            enc_util: num(g, "utilization/encoder_util"),
            dec_util: num(g, "utilization/decoder_util"),
            remapped_correctable: int(g, "remapped_rows/remapped_row_corr"),
            remapped_uncorrectable: int(g, "remapped_rows/remapped_row_unc"),
            remap_failure: txt(g, "remapped_rows/remapped_row_failure").map(|v| v == "Yes"),
            // Neither is in nvidia-smi's report: GPM and XID events come through NVML.
            gr_engine_active: None,
            xid_last: None,
            xid_count: None,
        },
    }
}

/// The `<item>` children of `g`'s `<list>` (none without the list).
fn children<'a>(
    g: Node<'a, 'a>,
    list: &'a str,
    item: &'a str,
) -> impl Iterator<Item = Node<'a, 'a>> {
    child(g, list)
        .into_iter()
        .flat_map(move |d| d.children().filter(move |c| c.has_tag_name(item)))
}

/// One `<mig_device>`.
fn instance(m: Node<'_, '_>) -> NvInstance {
    NvInstance {
        gi: small(m, "gpu_instance_id").unwrap_or(0),
        ci: small(m, "compute_instance_id"),
        uuid: txt(m, "uuid"),
        profile: txt(m, "profile_name"),
        profile_id: None,
        slices: None,
        ofa: small(m, "device_attributes/shared/ofa_count"),
        mem_total_mib: int(m, "fb_memory_usage/total"),
        mem_used_mib: int(m, "fb_memory_usage/used"),
        sms: small(m, "device_attributes/shared/multiprocessor_count"),
        // nvidia-smi's report has no GPM metrics: NVML gives them.
        gr_engine_active: None,
    }
}

/// One `<process_info>`; none without a pid.
fn process(p: Node<'_, '_>) -> Option<NvProc> {
    Some(NvProc {
        pid: u32::try_from(int(p, "pid")?).ok()?,
        name: txt(p, "process_name"),
        used_mib: int(p, "used_memory"),
        gi: small(p, "gpu_instance_id"),
        // nvidia-smi's report has no per-process utilisation.
        sm_util: None,
    })
}

/// One GPU instance as `nvidia-smi mig -lgi` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInstanceRow {
    /// GPU index.
    pub gpu: u32,
    /// Profile name.
    pub name: String,
    /// Profile id.
    pub profile: u32,
    /// GPU instance id.
    pub gi: u32,
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
}

/// Parses `nvidia-smi mig -lgi` (the table; "No GPU instances found" is an empty list). Rows
/// that do not read as `| GPU MIG NAME PROFILE INSTANCE START:SIZE |` are an error, not skipped:
/// a resume decides what to create from this list.
pub fn parse_lgi(text: &str) -> Result<Vec<GpuInstanceRow>, String> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split_whitespace().collect();
        if cells.get(1) != Some(&"MIG") {
            continue;
        }
        let row = (|| {
            let (start, size) = cells.get(5)?.split_once(':')?;
            Some(GpuInstanceRow {
                gpu: cells.first()?.parse().ok()?,
                name: (*cells.get(2)?).to_string(),
                profile: cells.get(3)?.parse().ok()?,
                gi: cells.get(4)?.parse().ok()?,
                start: start.parse().ok()?,
                size: size.parse().ok()?,
            })
        })();
        rows.push(row.ok_or_else(|| {
            format!(
                "nvidia-smi mig -lgi: cannot read the row {:?}",
                crate::domain::text::escape_controls(line.trim())
            )
        })?);
    }
    Ok(rows)
}

/// `nvidia-smi` as a source (a subprocess per read, killed past its time limit).
#[derive(Debug, Clone)]
pub struct NvidiaSmi {
    /// The program (or the simulator's, with its prefix).
    pub program: PathBuf,
    /// Leading arguments.
    pub prefix: Vec<String>,
    /// Per-call limit.
    pub timeout: Duration,
}

impl NvidiaSmi {
    /// Runs it with `args`; stdout on success, else the tool's own message. The child runs in
    /// its own process group, both pipes are drained while it runs (a large `-q -x` never
    /// fills a pipe and stalls), output past 64 MiB or the time limit kills the whole group.
    pub fn run(&self, args: &[&str]) -> Result<(i32, String, String), String> {
        use std::io::Read as _;
        use std::os::unix::process::CommandExt as _;
        const CAP: u64 = 64 * 1024 * 1024;
        let line = || format!("{} {}", self.program.display(), args.join(" "));
        let mut child = std::process::Command::new(&self.program)
            .args(&self.prefix)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        let group = i32::try_from(child.id()).ok();
        let kill_group = || {
            if let Some(g) = group.filter(|g| *g > 1) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(g),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        };
        let over = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
            let over = std::sync::Arc::clone(&over);
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(r) = r {
                    let _ = r.take(CAP + 1).read_to_end(&mut buf);
                }
                if buf.len() as u64 > CAP {
                    over.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                buf
            })
        };
        let out_t = drain(child.stdout.take().map(|r| Box::new(r) as _));
        let err_t = drain(child.stderr.take().map(|r| Box::new(r) as _));
        let end = Instant::now() + self.timeout;
        let status = loop {
            if let Ok(Some(st)) = child.try_wait() {
                break st;
            }
            let too_much = over.load(std::sync::atomic::Ordering::Relaxed);
            if too_much || Instant::now() >= end {
                kill_group();
                let _ = child.kill();
                let _ = child.wait();
                return Err(if too_much {
                    format!("`{}` printed more than 64 MiB; stopped", line())
                } else {
                    format!(
                        "`{}` took longer than {}s and was killed (with its process group)",
                        line(),
                        self.timeout.as_secs()
                    )
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        // Anything it left behind in its group goes with it.
        kill_group();
        let out = out_t.join().unwrap_or_default();
        let err = err_t.join().unwrap_or_default();
        if over.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(format!("`{}` printed more than 64 MiB; stopped", line()));
        }
        Ok((
            status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out).into_owned(),
            String::from_utf8_lossy(&err).into_owned(),
        ))
    }
}

/// Runs nvidia-smi with arguments: (exit status, stdout, stderr), or why it could not run. The
/// MIG executor goes through this: the program (real, or `partop sim nvidia-smi` behind a
/// script), or the simulator called in process where a test drives thousands of layouts.
pub trait RunSmi: Send + Sync + std::fmt::Debug {
    /// One call.
    fn call(&self, args: &[&str]) -> Result<(i32, String, String), String>;
}

impl RunSmi for NvidiaSmi {
    fn call(&self, args: &[&str]) -> Result<(i32, String, String), String> {
        self.run(args)
    }
}

impl NvSource for NvidiaSmi {
    fn read(&mut self) -> Result<NvNode, String> {
        let (code, out, err) = self.run(&["-q", "-x"])?;
        if code != 0 {
            return Err(format!(
                "nvidia-smi -q -x exited with {code}: {}",
                err.trim()
            ));
        }
        parse(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn na_and_units() {
        let x = "<nvidia_smi_log><driver_version>1</driver_version><gpu id=\"00000000:3B:00.0\"><product_name>NVIDIA H100 80GB HBM3</product_name><fb_memory_usage><total>81559 MiB</total><used>N/A</used></fb_memory_usage><mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode><mig_devices><mig_device><index>0</index><gpu_instance_id>2</gpu_instance_id><compute_instance_id>0</compute_instance_id><device_attributes><shared><multiprocessor_count>42</multiprocessor_count></shared></device_attributes><fb_memory_usage><total>40192 MiB</total><used>13 MiB</used></fb_memory_usage></mig_device></mig_devices></gpu></nvidia_smi_log>";
        let n = parse(x).unwrap();
        let g = &n.gpus[0];
        assert_eq!(g.bdf, "0000:3b:00.0");
        assert_eq!((g.mem_total_mib, g.mem_used_mib), (Some(81_559), None));
        assert_eq!(g.instances[0].gi, 2);
        assert_eq!(g.instances[0].sms, Some(42));
        assert!(parse("<html/>").is_err());
        assert!(parse("not xml").is_err());
    }

    #[test]
    fn gpu_instances_as_lgi_lists_them() {
        let t = "+---------------------------------------------------------+\n\
| GPU instances:                                          |\n\
| GPU   Name               Profile  Instance   Placement  |\n\
|                            ID       ID       Start:Size |\n\
|=========================================================|\n\
|   0  MIG 3g.71gb           9        2          0:4      |\n\
+---------------------------------------------------------+\n\
|   0  MIG 1g.18gb+me       20       13          6:1      |\n\
+---------------------------------------------------------+\n";
        let rows = parse_lgi(t).unwrap();
        assert_eq!(
            rows.iter()
                .map(|r| (r.name.as_str(), r.profile, r.gi, r.start, r.size))
                .collect::<Vec<_>>(),
            [("3g.71gb", 9, 2, 0, 4), ("1g.18gb+me", 20, 13, 6, 1)]
        );
        assert_eq!(
            parse_lgi("No GPU instances found: Not Found\n").unwrap(),
            []
        );
        // A row that does not read is an error (a resume decides what to create from it).
        let e = parse_lgi("|   0  MIG 3g.71gb   9   2   ?:?   |").unwrap_err();
        assert!(e.contains("cannot read the row"), "{e}");
    }
}
