//! Reading a kernel attribute file: open, read to the end, close (no stat, no size hint), and
//! never more than [`MAX`] bytes, so a file that goes on (a character device such as /dev/zero
//! in a hostile or broken tree) is an error naming the file, not a read that fills memory. Used
//! by every sysfs and KFD reader.

use std::io::Read as _;
use std::path::Path;

/// The most a kernel attribute file may hold (`gpu_metrics` v1.8 is 3,872 bytes).
pub const MAX: usize = 1 << 20;

/// Reads `p` into `buf` (cleared first).
pub fn read(p: &Path, buf: &mut Vec<u8>) -> std::io::Result<()> {
    read_upto(p, buf, MAX).map_err(|e| match e {
        Long(n) => std::io::Error::other(format!(
            "longer than {} KiB: not a kernel attribute file",
            n >> 10
        )),
        Io(e) => e,
    })
}

/// Reads `p` as text (invalid UTF-8 replaced).
pub fn text(p: &Path) -> std::io::Result<String> {
    let mut buf = Vec::new();
    read(p, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// The most an operator's file (a recording, a plan, a registry, a hosts list) may hold.
pub const FILE_MAX: usize = 256 << 20;

/// Reads a file the operator named (at most [`FILE_MAX`]): `/dev/zero` or a FIFO that never
/// ends given by mistake is an error naming the limit, not a read that fills memory.
pub fn operator_text(p: &Path) -> std::io::Result<String> {
    let mut buf = Vec::new();
    read_upto(p, &mut buf, FILE_MAX).map_err(|e| match e {
        Long(n) => std::io::Error::other(format!(
            "longer than {} MiB: not a file partop reads (a device or an endless stream?)",
            n >> 20
        )),
        Io(e) => e,
    })?;
    String::from_utf8(buf).map_err(|_| std::io::Error::other("not UTF-8 text"))
}

enum Failure {
    Long(usize),
    Io(std::io::Error),
}
use Failure::{Io, Long};

fn read_upto(p: &Path, buf: &mut Vec<u8>, max: usize) -> Result<(), Failure> {
    buf.clear();
    let mut f = std::fs::File::open(p).map_err(Io)?;
    let mut chunk = [0u8; 4096];
    loop {
        let n = f.read(&mut chunk).map_err(Io)?;
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
    #[test]
    fn an_endless_file_is_an_error_not_a_full_memory() {
        let e = super::text(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("not a kernel attribute file"), "{e}");
        assert!(
            !super::text(std::path::Path::new("/proc/self/comm"))
                .unwrap()
                .is_empty()
        );
    }
}
