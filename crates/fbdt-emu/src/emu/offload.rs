//! GSO units: the endpoints' TCP stacks hand the `direct` datapath whole TSO super-packets
//! (up to 64 KB, one header) instead of MTU packets, and the emulator writes them on whole,
//! so the per-frame cost of the AF_PACKET sockets, the skb and the veth is paid once per
//! unit rather than once per segment (issue 12's "GSO/GRO-sized units").
//!
//! The segmentation travels in the `virtio_net_hdr` the kernel puts in front of every frame
//! of a socket with `PACKET_VNET_HDR` (and reads in front of every frame written to it). The
//! link model keeps its per-packet meaning: a unit is as many packets as segments for the
//! drop-tail queue and the lateness probe, its wire size counts every segment's headers, and
//! loss is drawn per segment — a unit that loses any is cut into its segments in user space
//! (`segment_ipv4_tcp`) and only the survivors are written. What changes is the granularity
//! of time: a unit leaves the link when its last byte has, so its first segment arrives up to
//! one unit's serialisation later than per-packet emulation would deliver it. The testbed
//! bounds that by the endpoints' `gso_max_size` (a unit's airtime at the path's peak rate);
//! docs/testbed.md measures what it buys and costs.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{Error, Result};

/// `struct virtio_net_hdr` (linux/virtio_net.h), the 10-byte legacy header: packet sockets
/// use it in the host's byte order (`vio_le()` is the host's endianness without vhost).
pub const VNET_HDR_LEN: usize = 10;
/// `PACKET_VNET_HDR` (linux/if_packet.h).
pub(crate) const PACKET_VNET_HDR: libc::c_int = 15;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum from `csum_start` is still to be completed.
pub const F_NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
/// `VIRTIO_NET_HDR_GSO_TCPV4`.
pub const GSO_TCPV4: u8 = 1;
/// `VIRTIO_NET_HDR_GSO_ECN`: set with the TCP type when the flow uses ECN.
pub const GSO_ECN: u8 = 0x80;

const ETH: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
pub const IPPROTO_TCP: u8 = 6;
/// TCP flags that belong to one segment of a unit only (Linux `tcp_gso_segment`): FIN and
/// PSH to the last, CWR to the first.
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHdr {
    pub fn read(b: &[u8]) -> Self {
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        }
    }

    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        for (i, v) in [self.hdr_len, self.gso_size, self.csum_start, self.csum_offset]
            .into_iter()
            .enumerate()
        {
            b[2 + 2 * i..4 + 2 * i].copy_from_slice(&v.to_ne_bytes());
        }
    }

    fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE && self.gso_size > 0
    }
}

/// What the link model needs to know of a frame read with its `virtio_net_hdr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unit {
    /// Packets it stands for on the wire (1 for a plain frame).
    pub segments: u32,
    /// IP bytes on the wire: every segment's IP and TCP headers plus the payload.
    pub wire_l3: u64,
}

/// IPv4 and TCP header lengths of an Ethernet frame carrying TCP over IPv4.
fn ipv4_tcp_headers(eth: &[u8]) -> Option<(usize, usize)> {
    if eth.len() < ETH + 20 || u16::from_be_bytes([eth[12], eth[13]]) != ETHERTYPE_IPV4 {
        return None;
    }
    let ihl = usize::from(eth[ETH] & 0x0f) * 4;
    if eth[ETH] >> 4 != 4 || ihl < 20 || eth[ETH + 9] != IPPROTO_TCP || eth.len() < ETH + ihl + 20 {
        return None;
    }
    let thl = usize::from(eth[ETH + ihl + 12] >> 4) * 4;
    (thl >= 20 && eth.len() >= ETH + ihl + thl).then_some((ihl, thl))
}

/// Sizes a frame for the link model. A GSO unit of a kind this module cannot take apart
/// (not TCP over IPv4: the testbed has IPv6 off) counts as one packet of its size.
pub(crate) fn unit(hdr: &VnetHdr, eth: &[u8]) -> Unit {
    let l3 = eth.len().saturating_sub(ETH) as u64;
    let plain = Unit {
        segments: 1,
        wire_l3: l3,
    };
    if !hdr.is_gso() {
        return plain;
    }
    let Some((ihl, thl)) = ipv4_tcp_headers(eth) else {
        return plain;
    };
    let payload = eth.len() - ETH - ihl - thl;
    let segments = payload.div_ceil(usize::from(hdr.gso_size)).max(1) as u32;
    Unit {
        segments,
        wire_l3: payload as u64 + u64::from(segments) * (ihl + thl) as u64,
    }
}

/// Whether [`segment_ipv4_tcp`] can cut this unit.
pub(crate) fn can_segment(hdr: &VnetHdr, eth: &[u8]) -> bool {
    hdr.is_gso() && hdr.gso_type & !GSO_ECN == GSO_TCPV4 && ipv4_tcp_headers(eth).is_some()
}

/// One's-complement sum of big-endian 16-bit words (an odd last byte padded with zero).
pub fn ones_sum(mut acc: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for w in &mut chunks {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    acc
}

/// Folds a one's-complement sum to 16 bits (not complemented).
pub fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// Cuts a TCP/IPv4 GSO unit (`vnet` header, then the Ethernet frame) into its MTU segments as
/// the kernel's `tcp_gso_segment`/`inet_gso_segment` would — sequence numbers advanced,
/// IP length, id and header checksum per segment, FIN/PSH on the last and CWR on the first —
/// and calls `emit` with each segment `keep` says to keep, as a plain frame (with its own
/// `virtio_net_hdr`: no GSO, checksum still to be completed by the kernel, the TCP checksum
/// field holding the pseudo-header sum as for any `CHECKSUM_PARTIAL` packet).
/// Call only when [`can_segment`] holds.
pub(crate) fn segment_ipv4_tcp(
    hdr: &VnetHdr,
    eth: &[u8],
    mut keep: impl FnMut(u32) -> bool,
    mut emit: impl FnMut(&[u8]),
) {
    let Some((ihl, thl)) = ipv4_tcp_headers(eth) else {
        return;
    };
    let heads = ETH + ihl + thl;
    let payload = &eth[heads..];
    let mss = usize::from(hdr.gso_size.max(1));
    let n = payload.len().div_ceil(mss).max(1);
    let seq0 = u32::from_be_bytes(eth[ETH + ihl + 4..ETH + ihl + 8].try_into().expect("4 bytes"));
    let id0 = u16::from_be_bytes([eth[ETH + 4], eth[ETH + 5]]);
    let flags0 = eth[ETH + ihl + 13];
    let seg_hdr = VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_NONE,
        hdr_len: heads as u16,
        gso_size: 0,
        csum_start: (ETH + ihl) as u16,
        csum_offset: 16,
    };
    let mut out = vec![0u8; VNET_HDR_LEN + heads + mss];
    for i in 0..n {
        if !keep(i as u32) {
            continue;
        }
        let part = &payload[i * mss..((i + 1) * mss).min(payload.len())];
        let len = VNET_HDR_LEN + heads + part.len();
        let f = &mut out[..len];
        seg_hdr.write(f);
        let e = &mut f[VNET_HDR_LEN..];
        e[..heads].copy_from_slice(&eth[..heads]);
        e[heads..].copy_from_slice(part);
        rewrite_segment(&mut e[ETH..], ihl, i, n, id0, seq0.wrapping_add((i * mss) as u32), flags0);
        emit(f);
    }
}

/// Turns a copy of a GSO unit's IP and TCP headers, followed by segment `i`'s payload (of
/// `n`), into that segment's headers as the kernel's `tcp_gso_segment`/`inet_gso_segment`
/// write them: IP length, id (`id0 + i`) and header checksum; sequence number `seq`; FIN and
/// PSH kept on the last segment only, CWR on the first only; the TCP checksum field holding
/// the pseudo-header sum, as for any `CHECKSUM_PARTIAL` packet (complete it with
/// `!fold(ones_sum(0, tcp))`). `ip` starts at the IP header and ends with the payload.
pub fn rewrite_segment(ip: &mut [u8], ihl: usize, i: usize, n: usize, id0: u16, seq: u32, flags0: u8) {
    let len = ip.len();
    let (iph, tcp) = ip.split_at_mut(ihl);
    iph[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    iph[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
    iph[10..12].copy_from_slice(&[0, 0]);
    let c = !fold(ones_sum(0, iph));
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    let mut flags = flags0;
    if i + 1 < n {
        flags &= !(TCP_FIN | TCP_PSH);
    }
    if i > 0 {
        flags &= !TCP_CWR;
    }
    tcp[13] = flags;
    let pseudo = ones_sum(0, &iph[12..20]) + u32::from(IPPROTO_TCP) + tcp.len() as u32;
    tcp[16..18].copy_from_slice(&fold(pseudo).to_be_bytes());
}

/// `SIOCETHTOOL` and the legacy feature commands (linux/ethtool.h, linux/sockios.h).
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_SSG: u32 = 0x19;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 16],
}

/// Turns on transmit checksum offload, scatter-gather, TSO and GSO of interface `dev` in the
/// calling thread's namespace (rattan-env turns them off when it makes the veths): in that
/// order, as the kernel drops TSO from a device without the other two.
pub(crate) fn enable_segmentation_offload(dev: &str) -> Result<()> {
    // SAFETY: socket() with constant arguments; owned right after.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(Error::Emulator(format!(
            "socket for ethtool: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: raw is a fresh fd owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    if dev.len() >= libc::IFNAMSIZ {
        return Err(Error::Emulator(format!("interface name too long: {dev}")));
    }
    for (cmd, what) in [
        (ETHTOOL_STXCSUM, "tx checksum"),
        (ETHTOOL_SSG, "scatter-gather"),
        (ETHTOOL_STSO, "TSO"),
        (ETHTOOL_SGSO, "GSO"),
    ] {
        let mut value = EthtoolValue { cmd, data: 1 };
        let mut ifr = IfreqData {
            name: [0; libc::IFNAMSIZ],
            data: &mut value as *mut EthtoolValue as *mut libc::c_void,
            _pad: [0; 16],
        };
        for (d, s) in ifr.name.iter_mut().zip(dev.bytes()) {
            *d = s as libc::c_char;
        }
        // SAFETY: SIOCETHTOOL with an ifreq naming the device and pointing at a live
        // ethtool_value; the kernel reads and writes only those.
        let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut ifr) };
        if rc != 0 {
            return Err(Error::Emulator(format!(
                "ethtool: enabling {what} on {dev}: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// Room TCP keeps below `gso_max_size` for headers when it sizes a unit (Linux
/// `tcp_xmit_size_goal`: `gso_max_size - 1 - MAX_TCP_HEADER`, and `MAX_TCP_HEADER` is
/// `L1_CACHE_ALIGN(128 + MAX_HEADER)`, 320 on x86-64).
const TCP_SIZE_GOAL_MARGIN: u32 = 1 + 320;

/// The endpoints' `gso_max_size` for a path: a unit's payload at most `airtime` long at the
/// path's peak rate, so the time grain is bounded — where that is less than two segments
/// TCP sends single segments (per-packet emulation, whose cost is no problem at such rates)
/// — and at most 64 KB (the veth's default ceiling).
pub(crate) fn gso_max_size(peak_mbps: f64, airtime: std::time::Duration, mtu: u32) -> u32 {
    let payload = (peak_mbps * 1e6 / 8.0 * airtime.as_secs_f64()) as u32;
    payload.saturating_add(TCP_SIZE_GOAL_MARGIN).clamp(mtu, 65_536)
}

/// A TCP/IPv4 frame (10.0.0.1 → 10.0.0.2, 12 bytes of TCP options) with `payload` bytes,
/// sequence `seq` and `flags` (checksum fields zero: segments get their own).
#[cfg(test)]
pub(crate) fn tcp_frame(payload: usize, seq: u32, flags: u8) -> Vec<u8> {
    let mut f = vec![0u8; ETH + 20 + 32 + payload];
    f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = &mut f[ETH..ETH + 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 32 + payload) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&0xfffeu16.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 64;
    ip[9] = IPPROTO_TCP;
    ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let tcp = &mut f[ETH + 20..ETH + 52];
    tcp[0..2].copy_from_slice(&5201u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&40000u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[12] = 8 << 4;
    tcp[13] = flags;
    for (i, b) in f[ETH + 52..].iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    f
}

/// The `virtio_net_hdr` of a TCP/IPv4 GSO unit of [`tcp_frame`]'s shape cut at `mss`.
#[cfg(test)]
pub(crate) fn gso(mss: u16) -> VnetHdr {
    VnetHdr {
        flags: F_NEEDS_CSUM,
        gso_type: GSO_TCPV4,
        hdr_len: (ETH + 52) as u16,
        gso_size: mss,
        csum_start: (ETH + 20) as u16,
        csum_offset: 16,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel does with a `CHECKSUM_PARTIAL` packet: sums from `csum_start` to the
    /// end (the field holds the pseudo-header sum) and stores the complement.
    fn complete(f: &mut [u8], h: &VnetHdr) {
        let start = usize::from(h.csum_start);
        let at = start + usize::from(h.csum_offset);
        let c = !fold(ones_sum(0, &f[start..]));
        f[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }

    /// A receiver's check, written from RFC 793/1071: the pseudo-header and the segment
    /// with its checksum sum to 0xffff.
    fn tcp_checksum_ok(f: &[u8]) -> bool {
        let ip = &f[ETH..ETH + 20];
        let tcp = &f[ETH + 20..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&ip[12..20]);
        pseudo.extend_from_slice(&[0, IPPROTO_TCP]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        fold(ones_sum(ones_sum(0, &pseudo), tcp)) == 0xffff
    }

    fn ip_checksum_ok(f: &[u8]) -> bool {
        fold(ones_sum(0, &f[ETH..ETH + 20])) == 0xffff
    }

    #[test]
    fn the_header_round_trips() {
        let h = gso(1448);
        let mut b = [0u8; VNET_HDR_LEN];
        h.write(&mut b);
        assert_eq!(VnetHdr::read(&b), h);
    }

    #[test]
    fn a_unit_counts_every_segment_and_its_headers() {
        let f = tcp_frame(3 * 1448 + 100, 1, 0x18);
        let u = unit(&gso(1448), &f);
        assert_eq!(u.segments, 4);
        assert_eq!(u.wire_l3, (3 * 1448 + 100 + 4 * 52) as u64);
        // A plain frame and a unit of a kind we cannot cut are one packet of their size.
        assert_eq!(unit(&VnetHdr::default(), &f).segments, 1);
        let mut v6 = f.clone();
        v6[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(
            unit(&gso(1448), &v6),
            Unit {
                segments: 1,
                wire_l3: (f.len() - ETH) as u64
            }
        );
        assert!(!can_segment(&gso(1448), &v6));
    }

    #[test]
    fn segments_are_the_units_bytes_with_valid_headers_and_checksums() {
        let (mss, payload, seq) = (1448usize, 5 * 1448 + 333, 0xffff_f000u32);
        let unit_frame = tcp_frame(payload, seq, TCP_FIN | TCP_PSH | TCP_CWR | 0x10);
        let mut got: Vec<(VnetHdr, Vec<u8>)> = Vec::new();
        segment_ipv4_tcp(
            &gso(mss as u16),
            &unit_frame,
            |i| i != 2,
            |f| got.push((VnetHdr::read(f), f[VNET_HDR_LEN..].to_vec())),
        );
        assert_eq!(got.len(), 5, "six segments, the third dropped");
        let kept = [0usize, 1, 3, 4, 5];
        for (k, (h, mut f)) in kept.iter().zip(got) {
            assert_eq!(h.gso_type, GSO_NONE);
            assert_eq!(h.flags, F_NEEDS_CSUM);
            let part = &unit_frame[ETH + 52 + k * mss..(ETH + 52 + (k + 1) * mss).min(unit_frame.len())];
            assert_eq!(&f[ETH + 52..], part, "segment {k}'s payload");
            assert_eq!(&f[..ETH], &unit_frame[..ETH]);
            let ip_len = u16::from_be_bytes([f[ETH + 2], f[ETH + 3]]) as usize;
            assert_eq!(ip_len, f.len() - ETH);
            assert_eq!(
                u16::from_be_bytes([f[ETH + 4], f[ETH + 5]]),
                0xfffeu16.wrapping_add(*k as u16)
            );
            assert!(ip_checksum_ok(&f), "segment {k}'s IP checksum");
            let s = u32::from_be_bytes(f[ETH + 24..ETH + 28].try_into().unwrap());
            assert_eq!(s, seq.wrapping_add((k * mss) as u32), "sequence wraps like TCP's");
            let flags = f[ETH + 33];
            assert_eq!(flags & (TCP_FIN | TCP_PSH) != 0, *k == 5, "FIN/PSH only on the last");
            assert_eq!(flags & TCP_CWR != 0, *k == 0, "CWR only on the first");
            assert_eq!(flags & 0x10, 0x10, "ACK on every segment");
            complete(&mut f, &h);
            assert!(
                tcp_checksum_ok(&f),
                "segment {k}'s TCP checksum once the kernel completes it"
            );
        }
    }

    #[test]
    fn unit_size_follows_the_airtime_within_its_bounds() {
        let us = std::time::Duration::from_micros;
        // 2 Gbit/s for 100 µs: 25 000 payload bytes (17 segments of 1448).
        assert_eq!(gso_max_size(2000.0, us(100), 1500), 25_000 + TCP_SIZE_GOAL_MARGIN);
        // 100 Mbit/s for 100 µs is 1250 bytes, less than a segment: TCP sends single ones.
        assert_eq!(gso_max_size(100.0, us(100), 1500), 1250 + TCP_SIZE_GOAL_MARGIN);
        assert_eq!(gso_max_size(1.0, us(100), 1500), 1500, "never below the MTU");
        assert_eq!(gso_max_size(10_000.0, us(250), 1500), 65_536, "the veth's ceiling");
    }
}
