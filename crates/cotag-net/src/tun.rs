//! A TUN device through the kernel's `/dev/net/tun` ioctl (libc only: the device needs one
//! ioctl and two flags, not a crate's async machinery). Opened in the calling thread's
//! network namespace; the device disappears when the fd is closed.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use fbdt_emu::emu::offload::VNET_HDR_LEN;

/// An IP-level TUN device (no packet-information prefix), non-blocking, with a
/// `virtio_net_hdr` in front of every packet read and written (`IFF_VNET_HDR`), so writes
/// may carry GSO packets ([`crate::gso`]). Until [`Tun::offload_tso`], what the kernel sends
/// arrives whole, checksums complete, behind an all-zero header.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Bytes in front of every packet read or written: the vnet header's.
    pub const HEADER_LEN: usize = VNET_HDR_LEN;

    /// Creates TUN device `name` (at most 15 bytes) in the current thread's namespace.
    pub fn open(name: &str) -> io::Result<Tun> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TUN name `{name}` must be 1..{} bytes", libc::IFNAMSIZ),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/net/tun")?;
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
            *dst = src as libc::c_char;
        }
        req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR) as libc::c_short;
        // SAFETY: TUNSETIFF reads and writes one ifreq, which lives for the call.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Tun {
            file,
            name: name.to_string(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lets the kernel hand this device TCP super-packets and partial checksums
    /// (`TUN_F_CSUM | TUN_F_TSO4`), to be cut with [`crate::gso::split`].
    pub fn offload_tso(&self) -> io::Result<()> {
        let flags = (libc::TUN_F_CSUM | libc::TUN_F_TSO4) as libc::c_ulong;
        // SAFETY: TUNSETOFFLOAD takes the flags by value.
        if unsafe { libc::ioctl(self.file.as_raw_fd(), libc::TUNSETOFFLOAD, flags) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// One IP packet (behind [`Tun::HEADER_LEN`] bytes) into `buf`; `WouldBlock` when none
    /// is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        (&self.file).read(buf)
    }

    /// Hands one IP packet, checksums complete, to the kernel's stack.
    pub fn send(&self, packet: &[u8]) -> io::Result<usize> {
        self.send_with_header(&[0; VNET_HDR_LEN], packet)
    }

    /// Hands one IP packet, or one GSO packet, behind its vnet header to the kernel's stack,
    /// in one `writev`.
    pub fn send_with_header(&self, hdr: &[u8; VNET_HDR_LEN], packet: &[u8]) -> io::Result<usize> {
        (&self.file).write_vectored(&[IoSlice::new(hdr), IoSlice::new(packet)])
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
