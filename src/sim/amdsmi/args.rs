//! Argument parsing for the fake amd-smi, accepting what the real CLI accepts for the commands
//! it emulates (short and long flags, `-g` with several values or `all`).

/// Parsed arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    /// Subcommand.
    pub command: Option<String>,
    /// `--json`.
    pub json: bool,
    /// `-g` values (empty = all).
    pub gpus: Vec<String>,
    /// Other flags, normalised to their long names without dashes.
    pub flags: Vec<String>,
    /// Value of `-C`/`--compute-partition`.
    pub compute: Option<String>,
    /// Value of `-M`/`--memory-partition`.
    pub memory: Option<String>,
}

fn long(command: &str, f: &str) -> String {
    let s = match (command, f) {
        ("static", "-a") => "asic",
        ("static", "-b") => "bus",
        ("static", "-v") => "vram",
        ("static", "-p") => "partition",
        ("static", "-l") => "limit",
        ("metric", "-u") => "usage",
        ("metric", "-p") => "power",
        ("metric", "-t") => "temperature",
        ("metric", "-m") => "mem-usage",
        ("metric", "-e") => "ecc",
        ("metric", "-c") => "clock",
        ("list", "-e") => "enumeration",
        ("partition", "-c") => "current",
        ("partition", "-m") => "memory",
        ("partition", "-a") => "accelerator",
        ("reset", "-r") => "reload-driver",
        ("monitor", "-q") => "process",
        _ => return f.trim_start_matches('-').to_string(),
    };
    s.to_string()
}

impl Args {
    /// Parses argv (without the program name).
    pub fn parse(argv: &[String]) -> Result<Self, String> {
        let mut a = Self::default();
        let mut i = 0;
        while i < argv.len() {
            let t = argv[i].as_str();
            match t {
                "--json" => a.json = true,
                "-g" | "--gpu" => {
                    while i + 1 < argv.len() && !argv[i + 1].starts_with('-') {
                        i += 1;
                        a.gpus.push(argv[i].clone());
                    }
                    if a.gpus.is_empty() {
                        return Err(
                            "amd-smi: error: argument -g/--gpu: expected at least one argument"
                                .into(),
                        );
                    }
                }
                "-C"
                | "--compute-partition"
                | "--accelerator-partition"
                | "-M"
                | "--memory-partition" => {
                    let Some(v) = argv.get(i + 1) else {
                        return Err(format!(
                            "amd-smi set: error: argument {t}: expected one argument"
                        ));
                    };
                    if t == "-M" || t == "--memory-partition" {
                        a.memory = Some(v.clone());
                    } else {
                        a.compute = Some(v.clone());
                    }
                    i += 1;
                }
                _ if t.starts_with('-') => {
                    let cmd = a.command.clone().unwrap_or_default();
                    // Combined short flags (-cm) as argparse allows.
                    if !t.starts_with("--") && t.len() > 2 {
                        for c in t[1..].chars() {
                            a.flags.push(long(&cmd, &format!("-{c}")));
                        }
                    } else {
                        a.flags.push(long(&cmd, t));
                    }
                }
                _ if a.command.is_none() => a.command = Some(t.to_string()),
                _ => return Err(format!("amd-smi: error: unrecognized arguments: {t}")),
            }
            i += 1;
        }
        Ok(a)
    }

    /// Whether a flag was given.
    pub fn has(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Args {
        Args::parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn flags_and_gpu_lists() {
        let a = p("static -a -b -v -p --json -g 0 3");
        assert_eq!(a.command.as_deref(), Some("static"));
        assert!(a.json && a.has("asic") && a.has("partition"));
        assert_eq!(a.gpus, vec!["0", "3"]);
        let a = p("partition -cm --json");
        assert!(a.has("current") && a.has("memory"));
        let a = p("set --gpu all --compute-partition DPX");
        assert_eq!(a.compute.as_deref(), Some("DPX"));
        assert_eq!(a.gpus, vec!["all"]);
    }
}
