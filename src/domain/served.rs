//! Recognises model servers from their command line (vLLM, SGLang, llama.cpp server, TGI) and
//! names the model they serve, for labels in the partition map and the process table.

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
}
