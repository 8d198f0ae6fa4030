//! Verbatim texts the real amd-smi prints (from its source and AMD's docs; see
//! tests/fixtures/amd-smi/SOURCES.md).

/// 7.0-7.11 `set -M` banner.
pub const SET_MEMORY_WARNING_7: &str = "
            ******WARNING******

            After changing memory (NPS) partition modes, users MUST restart
            (reload) the AMD GPU driver. This command NO LONGER AUTOMATICALLY
            reloads the driver, see `amd-smi reset -h` and
            `sudo amd-smi reset -r` for more information.

            This change is intended to allow users the ability to control when is
            the best time to restart the AMD GPU driver, as it may not be desired
            to restart the AMD GPU driver immediately after changing the
            memory (NPS) partition mode.

            Please use `sudo amd-smi reset -r` AFTER successfully
            changing the memory (NPS) partition mode. A successful driver reload 
            is REQUIRED in order to complete updating ALL GPUs in the hive to
            the requested partition mode.

            ******REMINDER******
            In order to reload the AMD GPU driver, users MUST quit all GPU
            workloads across all devices.
            
";

/// 6.3/6.4 `set -M` banner.
pub const SET_MEMORY_WARNING_6: &str = "
          ****** WARNING ******

          Setting Dynamic Memory (NPS) partition modes require users to quit all GPU workloads.
          AMD SMI will then attempt to change memory (NPS) partition mode.
          Upon a successful set, AMD SMI will then initiate an action to restart AMD GPU driver.
          This action will change all GPU's in the hive to the requested memory (NPS) partition mode.

          Please use this utility with caution.

";

/// `reset -r` banner.
pub const RELOAD_WARNING: &str = "
          ****** WARNING ******

          AMD SMI is about to initiate an AMD GPU driver restart (module reload).

          Reloading the AMD GPU driver REQUIRES users to quit all GPU activity across all
          devices.

          If user is initiating a driver reload AFTER changing memory (NPS) partition
          modes (`sudo amd-smi set -M <NPS_MODE>`), a AMD GPU driver reload is REQUIRED
          to complete updating the partition mode. This change will effect ALL GPUs in
          the hive. Advise using `amd-smi list -e` and `amd-smi partition -c -m`
          afterwards to ensure changes were applied as expected.

          Please use this utility with caution.
          
";

/// The prompt (Python `input()`; no newline).
pub const PROMPT: &str = "Do you accept these terms? [Y/N] ";

/// Printed when the answer is not yes.
pub const DECLINED: &str = "Confirmation not given. Exiting without setting value";

/// Answers Python's helper accepts.
pub fn is_yes(answer: &str) -> bool {
    matches!(answer.trim(), "Yes" | "yes" | "y" | "Y" | "YES")
}

/// A progress bar line as amd-smi draws it (40 cells).
pub fn bar(done: f64, total: f64) -> String {
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "0..=40"
    )]
    let filled = ((done / total.max(0.001)) * 40.0).clamp(0.0, 40.0) as usize;
    format!("[{}{}]", "\u{2588}".repeat(filled), ".".repeat(40 - filled))
}
