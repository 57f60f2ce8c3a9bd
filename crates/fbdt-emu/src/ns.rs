//! Network-namespace plumbing: run code on a thread that entered a namespace, run `ip`,
//! read per-interface counters, find and kill the processes inside a namespace.

use std::{
    fs::File,
    os::fd::AsRawFd,
    path::Path,
    process::{Command, Stdio},
};

use crate::error::{Error, Result};

/// Common prefix of every namespace this crate creates: `fbdt-<pid>-<n>-{cli,emu,srv}`.
pub const NS_PREFIX: &str = "fbdt-";

/// Where named namespaces live (`ip netns` convention).
pub const NETNS_DIR: &str = "/var/run/netns";

/// Moves the calling thread into the named network namespace (setns). Only call this on a
/// thread you own: the thread stays in that namespace until it exits.
pub fn enter(ns: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(ns);
    let f = File::open(&path).map_err(|e| Error::Netns {
        namespace: ns.to_string(),
        op: "open",
        detail: e.to_string(),
    })?;
    // SAFETY: plain syscall on a valid, open fd.
    let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        return Err(Error::Netns {
            namespace: ns.to_string(),
            op: "setns",
            detail: std::io::Error::last_os_error().to_string(),
        });
    }
    Ok(())
}

/// Runs `f` on a fresh thread inside namespace `ns` and returns its result. The closure may
/// borrow (scoped thread). A panic inside `f` is re-raised on the caller's thread, so the
/// caller's guards (e.g. a [`crate::Testbed`]) unwind and clean up.
pub fn run_in<R: Send>(ns: &str, f: impl FnOnce() -> R + Send) -> Result<R> {
    std::thread::scope(|s| {
        let h = std::thread::Builder::new()
            .name(format!("ns:{ns}"))
            .spawn_scoped(s, move || -> Result<R> {
                enter(ns)?;
                Ok(f())
            })
            .map_err(|source| Error::Thread {
                name: format!("ns:{ns}"),
                source,
            })?;
        match h.join() {
            Ok(r) => r,
            Err(p) => std::panic::resume_unwind(p),
        }
    })
}

/// Runs a command and fails with its stderr when it exits non-zero.
pub fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| Error::Command {
        command: format!("{cmd:?}"),
        status: format!("did not start: {e}"),
        stderr: String::new(),
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            command: format!("{cmd:?}"),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip [-n ns] args…`
pub fn ip(ns: Option<&str>, args: &[&str]) -> Result<String> {
    let mut c = Command::new("ip");
    if let Some(ns) = ns {
        c.args(["-n", ns]);
    }
    c.args(args);
    run(&mut c)
}

/// Sets the RPS CPU mask of `dev`'s receive queue in namespace `ns`, so frames written to its
/// peer are processed on those CPUs, not by the writer. Through `ip netns exec`, which
/// mounts the namespace's own sysfs (the caller's shows the caller's devices).
pub fn steer_receive(ns: &str, dev: &str, mask: &str) -> Result<()> {
    let file = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
    run(Command::new("ip").args(["netns", "exec", ns, "sh", "-c", &format!("echo {mask} > {file}")]))?;
    Ok(())
}

/// Writes a sysctl of the namespace `ns` (net.* sysctls are per namespace).
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let value = value.to_string();
    run_in(ns, move || {
        std::fs::write(&path, value.as_bytes()).map_err(Error::file(&path))
    })?
}

/// Reads a sysctl of the namespace `ns`.
pub fn sysctl_get(ns: &str, key: &str) -> Result<String> {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    run_in(ns, move || {
        std::fs::read_to_string(&path)
            .map(|s| s.trim().to_string())
            .map_err(Error::file(&path))
    })?
}

/// Interface counters as the kernel reports them (/proc/net/dev).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct IfCounters {
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_dropped: u64,
}

/// Counters of every interface in namespace `ns`, by interface name.
pub fn if_counters(ns: &str) -> Result<Vec<(String, IfCounters)>> {
    let text = run_in(ns, || std::fs::read_to_string("/proc/thread-self/net/dev"))?
        .map_err(Error::file(format!("/proc/net/dev in {ns}")))?;
    Ok(parse_proc_net_dev(&text))
}

/// TCP segments the kernel of namespace `ns` has retransmitted since it was created
/// (`Tcp: RetransSegs` of /proc/net/snmp): every TCP connection of the namespace, so MPTCP
/// subflows and FBDT's per-path connections count alike.
pub fn tcp_retransmitted_segments(ns: &str) -> Result<u64> {
    let text = run_in(ns, || std::fs::read_to_string("/proc/thread-self/net/snmp"))?
        .map_err(Error::file(format!("/proc/net/snmp in {ns}")))?;
    snmp_value(&text, "Tcp", "RetransSegs")
        .ok_or_else(|| Error::Emulator(format!("no Tcp RetransSegs in /proc/net/snmp of {ns}")))
}

/// A counter of /proc/net/snmp: a `Proto: names…` line followed by `Proto: values…`.
pub(crate) fn snmp_value(text: &str, proto: &str, name: &str) -> Option<u64> {
    let prefix = format!("{proto}:");
    let mut lines = text.lines().filter(|l| l.starts_with(&prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let col = names.split_whitespace().position(|n| n == name)?;
    values.split_whitespace().nth(col)?.parse().ok()
}

pub(crate) fn parse_proc_net_dev(text: &str) -> Vec<(String, IfCounters)> {
    let mut v = Vec::new();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let f: Vec<u64> = rest.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        if f.len() < 16 {
            continue;
        }
        v.push((
            name.trim().to_string(),
            IfCounters {
                rx_bytes: f[0],
                rx_packets: f[1],
                rx_dropped: f[3],
                tx_bytes: f[8],
                tx_packets: f[9],
                tx_dropped: f[11],
            },
        ));
    }
    v
}

/// Names of the namespaces in [`NETNS_DIR`] that start with `prefix`.
pub fn list_namespaces(prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(NETNS_DIR)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Whether a namespace of that name exists.
pub fn exists(ns: &str) -> bool {
    Path::new(NETNS_DIR).join(ns).exists()
}

/// Pids of the processes whose network namespace is `ns` (what `ip netns pids` prints).
pub fn pids(ns: &str) -> Vec<i32> {
    ip(None, &["netns", "pids", ns])
        .map(|s| s.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// Kills (SIGKILL) every process in `ns` except ourselves, then deletes the namespace.
/// Errors are ignored: this runs on cleanup paths. Returns whether something was removed.
pub fn destroy(ns: &str) -> bool {
    let me = std::process::id() as i32;
    for pid in pids(ns) {
        if pid != me {
            // SAFETY: kill(2) with a pid read from the kernel; worst case ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    if !exists(ns) {
        return false;
    }
    if ip(None, &["netns", "del", ns]).is_err() || exists(ns) {
        // `ip netns del` refuses when the mount is busy in odd ways, and one unmount leaves
        // a mount point that was mounted more than once: detach until nothing is mounted
        // there, then unlink.
        let p = Path::new(NETNS_DIR).join(ns);
        if let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) {
            // SAFETY: valid C string; umount2 fails (EINVAL) once nothing is mounted there.
            for _ in 0..8 {
                if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
                    break;
                }
            }
        }
        if let Err(e) = std::fs::remove_file(&p) {
            if exists(ns) {
                // Said, never panicking: this runs while a testbed is dropped, and stderr
                // may be gone.
                use std::io::Write as _;
                let line = format!("fbdt-emu: namespace {ns} could not be removed: {e}\n");
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
        }
    }
    true
}

/// Whether this process may create namespaces and configure links (root or CAP_NET_ADMIN +
/// CAP_SYS_ADMIN). [`Error::NotPrivileged`] says why when it may not.
pub fn privileged() -> Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 12;
    const CAP_SYS_ADMIN: u64 = 21;
    if cap_eff & (1 << CAP_NET_ADMIN) == 0 || cap_eff & (1 << CAP_SYS_ADMIN) == 0 {
        return Err(Error::NotPrivileged {
            reason: "needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces".into(),
        });
    }
    if Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_err()
    {
        return Err(Error::NotPrivileged {
            reason: "needs the `ip` tool (Debian package iproute2)".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_counter_of_proc_net_snmp() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm ActiveOpens RetransSegs InErrs\nTcp: 1 12 345 0\n\
                    Udp: InDatagrams\nUdp: 7\n";
        assert_eq!(snmp_value(text, "Tcp", "RetransSegs"), Some(345));
        assert_eq!(snmp_value(text, "Udp", "InDatagrams"), Some(7));
        assert_eq!(snmp_value(text, "Tcp", "Nope"), None);
        assert_eq!(snmp_value("", "Tcp", "RetransSegs"), None);
    }

    #[test]
    fn parses_proc_net_dev() {
        let t = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n  wifi: 1000 10 0 2 0 0 0 0 2000 20 0 3 0 0 0 0\n";
        let v = parse_proc_net_dev(t);
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].0, "wifi");
        assert_eq!(
            v[1].1,
            IfCounters {
                rx_bytes: 1000,
                rx_packets: 10,
                rx_dropped: 2,
                tx_bytes: 2000,
                tx_packets: 20,
                tx_dropped: 3
            }
        );
    }
}
