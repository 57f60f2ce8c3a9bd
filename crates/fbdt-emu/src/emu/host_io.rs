//! What the emulator asks of the host: real-time scheduling, AF_PACKET sockets found,
//! sized, counted and closed.

use std::collections::HashSet;

/// File descriptors of this process that are AF_PACKET sockets.
pub(super) fn packet_socket_fds() -> HashSet<i32> {
    let mut v = HashSet::new();
    let Ok(rd) = std::fs::read_dir("/proc/self/fd") else {
        return v;
    };
    for e in rd.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let mut dom: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt on an fd number; fails harmlessly (ENOTSOCK/EBADF) if not a socket.
        let rc = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_DOMAIN,
                &mut dom as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if rc == 0 && dom == libc::AF_PACKET {
            v.insert(fd);
        }
    }
    v
}

/// Puts the calling thread under SCHED_FIFO at `priority` (1–99), so the emulator is not
/// queued behind the endpoints or other work on the host: its packets leave on time as long
/// as it has a core's worth of work or less. The kernel's RT throttling
/// (`kernel.sched_rt_runtime_us`) still leaves 5% of each core to everything else. Failure
/// (no CAP_SYS_NICE, a container without RT budget) is logged and the thread stays normal.
pub(super) fn set_realtime(priority: i32) {
    let p = libc::sched_param {
        sched_priority: priority.clamp(1, 99),
    };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        tracing::warn!(
            "emulator thread stays SCHED_OTHER: sched_setscheduler(SCHED_FIFO, {priority}): {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The CPUs this process may run on (its affinity mask: a container's cpuset, `taskset`), in
/// order; empty if the mask cannot be read. Only CPUs below 64 count (the `rps_cpus` mask
/// format has groups beyond that; not needed on this class of machine).
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is the empty set; sched_getaffinity fills it for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..64).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// The CPU the emulator thread is pinned to when receive steering is on: the last one this
/// process may use, if it may use at least two.
pub fn emulator_cpu() -> Option<usize> {
    let cpus = allowed_cpus();
    (cpus.len() >= 2).then(|| cpus[cpus.len() - 1])
}

/// The CPUs left to the endpoints (and their receive work): every allowed one but the
/// emulator's when it is pinned.
pub fn endpoint_cpus(emulator_pinned: bool) -> Vec<usize> {
    let pinned = emulator_pinned.then(emulator_cpu).flatten();
    allowed_cpus().into_iter().filter(|&c| Some(c) != pinned).collect()
}

/// `rps_cpus` mask (hex) of every allowed CPU but the emulator's, or `None` when there is no
/// other one.
pub fn endpoint_rps_mask() -> Option<String> {
    emulator_cpu()?;
    let mask = endpoint_cpus(true).iter().fold(0u64, |m, &c| m | 1 << c);
    Some(format!("{mask:x}"))
}

/// Pins the calling thread to the emulator's CPU (see [`endpoint_rps_mask`]); logs and
/// stays unpinned on failure.
pub(super) fn pin_to_emulator_cpu() {
    let Some(cpu) = emulator_cpu() else { return };
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays within it (cpu < 64).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        tracing::warn!(
            "emulator thread not pinned to CPU {cpu}: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Default socket buffer of each of the emulator's AF_PACKET sockets, bytes. The kernel default
/// (`net.core.rmem_default`, ~208 KiB) holds ~50 MTU frames (each costs a few KiB of
/// truesize): one TSO burst of the sender, split into frames on the veth, overflowed it and
/// the kernel dropped packets the scenario never asked to drop (0.2–1.7% at 90–150 Mbit/s).
pub const PACKET_SOCKET_BUFFER: i32 = 16 << 20;

/// Sets an AF_PACKET socket's receive and send buffers to `bytes` (the FORCE variants:
/// root may exceed `net.core.rmem_max`).
pub(super) fn grow_socket_buffers(fd: i32, bytes: i32) {
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_SNDBUFFORCE] {
        if let Err(e) = set_int_option(fd, libc::SOL_SOCKET, opt, bytes) {
            tracing::warn!("AF_PACKET socket {fd}: buffer stays at the default: {e}");
        }
    }
}

/// `setsockopt` of an int-valued option.
pub(super) fn set_int_option(fd: i32, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    // SAFETY: setsockopt with a valid int option value; a bad fd or option only fails.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &value as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Counters of the emulator's AF_PACKET sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PacketStats {
    pub received: u64,
    pub dropped: u64,
}

pub(super) fn close_fds(fds: &[i32]) {
    let still = packet_socket_fds();
    for fd in fds {
        if still.contains(fd) {
            // SAFETY: an AF_PACKET socket this emulator opened and nobody uses any more.
            unsafe { libc::close(*fd) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restrict_to(cpus: &[usize]) {
        // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET stays within it (cpu < 64).
        let rc = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    }

    /// A cpuset that leaves out the host's last CPUs: the emulator takes the last CPU the
    /// process may use and the endpoints the others, never one outside the set.
    #[test]
    fn steering_keeps_to_the_cpus_this_process_may_use() {
        let all = allowed_cpus();
        assert!(!all.is_empty());
        // Its own thread: the affinity is per thread and must not leak into other tests.
        std::thread::spawn(move || {
            restrict_to(&all[..1]);
            assert_eq!(emulator_cpu(), None);
            assert_eq!(endpoint_rps_mask(), None);
            assert_eq!(endpoint_cpus(true), &all[..1]);
            if all.len() >= 2 {
                let (a, b) = (all[0], all[1]);
                restrict_to(&[a, b]);
                assert_eq!(emulator_cpu(), Some(b));
                assert_eq!(endpoint_cpus(true), [a]);
                assert_eq!(endpoint_cpus(false), [a, b]);
                assert_eq!(endpoint_rps_mask(), Some(format!("{:x}", 1u64 << a)));
            }
        })
        .join()
        .unwrap();
    }
}
