//! Who listens on a TCP port, from the kernel (`/proc/net/tcp{,6}` and the sockets in each
//! process's fd table): what the model start/stop protocol asks so that a health check counts
//! only when the server partop started answers it, and a start never doubles a server already
//! on its port. Read on demand (a start, a health success), never per tick.

use super::small_file::proc_text;
use std::path::Path;

/// The socket inodes listening on `port` (IPv4 and IPv6, any address).
fn listening_inodes(proc_root: &Path, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["net/tcp", "net/tcp6"] {
        let Ok(text) = proc_text(&proc_root.join(table)) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            let listening = *state == "0A";
            let on_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening
                && on_port
                && let Ok(i) = inode.parse::<u64>()
                && i != 0
            {
                inodes.push(i);
            }
        }
    }
    inodes
}

/// The pid of a process that listens on `port`, with its process group; None when nobody does
/// (or the listener's fds are hidden from this user).
pub fn listener(proc_root: &Path, port: u16) -> Option<(u32, Option<u32>)> {
    let inodes = listening_inodes(proc_root, port);
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    std::fs::read_dir(proc_root).ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(e.path().join("fd")).ok()?;
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|l| wanted.iter().any(|w| l.as_os_str() == w.as_str()))
        });
        holds.then(|| (pid, group_of(proc_root, pid)))
    })
}

/// The process group of `pid` (`/proc/PID/stat` field 5).
pub fn group_of(proc_root: &Path, pid: u32) -> Option<u32> {
    let stat = proc_text(&proc_root.join(pid.to_string()).join("stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// A live process of process group `pgid` other than its leader (what a launch command that
/// forked its server and exited leaves running).
pub fn group_member(proc_root: &Path, pgid: u32) -> Option<u32> {
    std::fs::read_dir(proc_root).ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        (pid != pgid && group_of(proc_root, pid) == Some(pgid)).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_of_a_port_is_this_process() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let (pid, group) = listener(Path::new("/proc"), port).expect("found");
        assert_eq!(pid, std::process::id());
        assert!(group.is_some());
        drop(l);
        assert_eq!(listener(Path::new("/proc"), port), None);
    }
}
