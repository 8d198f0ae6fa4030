//! `nvidia-smi -q -x` (XML, parsed with roxmltree): the fallback when NVML cannot be loaded, and
//! the path the MIG executor and the fake nvidia-smi share. Every number tolerates `N/A`.

use super::node::{NvGpu, NvInstance, NvNode, NvProc, NvSource};
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

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "MiB, MHz"
)]
fn int(n: Node<'_, '_>, path: &str) -> Option<u64> {
    num(n, path).map(|v| v as u64)
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
    let mut gpus = Vec::new();
    for (index, g) in root
        .children()
        .filter(|c| c.has_tag_name("gpu"))
        .enumerate()
    {
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
        let mig_enabled = txt(g, "mig_mode/current_mig").map(|m| m == "Enabled");
        let instances = child(g, "mig_devices")
            .map(|d| {
                d.children()
                    .filter(|c| c.has_tag_name("mig_device"))
                    .map(|m| NvInstance {
                        gi: int(m, "gpu_instance_id")
                            .and_then(|v| u32::try_from(v).ok())
                            .unwrap_or(0),
                        ci: int(m, "compute_instance_id").and_then(|v| u32::try_from(v).ok()),
                        uuid: txt(m, "uuid"),
                        profile: txt(m, "profile_name"),
                        mem_total_mib: int(m, "fb_memory_usage/total"),
                        mem_used_mib: int(m, "fb_memory_usage/used"),
                        sms: int(m, "device_attributes/shared/multiprocessor_count")
                            .and_then(|v| u32::try_from(v).ok()),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let processes = child(g, "processes")
            .map(|d| {
                d.children()
                    .filter(|c| c.has_tag_name("process_info"))
                    .filter_map(|p| {
                        Some(NvProc {
                            pid: u32::try_from(int(p, "pid")?).ok()?,
                            name: txt(p, "process_name"),
                            used_mib: int(p, "used_memory"),
                            gi: int(p, "gpu_instance_id").and_then(|v| u32::try_from(v).ok()),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        gpus.push(NvGpu {
            index: int(g, "minor_number")
                .and_then(|v| u32::try_from(v).ok())
                .unwrap_or(u32::try_from(index).unwrap_or(0)),
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
            sm_clock_mhz: int(g, "clocks/sm_clock").and_then(|v| u32::try_from(v).ok()),
            mem_clock_mhz: int(g, "clocks/mem_clock").and_then(|v| u32::try_from(v).ok()),
            mig_enabled,
            mig_pending: txt(g, "mig_mode/pending_mig").map(|m| m == "Enabled"),
            instances,
            processes,
            profiles: Vec::new(),
        });
    }
    Ok(NvNode {
        source: format!(
            "nvidia-smi -q -x (driver {})",
            driver.clone().unwrap_or_else(|| "?".into())
        ),
        driver,
        gpus,
    })
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
    /// Runs it with `args`; stdout on success, else the tool's own message.
    pub fn run(&self, args: &[&str]) -> Result<(i32, String, String), String> {
        let mut child = std::process::Command::new(&self.program)
            .args(&self.prefix)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", self.program.display()))?;
        let end = Instant::now() + self.timeout;
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "`{} {}` took longer than {}s and was killed",
                        self.program.display(),
                        args.join(" "),
                        self.timeout.as_secs()
                    ));
                }
            }
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
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
}
