//! Recognises model servers from their command line (vLLM, SGLang, llama.cpp server, TGI) and
//! names the model they serve, for labels in the partition map and the process table; finds
//! each server's port and devices, for discovery of servers not in the registry. Pure.

use super::snapshot::{Process, Snapshot};

/// A model server found among the processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discovered {
    /// Its process.
    pub pid: u32,
    /// Server kind.
    pub server: &'static str,
    /// Model (short name).
    pub model: String,
    /// Model id as given on its command line.
    pub model_id: String,
    /// Port it listens on (its `--port`, else the server's default).
    pub port: Option<u16>,
    /// Logical GPUs it uses (from its GPU use; else from `HIP_VISIBLE_DEVICES`).
    pub gpus: Vec<u32>,
}

/// The port a server listens on: `--port N` / `--port=N`, else the server's default.
pub fn port_of(command: &str, server: &str) -> Option<u16> {
    let args: Vec<&str> = command.split_whitespace().collect();
    let given = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--port=")
            .or_else(|| (*a == "--port").then(|| args.get(i + 1).copied()).flatten())
            .and_then(|p| p.parse().ok())
    });
    given.or(match server {
        "vllm" => Some(8000),
        "sglang" => Some(30000),
        "llama.cpp" => Some(8080),
        "tgi" => Some(3000),
        _ => None,
    })
}

/// The model id exactly as the command line gives it (the registry needs the full id).
fn model_id_of(command: &str, short: &str) -> String {
    command
        .split_whitespace()
        .map(|a| a.rsplit('=').next().unwrap_or(a))
        .find(|a| a.ends_with(short))
        .unwrap_or(short)
        .to_string()
}

fn devices_of(p: &Process) -> Vec<u32> {
    let mut used: Vec<u32> = p
        .gpus
        .iter()
        .filter(|u| !u.attached_only())
        .map(|u| u.gpu_id)
        .collect();
    if used.is_empty() {
        used = ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
            .iter()
            .find_map(|k| p.visible_devices.get(*k))
            .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default();
    }
    used.sort_unstable();
    used.dedup();
    used
}

/// Every model server among the node's processes. A server's worker processes (same command
/// line, child of the server) are folded into their parent.
pub fn discover(snap: &Snapshot) -> Vec<Discovered> {
    let mut out: Vec<Discovered> = Vec::new();
    for p in &snap.processes {
        let Some(cmd) = p.command.as_deref() else {
            continue;
        };
        let Some((server, model)) = model_of(cmd) else {
            continue;
        };
        let gpus = devices_of(p);
        let port = port_of(cmd, server);
        if let Some(parent) = out
            .iter_mut()
            .find(|d| Some(d.pid) == p.ppid && d.model == model && d.port == port)
        {
            parent.gpus.extend(gpus);
            parent.gpus.sort_unstable();
            parent.gpus.dedup();
            continue;
        }
        out.push(Discovered {
            pid: p.pid,
            server,
            model_id: model_id_of(cmd, &model),
            model,
            port,
            gpus,
        });
    }
    out
}

/// The server kind and model a command line runs, if it is a known model server.
pub fn model_of(command: &str) -> Option<(&'static str, String)> {
    let args: Vec<&str> = command.split_whitespace().collect();
    let flag = |names: &[&str]| -> Option<String> {
        args.iter().enumerate().find_map(|(i, a)| {
            names.iter().find_map(|n| {
                a.strip_prefix(&format!("{n}="))
                    .map(str::to_string)
                    .or_else(|| {
                        (*a == *n)
                            .then(|| args.get(i + 1).map(|s| (*s).to_string()))
                            .flatten()
                    })
            })
        })
    };
    let has = |s: &str| {
        args.iter()
            .any(|a| a.ends_with(s) || a.contains(&format!("{s}.")) || a.contains(&format!("/{s}")))
    };
    let short = |m: String| m.rsplit('/').next().map_or(m.clone(), str::to_string);
    if let Some(i) = args.iter().position(|a| a.ends_with("vllm"))
        && args.get(i + 1) == Some(&"serve")
        && let Some(m) = args.get(i + 2).filter(|m| !m.starts_with('-'))
    {
        return Some(("vllm", short((*m).to_string())));
    }
    if has("vllm") || command.contains("vllm.entrypoints") {
        return flag(&["--model"]).map(|m| ("vllm", short(m)));
    }
    if command.contains("sglang") {
        return flag(&["--model-path", "--model"]).map(|m| ("sglang", short(m)));
    }
    if has("llama-server") || has("llama.cpp") {
        return flag(&["-m", "--model", "--hf-repo"]).map(|m| ("llama.cpp", short(m)));
    }
    if has("text-generation-launcher") {
        return flag(&["--model-id"]).map(|m| ("tgi", short(m)));
    }
    None
}

/// The registry entry for discovered server `m` of `snap` (None if it is registered already or
/// its process is gone).
pub fn entry_for_model(snap: &Snapshot, m: &super::model_status::ServedModel) -> Option<String> {
    if m.spec.is_some() {
        return None;
    }
    let p = snap.processes.iter().find(|p| Some(p.pid) == m.pid)?;
    let name = m
        .model
        .rsplit('/')
        .next()
        .unwrap_or(&m.model)
        .to_lowercase();
    Some(entry_for_discovered(
        &name,
        &m.model,
        p.command.as_deref().unwrap_or(""),
        m.port,
        p.vram_total(),
    ))
}

/// A registry entry for a server partop discovered: its command line with the port and the
/// device turned into placeholders, its memory from what it holds now, in whole GiB
/// as the hardware gives them ([`super::placement::whole_gib_held`]).
pub fn entry_for_discovered(
    name: &str,
    model: &str,
    command: &str,
    port: Option<u16>,
    vram_bytes: u64,
) -> String {
    let mut argv: Vec<String> = Vec::new();
    let mut it = command.split_whitespace().peekable();
    while let Some(a) = it.next() {
        if a == "--port" && it.peek().is_some() {
            it.next();
            argv.push("--port".into());
            argv.push("{port}".into());
        } else if a.starts_with("--port=") {
            argv.push("--port={port}".into());
        } else {
            argv.push(a.to_string());
        }
    }
    let gb = super::placement::whole_gib_held(vram_bytes);
    let quoted: Vec<String> = argv.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "\n[[model]]\nname = {name:?}\nmodel = {model:?}\nport = {}\nmemory_gb = {gb}  # what it holds now; set it to what it needs\nlaunch.command = [{}]\n",
        port.unwrap_or(8000),
        quoted.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_servers() {
        assert_eq!(
            model_of(
                "/usr/bin/python3 /opt/venv/bin/vllm serve meta-llama/Llama-3.1-70B-Instruct --port 8000"
            ),
            Some(("vllm", "Llama-3.1-70B-Instruct".into()))
        );
        assert_eq!(
            model_of(
                "python3 -m vllm.entrypoints.openai.api_server --model=Qwen/Qwen2.5-32B --tp 2"
            ),
            Some(("vllm", "Qwen2.5-32B".into()))
        );
        assert_eq!(
            model_of("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"),
            Some(("sglang", "DeepSeek-V3".into()))
        );
        assert_eq!(
            model_of("./llama-server -m /models/mistral-7b.Q4_K_M.gguf --port 8080"),
            Some(("llama.cpp", "mistral-7b.Q4_K_M.gguf".into()))
        );
        assert_eq!(
            model_of("text-generation-launcher --model-id bigscience/bloom"),
            Some(("tgi", "bloom".into()))
        );
        assert_eq!(model_of("python3 train.py --epochs 3"), None);
    }

    #[test]
    fn ports_and_ids() {
        assert_eq!(port_of("vllm serve m --port 8011", "vllm"), Some(8011));
        assert_eq!(port_of("vllm serve m --port=8012", "vllm"), Some(8012));
        assert_eq!(port_of("vllm serve m", "vllm"), Some(8000));
        assert_eq!(
            port_of("python3 -m sglang.launch_server --model-path x", "sglang"),
            Some(30000)
        );
        assert_eq!(
            model_id_of(
                "vllm serve meta-llama/Llama-3.1-8B --port 1",
                "Llama-3.1-8B"
            ),
            "meta-llama/Llama-3.1-8B"
        );
        assert_eq!(
            model_id_of(
                "python3 -m vllm.entrypoints.openai.api_server --model=Qwen/Qwen2.5-32B",
                "Qwen2.5-32B"
            ),
            "Qwen/Qwen2.5-32B"
        );
    }
    #[test]
    fn a_discovered_server_becomes_a_valid_entry() {
        let e = entry_for_discovered(
            "llama-8b",
            "meta-llama/Llama-3.1-8B",
            "/opt/venv/bin/python3 /opt/venv/bin/vllm serve meta-llama/Llama-3.1-8B --port 8011 --max-model-len 8192",
            Some(8011),
            17_500_000_000,
        );
        let r = crate::domain::models::parse("m.toml", &e).unwrap();
        let m = &r.models[0];
        assert_eq!(m.port, 8011);
        // 17.5e9 bytes are 16.3 GiB: the registry's GB is amd-smi's GiB (was 18, decimal GB).
        assert!((m.memory_gb - 17.0).abs() < f64::EPSILON);
        assert_eq!(
            m.launch_text(&[5], &[]),
            "HIP_VISIBLE_DEVICES=5 /opt/venv/bin/python3 /opt/venv/bin/vllm serve meta-llama/Llama-3.1-8B --port 8011 --max-model-len 8192"
        );
    }
}
