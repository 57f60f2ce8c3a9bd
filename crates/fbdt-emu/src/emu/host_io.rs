//! What the emulator asks of the host: real-time scheduling, AF_PACKET sockets found,
//! sized, counted and closed.

use super::*;

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

/// The CPU the emulator thread is pinned to when receive steering is on: the last online one.
pub fn emulator_cpu() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    (2..=64).contains(&n).then(|| n as usize - 1)
}

/// `rps_cpus` mask (hex) of every online CPU but the emulator's, or `None` when there is no
/// other CPU (or more than 64, where the mask format has groups; not needed on this class).
pub fn endpoint_rps_mask() -> Option<String> {
    let emu = emulator_cpu()?;
    Some(format!("{:x}", (1u64 << emu) - 1))
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
