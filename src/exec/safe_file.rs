//! The one way partop opens a file it writes: the journal and the fleet journal, the node lock,
//! the simulator's state, registry and logs, detached applies' plans, logs and pointers, model
//! logs, models.toml edits, recordings and hosts files. Run as root with a path in a directory
//! someone else can write, a plain `open` would follow a symlink planted there and append to
//! /etc/passwd; so the last component is never followed (`O_NOFOLLOW`), the file must be a
//! regular file with one link (never a FIFO, a device or a hard link to another file), opening
//! never waits (`O_NONBLOCK`), a file partop makes fresh is made with `O_EXCL`, and a whole file
//! is written to a new file beside it and renamed over the old one (a crash leaves the old or
//! the new content, never half). Every refusal names the file, what it is, and the way out.
//! Directories above the file are the operator's choice and are followed.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// Opens `path` for appending (created when missing; `read` too when the caller looks at what
/// is there, as the journal does for a torn last line).
pub fn append(path: &Path, read: bool) -> std::io::Result<std::fs::File> {
    open(
        path,
        std::fs::OpenOptions::new()
            .append(true)
            .read(read)
            .create(true),
    )
}

/// Opens `path` to read and write without truncating it (created when missing): the node lock.
pub fn open_rw(path: &Path, create: bool) -> std::io::Result<std::fs::File> {
    open(
        path,
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create),
    )
}

/// Opens `path` to be written from its start (created when missing, emptied only once it is
/// known to be a regular file of its own): a log partop restarts.
pub fn truncate(path: &Path) -> std::io::Result<std::fs::File> {
    let f = open(path, std::fs::OpenOptions::new().write(true).create(true))?;
    f.set_len(0)?;
    Ok(f)
}

/// Makes `path`, which must not exist yet (`O_EXCL`): a marker or a file partop owns from birth.
pub fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    open(
        path,
        std::fs::OpenOptions::new().write(true).create_new(true),
    )
}

/// Writes `bytes` as the whole content of `path`: to a new file beside it (made with
/// `O_EXCL`), fsynced, then renamed over `path`. An existing `path` that is a symlink, a FIFO,
/// a device or a directory is refused and left as it is; an existing file's permissions are
/// kept.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_whole(path, bytes, true)
}

/// [`write_atomic`] without the fsyncs: for files rewritten many times a second whose loss in
/// a crash costs nothing (the simulated kernel's files, the simulator's state).
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_whole(path, bytes, false)
}

fn write_whole(path: &Path, bytes: &[u8], durable: bool) -> std::io::Result<()> {
    let mode = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => Some(m.permissions().mode() & 0o7777),
        Ok(m) => return Err(refused(path, &not_regular(m.file_type()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(named(path, &e)),
    };
    let tmp = temp_beside(path);
    let written = (|| {
        let mut f = create_new(&tmp)?;
        if let Some(m) = mode {
            f.set_permissions(std::fs::Permissions::from_mode(m))?;
        }
        f.write_all(bytes)?;
        if durable {
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path).map_err(|e| named(path, &e))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    // The rename itself is durable once the directory is.
    if durable
        && let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(dir) = std::fs::File::open(d)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// A fresh name beside `path` for [`write_atomic`]'s new file.
fn temp_beside(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Opens with the options given plus `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`, then keeps the file
/// only if it is a regular file with a single link.
fn open(path: &Path, opts: &mut std::fs::OpenOptions) -> std::io::Result<std::fs::File> {
    let f = opts
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
        .map_err(|e| explain(path, e))?;
    let m = f.metadata().map_err(|e| named(path, &e))?;
    if !m.file_type().is_file() {
        return Err(refused(path, &not_regular(m.file_type())));
    }
    if m.nlink() > 1 {
        return Err(refused(
            path,
            &format!(
                "has {} hard links, so writing it would change another file too",
                m.nlink()
            ),
        ));
    }
    Ok(f)
}

/// An open that failed because of what is at `path` (a symlink: `ELOOP`; a FIFO without a
/// reader: `ENXIO`) says what is there; other errors keep their own words.
fn explain(path: &Path, e: std::io::Error) -> std::io::Error {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => refused(path, &not_regular(m.file_type())),
        _ => named(path, &e),
    }
}

fn not_regular(kind: std::fs::FileType) -> String {
    if kind.is_symlink() {
        "is a symbolic link, and partop never writes through a link it did not make".into()
    } else {
        format!(
            "is {}, not a regular file",
            crate::collect::small_file::kind_words(kind)
        )
    }
}

fn refused(path: &Path, why: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!(
            "{} {why}: nothing was written to it; remove it or choose another path",
            path.display()
        ),
    )
}

fn named(path: &Path, e: &std::io::Error) -> std::io::Error {
    if e.to_string().contains(&path.display().to_string()) {
        return std::io::Error::new(e.kind(), e.to_string());
    }
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way of writing meets every hostile kind of path: 6 writers × 5 kinds = 30 cases,
    /// each refused with the target untouched (a whole-file write over a hard link replaces the
    /// link, never the other file); and each writer works on a plain path.
    #[test]
    fn every_writer_refuses_every_hostile_path_and_leaves_it_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        type Writer = fn(&Path) -> std::io::Result<()>;
        let writers: [(&str, Writer); 6] = [
            ("append", |p| append(p, true)?.write_all(b"x\n")),
            ("open_rw", |p| open_rw(p, true)?.write_all(b"x\n")),
            ("truncate", |p| truncate(p)?.write_all(b"x\n")),
            ("create_new", |p| create_new(p)?.write_all(b"x\n")),
            ("write_atomic", |p| write_atomic(p, b"x\n")),
            ("replace", |p| replace(p, b"x\n")),
        ];
        let mut cases = 0;
        for (wname, w) in writers {
            for kind in ["symlink", "fifo", "hardlink", "dir", "symlink-to-missing"] {
                let p = dir.path().join(format!("{wname}-{kind}"));
                match kind {
                    "symlink" => std::os::unix::fs::symlink(&victim, &p).unwrap(),
                    "symlink-to-missing" => {
                        std::os::unix::fs::symlink(dir.path().join("nowhere"), &p).unwrap();
                    }
                    "fifo" => {
                        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::from_bits_truncate(0o600))
                            .unwrap()
                    }
                    "hardlink" => std::fs::hard_link(&victim, &p).unwrap(),
                    _ => std::fs::create_dir(&p).unwrap(),
                }
                let whole = wname == "write_atomic" || wname == "replace";
                if whole && kind == "hardlink" {
                    // A rename replaces the link itself: the other file keeps its content.
                    w(&p).unwrap();
                } else {
                    let e = w(&p).expect_err(&format!("{wname} on a {kind}"));
                    assert!(
                        e.to_string().contains(&p.display().to_string()),
                        "{wname} on a {kind}: {e}"
                    );
                }
                assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
                assert!(
                    !dir.path().join("nowhere").exists(),
                    "{wname} made a link's target"
                );
                if kind == "hardlink" {
                    std::fs::remove_file(&p).unwrap();
                }
                cases += 1;
            }
        }
        assert_eq!(cases, 30, "6 writers × 5 hostile kinds");
        for (wname, w) in writers {
            let p = dir.path().join(format!("plain-{wname}"));
            w(&p).unwrap();
            assert_eq!(std::fs::read_to_string(&p).unwrap(), "x\n", "{wname}");
        }
        // No new file left behind by a refused atomic write.
        assert!(
            !std::fs::read_dir(dir.path())
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        );
    }

    #[test]
    fn an_atomic_write_keeps_the_mode_of_the_file_it_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("models.toml");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }
}
