//! partop's entry point: parses the command line, sets up logging, and runs the chosen command.
//! The only place that decides exit codes.

use clap::Parser;
use partop::cli::{Cli, exit};
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = partop::sim::kernel::from_env() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    if let Some(code) = partop::sim::workload::from_env() {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    let cli = Cli::parse_from(partop::cli::sim_before_command(std::env::args_os()));
    match partop::cli::commands::main(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // The reader went away (`partop snapshot --json | head`): what it wanted it has,
            // so end quietly with the status a shell gives a writer killed by SIGPIPE, as the
            // tools it is piped beside do, instead of blaming the pipe.
            let pipe_closed = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            });
            if pipe_closed {
                return ExitCode::from(exit::PIPE_CLOSED);
            }
            #[expect(clippy::print_stderr, reason = "the terminal is restored by now")]
            {
                eprintln!("partop: {e:#}");
            }
            // Asking for something that does not exist (a scenario name) is a usage error,
            // as the docs say: exit 2, not 1.
            let usage = e.chain().any(|c| {
                c.downcast_ref::<exit::Usage>().is_some()
                    || matches!(
                        c.downcast_ref::<partop::sim::scenario::ScenarioError>(),
                        Some(partop::sim::scenario::ScenarioError::Unknown { .. })
                    )
            });
            ExitCode::from(if usage { exit::USAGE } else { exit::FAILED })
        }
    }
}
