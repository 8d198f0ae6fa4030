//! The command layer's one way to talk to the operator: text to stdout (flushed), and a typed
//! confirmation read from stdin.

use anyhow::Result;
use std::io::{BufRead, Write};

/// Why a mutating command does nothing, one wording for every command: `nothing is {done}`.
pub fn read_only_refusal(done: &str) -> String {
    format!(
        "partop is read-only (--read-only, read_only = true in config.toml, or a replayed recording): nothing is {done}\n"
    )
}

/// Prints `text` and flushes.
pub fn out(text: &str) -> Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_all(text.as_bytes())?;
    o.flush()?;
    Ok(())
}

/// Prints `text` (the usual name in the command files).
pub fn say(text: &str) -> Result<()> {
    out(text)
}

/// Asks for `word` on stdin; true only when exactly that was typed.
pub fn confirm(prompt: &str, word: &str) -> Result<bool> {
    out(prompt)?;
    Ok(answer()?.trim() == word)
}

/// The most one typed answer may be: stdin may be /dev/zero or an endless pipe.
const ANSWER_MAX: u64 = 4096;

/// One line the operator typed on stdin, at most [`ANSWER_MAX`] bytes (the one bounded read of
/// an answer: confirmations, prompts, "Enter returns").
pub fn answer() -> Result<String> {
    use std::io::Read as _;
    let mut a = String::new();
    std::io::stdin().lock().take(ANSWER_MAX).read_line(&mut a)?;
    Ok(a)
}

/// A document the operator hands a command (a plan, a MIG plan, a plan set), read bounded and
/// parsed: `path`, or stdin where `stdin_ok` and `path` is `-` (how a fleet rollout hands a
/// node its plan over ssh). `what` names what it must be, for the error.
pub fn read_document<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    stdin_ok: bool,
    what: &str,
) -> Result<T> {
    use anyhow::Context as _;
    let text = if stdin_ok && path.as_os_str() == "-" {
        let mut t = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(std::io::stdin().lock(), 16 << 20),
            &mut t,
        )
        .context("cannot read the plan from stdin")?;
        t
    } else {
        crate::collect::small_file::operator_text(path)
            .with_context(|| format!("cannot read {}", path.display()))?
    };
    serde_json::from_str(&text).with_context(|| format!("{} is not {what}", path.display()))
}

/// The runtime of a one-shot command: one thread (collection mostly waits on subprocesses).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// This partop as the operator started it, for a command printed to be pasted (a resume): run
/// as a bare name, it is found on PATH again; by a path, that path made absolute, so the command
/// works from any directory.
pub fn invoked_as() -> String {
    let argv0 = std::env::args_os()
        .next()
        .map_or_else(|| "partop".into(), |a| a.to_string_lossy().into_owned());
    if argv0.contains('/') {
        std::env::current_exe().map_or(argv0, |p| p.display().to_string())
    } else {
        argv0
    }
}

/// The exact command that continues a fleet rollout: this partop as it was started, the audit
/// journal (the fleet journal lies beside it), the options of `fleet` that reach the nodes or
/// the cluster (`--kubernetes --kubeconfig K --context C`), then `apply SET --resume`; absolute
/// paths, each word quoted, so it works pasted into another shell.
pub fn fleet_resume_command(
    journal: &std::path::Path,
    fleet: &[String],
    kube: Option<&crate::collect::cluster::Target>,
    set: &std::path::Path,
) -> String {
    let abs = |p: &std::path::Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let mut argv = vec![
        invoked_as(),
        "--journal".into(),
        abs(journal),
        "fleet".into(),
    ];
    argv.extend(fleet.iter().cloned());
    // The cluster named as resolved now, not as the environment may say later: a paste in
    // another shell (another $KUBECONFIG, another current context) reaches this cluster.
    let mut env_prefix = String::new();
    if let Some(t) = kube {
        argv.push("--kubernetes".into());
        let env_files: Vec<std::path::PathBuf> = std::env::var_os("KUBECONFIG")
            .map(|v| std::env::split_paths(&v).filter(|p| p.is_file()).collect())
            .unwrap_or_default();
        let home = || {
            std::env::var_os("HOME")
                .map(|h| std::path::Path::new(&h).join(".kube/config"))
                .filter(|p| p.is_file())
        };
        let kubeconfig = match (&t.kubeconfig, env_files.len()) {
            (Some(k), _) => Some(k.clone()),
            // Several files are one merged configuration (as kubectl merges them): said as the
            // same variable on the pasted line, not as one of its files.
            (None, n) if n > 1 => {
                let joined = std::env::join_paths(env_files.iter().map(|p| abs(p)))
                    .map(|j| j.to_string_lossy().into_owned())
                    .unwrap_or_default();
                env_prefix = format!("KUBECONFIG={} ", crate::domain::text::shell_quote(&joined));
                None
            }
            (None, _) => env_files.first().cloned().or_else(home),
        };
        let context = t.context.clone().or_else(|| {
            let config = match &kubeconfig {
                Some(k) => kube::config::Kubeconfig::read_from(k).ok(),
                None => kube::config::Kubeconfig::read().ok(),
            };
            config.and_then(|k| k.current_context)
        });
        if let Some(k) = &kubeconfig {
            argv.extend(["--kubeconfig".into(), abs(k)]);
        }
        if let Some(c) = context {
            argv.extend(["--context".into(), c]);
        }
    }
    argv.extend(["apply".into(), abs(set), "--resume".into()]);
    env_prefix + &crate::domain::text::shell_line(&argv)
}

/// The exact command that resumes a run (`partop apply`, `partop mig apply`): this partop as
/// it was started, every option that chose the node, its tools, the registry and the journal,
/// with absolute paths, then `sub`, the plan and the stop policy, so it works pasted into
/// another shell. The one builder both applies journal and print.
pub fn resume_command(
    src: &crate::cli::SourceArgs,
    journal: &std::path::Path,
    sub: &[&str],
    plan: &std::path::Path,
    kill_after_grace: bool,
    grace: f64,
) -> String {
    let abs = |p: &std::path::Path| {
        std::path::absolute(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let mut argv = vec![invoked_as()];
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            argv.push(flag.into());
            argv.push(v);
        }
    };
    opt(
        "--source",
        (src.source != crate::collect::sysfs::SourceMode::Auto)
            .then(|| clap::ValueEnum::to_possible_value(&src.source))
            .flatten()
            .map(|v| v.get_name().to_string()),
    );
    opt("--sim-state", src.sim_state.as_deref().map(abs));
    opt("--amd-smi", src.amd_smi.as_deref().map(abs));
    opt("--nvidia-smi", src.nvidia_smi.as_deref().map(abs));
    opt("--models", src.models.as_deref().map(abs));
    opt(
        "--sysfs-root",
        (src.sysfs_root != std::path::Path::new("/sys")).then(|| abs(&src.sysfs_root)),
    );
    opt(
        "--proc-root",
        (src.proc_root != std::path::Path::new("/proc")).then(|| abs(&src.proc_root)),
    );
    opt("--journal", Some(abs(journal)));
    argv.extend(sub.iter().map(|s| (*s).to_string()));
    argv.push(if plan.as_os_str() == "-" {
        "PLAN.json".into()
    } else {
        abs(plan)
    });
    argv.push("--grace".into());
    argv.push(grace.to_string());
    argv.push("--resume".into());
    if kill_after_grace {
        argv.push("--kill-after-grace".into());
    }
    argv.iter()
        .map(|a| crate::domain::text::shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    /// The printed resume of a cluster rollout names the cluster as resolved now (the
    /// kubeconfig's current context when none was given), the journal and the set by absolute
    /// paths, each word quoted, and the transport's options: pasted as one shell line it parses
    /// back to exactly these words (2 cases: ssh, cluster).
    #[test]
    fn a_fleet_resume_command_is_whole_and_pastes_back_word_for_word() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("with space");
        std::fs::create_dir_all(&d).unwrap();
        let kc = d.join("kube config");
        std::fs::write(
            &kc,
            "apiVersion: v1\nkind: Config\ncurrent-context: ctx-a\ncontexts: []\nclusters: []\nusers: []\n",
        )
        .unwrap();
        let t = crate::collect::cluster::Target {
            kubeconfig: Some(kc.clone()),
            ..Default::default()
        };
        let set = d.join("set's.json");
        let journal = d.join("journal.jsonl");
        let fleet = [
            "--ssh-config".to_string(),
            d.join("ssh cfg").display().to_string(),
        ];
        for (kube, want) in [
            (None, vec!["fleet", "--ssh-config"]),
            (
                Some(&t),
                vec!["--kubernetes", "--kubeconfig", "--context", "ctx-a"],
            ),
        ] {
            let line = super::fleet_resume_command(&journal, &fleet, kube, &set);
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s\\n' {line}"))
                .output()
                .unwrap();
            let words: Vec<String> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string)
                .collect();
            assert_eq!(
                words[1..4],
                [
                    "--journal".to_string(),
                    journal.display().to_string(),
                    "fleet".into()
                ],
                "{line}"
            );
            for w in &want {
                assert!(words.iter().any(|x| x == w), "{w} in {words:?}");
            }
            if kube.is_some() {
                assert!(words.contains(&kc.display().to_string()), "{words:?}");
            }
            assert_eq!(
                words[words.len() - 3..],
                [
                    "apply".to_string(),
                    set.display().to_string(),
                    "--resume".into()
                ],
                "{line}"
            );
        }
    }
}
