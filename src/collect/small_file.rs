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
    buf.clear();
    let mut f = std::fs::File::open(p)?;
    let mut chunk = [0u8; 4096];
    loop {
        let n = f.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX {
            return Err(std::io::Error::other(format!(
                "longer than {} KiB: not a kernel attribute file",
                MAX >> 10
            )));
        }
    }
}

/// Reads `p` as text (invalid UTF-8 replaced).
pub fn text(p: &Path) -> std::io::Result<String> {
    let mut buf = Vec::new();
    read(p, &mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
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
