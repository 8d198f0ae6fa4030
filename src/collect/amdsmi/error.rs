//! Everything that can go wrong reading amd-smi, each with the command, what was seen, and what
//! to do about it.

use std::time::Duration;

/// An amd-smi failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmdSmiError {
    /// The executable was not found.
    #[error(
        "amd-smi not found (searched: {searched}). Install ROCm's amd-smi, pass --amd-smi PATH, \
         or try partop on the simulated node: partop --sim"
    )]
    NotFound {
        /// Directories searched.
        searched: String,
    },
    /// It could not be started.
    #[error("could not run {program}: {error}")]
    Spawn {
        /// Program path.
        program: String,
        /// OS error.
        error: String,
    },
    /// It did not answer in time (and was killed).
    #[error("timed out after {}s: `{command}` (stopped; the last good values stay on screen)", .after.as_secs_f32())]
    Timeout {
        /// Command line.
        command: String,
        /// Time limit.
        after: Duration,
    },
    /// It printed more than partop reads from one call (an endless writer).
    #[error("`{command}` printed more than {} MiB; stopped (a broken or endless amd-smi? check `{command}` by hand)", .limit / (1024 * 1024))]
    TooMuchOutput {
        /// Command line.
        command: String,
        /// The cap, bytes.
        limit: usize,
    },
    /// The user lacks the video/render groups.
    #[error("`{command}`: {message}. Fix: sudo usermod -aG video,render $USER, then log in again")]
    MissingGroups {
        /// Command line.
        command: String,
        /// amd-smi's warning.
        message: String,
    },
    /// Non-zero exit.
    #[error("`{command}` exited with status {code}: {excerpt}")]
    Exit {
        /// Command line.
        command: String,
        /// Exit status.
        code: i32,
        /// The first lines of its output.
        excerpt: String,
    },
    /// amd-smi's own JSON error object (`{"error": ..., "code": ...}`).
    #[error("`{command}` reported error {code}: {message}")]
    Cli {
        /// Command line.
        command: String,
        /// amd-smi's error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// Library status lines (`[AMDSMI_STATUS_*]`) and no usable JSON.
    #[error("`{command}` failed: {lines}")]
    Status {
        /// Command line.
        command: String,
        /// The status lines.
        lines: String,
    },
    /// Output that is not JSON.
    #[error("`{command}` printed something that is not JSON ({detail}): {excerpt:?}")]
    NotJson {
        /// Command line.
        command: String,
        /// Parser detail (line and column).
        detail: String,
        /// A short excerpt.
        excerpt: String,
    },
    /// A replayed recording lacks this command.
    #[error("the recording has no output for `{command}`")]
    NotRecorded {
        /// Command line.
        command: String,
    },
    /// JSON of a shape partop has not seen.
    #[error(
        "`{command}`: unexpected value at {path}: {detail}. Please report it with `partop record`"
    )]
    Shape {
        /// Command line.
        command: String,
        /// JSON path (`gpu_data[3].usage.gfx_activity`).
        path: String,
        /// What was wrong.
        detail: String,
    },
}

/// The first `max` characters of `s` on one line, for messages.
pub fn excerpt(s: &str, max: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() > max {
        let cut: String = one.chars().take(max).collect();
        format!("{cut}…")
    } else {
        one
    }
}
