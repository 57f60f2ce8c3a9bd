//! The few syscalls both sides' loops need: waiting on several fds with a µs timeout, and
//! UDP sockets with buffers large enough for a burst of a cohort.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant as WallClock;

/// Socket buffers: a cohort of 128 full packets plus as many extras is ~400 KB; 4 MiB
/// leaves room for the loop being descheduled for a few ms at a few hundred Mbit/s.
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// Microseconds since a fixed start: the clock handed to the sans-IO core.
#[derive(Debug, Clone, Copy)]
pub struct Clock(WallClock);

impl Clock {
    pub fn starting_at(start: WallClock) -> Clock {
        Clock(start)
    }

    pub fn now_us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }
}

/// Blocks until one of `fds` is readable or `timeout_us` passed (`None`: forever).
pub fn wait_readable(fds: &[RawFd], timeout_us: Option<u64>) -> io::Result<()> {
    let mut polls: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = timeout_us.map(|us| libc::timespec {
        tv_sec: (us / 1_000_000) as libc::time_t,
        tv_nsec: ((us % 1_000_000) * 1_000) as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `polls` and `ts` outlive the call; no signal mask is passed.
    let rc = unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            polls.len() as libc::nfds_t,
            ts_ptr,
            std::ptr::null(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

fn force_buffer(fd: RawFd, option: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads one c_int that lives for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&SOCKET_BUFFER as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A non-blocking UDP socket bound to `local`, connected to `peer` when given. The buffers
/// are forced past `net.core.*mem_max` (root only; the testbed runs as root).
pub fn udp(local: SocketAddr, peer: Option<SocketAddr>) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(local)?;
    if let Some(p) = peer {
        s.connect(p)?;
    }
    s.set_nonblocking(true)?;
    force_buffer(s.as_raw_fd(), libc::SO_RCVBUFFORCE)?;
    force_buffer(s.as_raw_fd(), libc::SO_SNDBUFFORCE)?;
    Ok(s)
}

/// `WouldBlock` and `Interrupted` mean "nothing now"; anything else is an error.
pub fn nothing_now(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted)
}

/// Reads up to `batch` packets with `recv` (a non-blocking read into `buf`) and hands each
/// to `each`; returns early when nothing is queued, so no source starves the others. True
/// when it stopped at `batch`: more may be queued.
pub fn drain(
    buf: &mut [u8],
    batch: usize,
    mut recv: impl FnMut(&mut [u8]) -> io::Result<usize>,
    mut each: impl FnMut(&[u8]),
) -> io::Result<bool> {
    for _ in 0..batch {
        match recv(buf) {
            Ok(n) => each(&buf[..n]),
            Err(e) if nothing_now(&e) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// SCHED_FIFO priority of both ends' loops: the emulator's (fbdt-emu's default, 10). The
/// loops are part of the emulated network: a gateway that wakes a period late discards a
/// cohort unsent, and on a loaded 2-core host an ordinary thread waits milliseconds for a
/// core. Failure (no CAP_SYS_NICE) leaves the thread as it was; the return value says.
pub const LOOP_RT_PRIORITY: i32 = 10;

pub fn make_realtime(priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority.clamp(1, 99),
    };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time the calling thread has used, µs (`CLOCK_THREAD_CPUTIME_ID`; 0 if unreadable):
/// with the loop's wall time, whether the loop had a core to itself or was CPU-bound.
pub fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec that lives for the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000) + ts.tv_nsec as u64 / 1_000
}
