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
