//! The one bounded reader of files partop did not write: kernel attribute files (sysfs, KFD),
//! /proc files, and the files an operator names. Nothing is read without a cap, so a file that
//! goes on (a character device such as /dev/zero in a hostile or broken tree) is an error
//! naming the file, not a read that fills memory. Kernel attribute files keep the kernel's own
//! semantics (a blocking file is caught by the kernel source's 2 s guard); /proc files and
//! operator files are opened without blocking (`O_NONBLOCK`) and must be regular files, so a
//! FIFO or a device is refused at once with the reason. Used by every reader in `collect`,
//! the journal's reader, the configuration and the command layer.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;

/// The most a kernel attribute file may hold (`gpu_metrics` v1.8 is 3,872 bytes).
pub const MAX: usize = 1 << 20;

/// Reads `p` into `buf` (cleared first).
pub fn read(p: &Path, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let f = std::fs::File::open(p)?;
    read_upto(f, buf, MAX).map_err(|e| too_long(e, "not a kernel attribute file"))
}

/// Reads `p` as text (invalid UTF-8 replaced).
pub fn text(p: &Path) -> std::io::Result<String> {
    let mut buf = Vec::new();
    read(p, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The most a /proc file partop reads may hold (`environ` and `cmdline` are bounded by the
/// kernel's argument limit, a few MiB at most; `status`, `stat`, `cgroup`, `fdinfo` are small).
pub const PROC_MAX: usize = 4 << 20;

/// Reads a /proc file (`/proc/PID/environ`, `cmdline`, `cgroup`, `status`, `stat`, `fdinfo/N`,
/// `/proc/stat`, …) into `buf`: without blocking, a regular file only, at most [`PROC_MAX`].
/// On a captured `--proc-root` any of these may be a device, a FIFO or a link to /dev/zero.
pub fn proc_read(p: &Path, buf: &mut Vec<u8>) -> std::io::Result<()> {
    let f = open_regular(p, PROC_MAX)?;
    read_upto(f, buf, PROC_MAX).map_err(|e| too_long(e, "not a /proc file"))
}

/// [`proc_read`] as text (invalid UTF-8 replaced).
pub fn proc_text(p: &Path) -> std::io::Result<String> {
    let mut buf = Vec::new();
    proc_read(p, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The most an operator's file (a recording, a plan, a registry, a hosts list) may hold.
pub const FILE_MAX: usize = 256 << 20;

/// Reads a file the operator named (at most [`FILE_MAX`]): a FIFO, a device or a directory given
/// by mistake is refused at once with what it is (never a read that blocks for ever or fills
/// memory).
pub fn operator_text(p: &Path) -> std::io::Result<String> {
    String::from_utf8(operator_bytes(p)?).map_err(|_| std::io::Error::other("not UTF-8 text"))
}

/// [`operator_text`] as bytes (a journal, whose torn lines may not be UTF-8).
pub fn operator_bytes(p: &Path) -> std::io::Result<Vec<u8>> {
    let f = open_regular(p, FILE_MAX)?;
    let mut buf = Vec::new();
    read_upto(f, &mut buf, FILE_MAX).map_err(|e| {
        too_long(
            e,
            "not a file partop reads (a device or an endless stream?)",
        )
    })?;
    Ok(buf)
}

/// [`operator_text`], where a missing file is `None` (an optional configuration file).
pub fn operator_text_if_exists(p: &Path) -> std::io::Result<Option<String>> {
    match operator_text(p) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The last `max` bytes of a regular file (a log that grows while it is read): never more,
/// and a FIFO or a device is refused (see [`open_regular`]).
pub fn tail(p: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::{Seek as _, SeekFrom};
    let mut f = open_regular(p, max)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max as u64)))?;
    let mut buf = Vec::new();
    f.take(max as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Opens `p` for reading without waiting for a writer (`O_NONBLOCK`: opening a FIFO never
/// blocks) and keeps it only if it is a regular file (to be read up to `max` bytes, which the
/// refusal names). Links are followed: the operator may keep a file anywhere.
pub fn open_regular(p: &Path, max: usize) -> std::io::Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits() | nix::fcntl::OFlag::O_CLOEXEC.bits())
        .open(p)?;
    let kind = f.metadata()?.file_type();
    if kind.is_file() {
        return Ok(f);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "is {}, not a regular file: partop reads only regular files here, never longer than {} (a pipe or a device could block or never end); save the content to a file and name that",
            kind_words(kind),
            size_words(max)
        ),
    ))
}

/// What a file that is not a regular file is, in words.
pub fn kind_words(kind: std::fs::FileType) -> &'static str {
    if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn size_words(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} KiB", n >> 10)
    }
}

fn too_long(e: Failure, what: &str) -> std::io::Error {
    match e {
        Long(n) => std::io::Error::other(format!("longer than {}: {what}", size_words(n))),
        Io(e) => e,
    }
}

enum Failure {
    Long(usize),
    Io(std::io::Error),
}
use Failure::{Io, Long};

fn read_upto(mut f: std::fs::File, buf: &mut Vec<u8>, max: usize) -> Result<(), Failure> {
    buf.clear();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match f.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Io(e)),
        };
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > max {
            return Err(Long(max));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    #[test]
    fn an_endless_file_is_an_error_not_a_full_memory() {
        let e = super::text(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a kernel attribute file"), "{e}");
        assert!(
            !super::text(Path::new("/proc/self/comm"))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn proc_and_operator_files_must_be_regular_and_never_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Four kinds that are not regular files: none blocks, each says what it is.
        for (p, words) in [
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/zero"), "character device"),
            (Path::new("/dev/null"), "character device"),
            (dir.path(), "directory"),
        ] {
            let e = super::operator_text(p).unwrap_err().to_string();
            assert!(e.contains(words), "{}: {e}", p.display());
            let e = super::proc_text(p).unwrap_err().to_string();
            assert!(e.contains(words), "{}: {e}", p.display());
        }
        assert!(
            super::proc_text(Path::new("/proc/self/status"))
                .unwrap()
                .contains("Pid:")
        );
    }
}
