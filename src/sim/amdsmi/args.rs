//! Argument parsing for the fake amd-smi, accepting what the real CLI accepts for the commands
//! it emulates (short and long flags, `-g` with several values or `all`) and refusing the rest
//! as the real argparse does (`amd-smi: error: unrecognized arguments: --nope`, exit 2): a
//! rehearsal must fail where the real tool would.

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

/// Each command's own flags as amd-smi's argparse defines them: (short, long). Every command
/// also takes the common ones ([`COMMON`]).
const FLAGS: &[(&str, &[(&str, &str)])] = &[
    ("version", &[]),
    ("list", &[("e", "enumeration")]),
    (
        "static",
        &[
            ("a", "asic"),
            ("b", "bus"),
            ("V", "vbios"),
            ("d", "driver"),
            ("v", "vram"),
            ("c", "cache"),
            ("B", "board"),
            ("R", "process-isolation"),
            ("r", "ras"),
            ("p", "partition"),
            ("s", "soc-pstate"),
            ("x", "xgmi-plpd"),
            ("l", "limit"),
            ("P", "policy"),
            ("n", "numa"),
            ("C", "clock"),
        ],
    ),
    (
        "metric",
        &[
            ("u", "usage"),
            ("p", "power"),
            ("c", "clock"),
            ("t", "temperature"),
            ("e", "ecc"),
            ("k", "ecc-blocks"),
            ("P", "pcie"),
            ("f", "fan"),
            ("C", "voltage-curve"),
            ("o", "overdrive"),
            ("l", "perf-level"),
            ("x", "xgmi-err"),
            ("E", "energy"),
            ("m", "mem-usage"),
            ("v", "violation"),
        ],
    ),
    (
        "process",
        &[
            ("G", "general"),
            ("e", "engine"),
            ("p", "pid"),
            ("n", "name"),
        ],
    ),
    (
        "monitor",
        &[
            ("p", "power-usage"),
            ("t", "temperature"),
            ("u", "gfx"),
            ("m", "mem"),
            ("n", "encoder"),
            ("d", "decoder"),
            ("e", "ecc"),
            ("v", "vram-usage"),
            ("r", "pcie"),
            ("q", "process"),
            ("V", "violation"),
        ],
    ),
    (
        "partition",
        &[("c", "current"), ("m", "memory"), ("a", "accelerator")],
    ),
    // Only the changes the simulated node makes: a flag it would ignore is refused.
    ("set", &[]),
    ("reset", &[("r", "reload-driver")]),
];

/// The flags every command takes (`-g` and the partition values are parsed apart).
const COMMON: &[(&str, &str)] = &[("h", "help"), ("", "json"), ("", "csv")];

/// The long name of flag `f` (`-u`, `--usage`) for `command`, or `None` when amd-smi's
/// argparse would refuse it.
fn long(command: &str, f: &str) -> Option<&'static str> {
    let own = FLAGS
        .iter()
        .find(|(c, _)| *c == command)
        .map_or(&[][..], |(_, f)| *f);
    let all = || own.iter().chain(COMMON.iter());
    if let Some(l) = f.strip_prefix("--") {
        all().find(|(_, x)| *x == l).map(|(_, x)| *x)
    } else {
        let s = f.strip_prefix('-')?;
        all()
            .find(|(x, _)| !x.is_empty() && *x == s)
            .map(|(_, x)| *x)
    }
}

/// argparse's words for an argument it does not know.
fn unrecognized(t: &str) -> String {
    format!("usage: amd-smi [-h] ...\namd-smi: error: unrecognized arguments: {t}")
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
                | "--memory-partition"
                    if a.command.as_deref() == Some("set") =>
                {
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
                "--file" | "--loglevel" => {
                    // Options with a value, taken by every command; the value is not used.
                    if argv.get(i + 1).is_none() {
                        return Err(format!(
                            "amd-smi: error: argument {t}: expected one argument"
                        ));
                    }
                    i += 1;
                }
                _ if t.starts_with('-') => {
                    let cmd = a.command.clone().unwrap_or_default();
                    // Combined short flags (-cm) as argparse allows.
                    let each: Vec<String> = if !t.starts_with("--") && t.chars().count() > 2 {
                        t.chars().skip(1).map(|c| format!("-{c}")).collect()
                    } else {
                        vec![t.to_string()]
                    };
                    for f in each {
                        let Some(l) = long(&cmd, &f) else {
                            return Err(unrecognized(t));
                        };
                        if l == "json" {
                            a.json = true;
                        } else {
                            a.flags.push(l.to_string());
                        }
                    }
                }
                _ if a.command.is_none() => a.command = Some(t.to_string()),
                _ => return Err(unrecognized(t)),
            }
            i += 1;
        }
        Ok(a)
    }

    /// What `-h` prints: the command's flags (amd-smi's help, short).
    pub fn usage(&self) -> String {
        let cmd = self.command.as_deref().unwrap_or("");
        let own = FLAGS
            .iter()
            .find(|(c, _)| *c == cmd)
            .map_or(&[][..], |(_, f)| *f);
        let mut u = format!("usage: amd-smi {cmd} [-h] [--json | --csv] [-g GPU [GPU ...]]");
        if cmd == "set" {
            u.push_str(" [-C ACCELERATOR_PARTITION] [-M MEMORY_PARTITION]");
        }
        for (short, long) in own {
            u.push_str(&format!(" [-{short} | --{long}]"));
        }
        u + "\n"
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

    fn parse(s: &str) -> Result<Args, String> {
        Args::parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    /// Every command line partop's collector and planner send is accepted as the real tool
    /// accepts it.
    #[test]
    fn what_partop_sends_is_accepted() {
        use crate::collect::amdsmi::reader as r;
        for argv in [
            &r::ARGS_VERSION[..],
            &r::ARGS_LIST,
            &r::ARGS_STATIC,
            &r::ARGS_PARTITION,
            &r::ARGS_PARTITION_ROOT,
            &r::ARGS_METRIC,
            &r::ARGS_PROCESS,
            &["set", "-g", "0", "2", "-C", "DPX"],
            &["set", "-M", "NPS2"],
            &["set", "--gpu", "all", "--memory-partition", "NPS4"],
            &["reset", "-r", "-g", "0"],
            &["monitor", "-p", "-t", "-u", "-m", "-v", "-q", "--json"],
        ] {
            let v: Vec<String> = argv.iter().map(ToString::to_string).collect();
            assert!(Args::parse(&v).is_ok(), "{argv:?}");
        }
    }

    /// Each command's flags, short and long, are known; anything else (a made-up flag, an
    /// unknown letter, another command's flag, one inside a combined group) is refused with
    /// argparse's words, as the real amd-smi refuses it (exit 2 in `main`).
    #[test]
    fn unknown_flags_are_refused_as_argparse_refuses_them() {
        let mut cases = 0;
        for (cmd, own) in FLAGS {
            for (short, long) in *own {
                let a = parse(&format!("{cmd} --{long}")).unwrap();
                assert!(a.has(long), "{cmd} --{long}");
                let a = parse(&format!("{cmd} -{short}")).unwrap();
                assert!(a.has(long), "{cmd} -{short}");
                cases += 2;
            }
            for bad in ["--nope", "-Z", "--json-please", "-hZ"] {
                let e = parse(&format!("{cmd} {bad}")).unwrap_err();
                assert!(
                    e.ends_with(&format!("amd-smi: error: unrecognized arguments: {bad}")),
                    "{cmd} {bad}: {e}"
                );
                cases += 1;
            }
            // A flag of another command that this one lacks.
            for (other, theirs) in FLAGS {
                for (_, long) in *theirs {
                    if other != cmd && !own.iter().any(|(_, l)| l == long) {
                        assert!(parse(&format!("{cmd} --{long}")).is_err(), "{cmd} --{long}");
                        cases += 1;
                    }
                }
            }
        }
        // `-C` is a value only for `set`; for `metric` it is the voltage curve.
        assert!(parse("metric -C").unwrap().has("voltage-curve"));
        assert_eq!(parse("set -C CPX").unwrap().compute.as_deref(), Some("CPX"));
        assert!(parse("metric --file").is_err());
        assert!(parse("metric --loglevel DEBUG -u").unwrap().has("usage"));
        assert!(cases > 200, "{cases} cases");
    }
}
