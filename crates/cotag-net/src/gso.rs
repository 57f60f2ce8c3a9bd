//! Segmentation offloads at the two TUN devices, as a NIC would do them around a real
//! gateway and device.
//!
//! * **Server: TSO** ([`split`]). The server's TUN device takes TCP's super-packets (up to
//!   64 KiB behind one header, `TUN_F_TSO4`) and partial checksums (`TUN_F_CSUM`); the loop
//!   cuts them into the MTU segments TCP would have sent, checksums complete, before the
//!   gateway (or dual-rr) sees them — one read and one pass of the server kernel's transmit
//!   path per super-packet instead of per segment.
//! * **Client: GRO** ([`Coalescer`]). Runs of in-order TCP/IPv4 segments of one flow,
//!   delivered back to back, are written as one GSO packet (`GSO_TCPV4`), as GRO would have
//!   merged them below a real device: received once and acknowledged like a GRO packet.
//!
//! Why: written and read one by one, every packet ran the kernel's receive or transmit path
//! inside a loop's system call and drew its own ACK — at scale 0.9 the ends used all the CPU
//! the emulator left and the server loop's turns grew long enough for the APs to flush
//! cohorts (issue 44, docs/cotag.md "Round 4").
//!
//! The merge is GRO's, strict: same addresses, ports, IP header bytes (but length, id and
//! checksum), acknowledgement, window and TCP options; flags ACK only (PSH may end a run);
//! each segment starts where the previous one ended; all but the last carry exactly the
//! first one's payload length (the `gso_size`). Anything else is written as it came.

use fbdt_emu::emu::offload::{
    fold, ones_sum, rewrite_segment, VnetHdr, F_NEEDS_CSUM, GSO_ECN, GSO_TCPV4, IPPROTO_TCP, VNET_HDR_LEN,
};

const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;
/// IPv4's total-length field bounds a merged packet.
const MAX_IP_LEN: usize = 65_535;
/// Segments per merged packet at most (`MAX_SKB_FRAGS`-sized, as GRO's limit).
const MAX_SEGMENTS: u32 = 44;

/// The vnet header of a packet written as it came: nothing to complete, no GSO.
pub const PLAIN: [u8; VNET_HDR_LEN] = [0; VNET_HDR_LEN];

/// Header lengths of a TCP/IPv4 data segment that may join a run, `None` for anything else.
fn mergeable(p: &[u8]) -> Option<(usize, usize)> {
    let (ihl, thl) = tcp_ipv4(p)?;
    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
    // Fragments (MF or an offset) never merge.
    let fragment = u16::from_be_bytes([p[6], p[7]]) & 0x3fff != 0;
    let flags = p[ihl + 13];
    (total == p.len() && !fragment && p.len() > ihl + thl && flags & !TCP_PSH == TCP_ACK).then_some((ihl, thl))
}

fn seq_of(p: &[u8], ihl: usize) -> u32 {
    u32::from_be_bytes(p[ihl + 4..ihl + 8].try_into().expect("4 bytes"))
}

/// Joins consecutive segments; [`Coalescer::push`] and [`Coalescer::flush`] hand each packet
/// to write as (vnet header, IP packet).
#[derive(Debug, Default)]
pub struct Coalescer {
    /// The run so far: the first segment's headers and every segment's payload.
    unit: Vec<u8>,
    ihl: usize,
    thl: usize,
    mss: usize,
    segments: u32,
    next_seq: u32,
    /// The last segment was short or pushed: nothing may follow it.
    closed: bool,
    /// Packets written that stood for more than one segment, and the segments they carried.
    pub merged_writes: u64,
    pub merged_segments: u64,
}

impl Coalescer {
    /// Adds `packet` to the run, or writes the run and starts another.
    pub fn push(&mut self, packet: &[u8], write: &mut impl FnMut(&[u8; VNET_HDR_LEN], &[u8])) {
        if self.joins(packet) {
            let data = &packet[self.ihl + self.thl..];
            self.unit.extend_from_slice(data);
            self.segments += 1;
            self.next_seq = self.next_seq.wrapping_add(data.len() as u32);
            let pushed = packet[self.ihl + 13] & TCP_PSH != 0;
            if pushed {
                self.unit[self.ihl + 13] |= TCP_PSH;
            }
            self.closed = pushed || data.len() < self.mss;
            return;
        }
        self.flush(write);
        match mergeable(packet) {
            Some((ihl, thl)) => {
                self.unit.extend_from_slice(packet);
                self.ihl = ihl;
                self.thl = thl;
                self.mss = packet.len() - ihl - thl;
                self.segments = 1;
                self.next_seq = seq_of(packet, ihl).wrapping_add(self.mss as u32);
                self.closed = packet[ihl + 13] & TCP_PSH != 0;
            }
            None => write(&PLAIN, packet),
        }
    }

    fn joins(&self, p: &[u8]) -> bool {
        if self.segments == 0 || self.closed || self.segments >= MAX_SEGMENTS {
            return false;
        }
        let (ihl, thl) = (self.ihl, self.thl);
        let Some((pihl, pthl)) = mergeable(p) else {
            return false;
        };
        let u = &self.unit;
        let data = p.len() - ihl - thl;
        pihl == ihl
            && pthl == thl
            && data <= self.mss
            && u.len() + data <= MAX_IP_LEN
            && seq_of(p, ihl) == self.next_seq
            // IP: version, header length, TOS; flags and fragment offset, TTL, protocol;
            // addresses; options.
            && p[..2] == u[..2]
            && p[6..10] == u[6..10]
            && p[12..ihl] == u[12..ihl]
            // TCP: ports; acknowledgement, data offset; window and urgent pointer; options.
            && p[ihl..ihl + 4] == u[ihl..ihl + 4]
            && p[ihl + 8..ihl + 13] == u[ihl + 8..ihl + 13]
            && p[ihl + 14..ihl + 16] == u[ihl + 14..ihl + 16]
            && p[ihl + 18..ihl + thl] == u[ihl + 18..ihl + thl]
    }

    /// Writes the run, if any.
    pub fn flush(&mut self, write: &mut impl FnMut(&[u8; VNET_HDR_LEN], &[u8])) {
        match self.segments {
            0 => {}
            // One segment: as it came, its checksums intact.
            1 => write(&PLAIN, &self.unit),
            n => {
                let (ihl, thl) = (self.ihl, self.thl);
                let u = &mut self.unit;
                let total = u.len();
                u[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                u[10..12].copy_from_slice(&[0, 0]);
                let c = !fold(ones_sum(0, &u[..ihl]));
                u[10..12].copy_from_slice(&c.to_be_bytes());
                // CHECKSUM_PARTIAL: the field holds the pseudo-header sum, the rest is the
                // kernel's (a locally received GSO packet is trusted, as a GRO one is).
                let tcp_len = (total - ihl) as u32;
                let pseudo = ones_sum(0, &u[12..20]) + u32::from(IPPROTO_TCP) + tcp_len;
                u[ihl + 16..ihl + 18].copy_from_slice(&fold(pseudo).to_be_bytes());
                let mut hdr = [0u8; VNET_HDR_LEN];
                VnetHdr {
                    flags: F_NEEDS_CSUM,
                    gso_type: GSO_TCPV4,
                    hdr_len: (ihl + thl) as u16,
                    gso_size: self.mss as u16,
                    csum_start: ihl as u16,
                    csum_offset: 16,
                }
                .write(&mut hdr);
                write(&hdr, u);
                self.merged_writes += 1;
                self.merged_segments += u64::from(n);
            }
        }
        self.unit.clear();
        self.segments = 0;
        self.closed = false;
    }
}

/// TCP/IPv4 header lengths of `p`, `None` if it is not TCP over IPv4 with room for both.
fn tcp_ipv4(p: &[u8]) -> Option<(usize, usize)> {
    if p.len() < 40 || p[0] >> 4 != 4 || p[9] != IPPROTO_TCP {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let thl = usize::from(*p.get(ihl + 12)? >> 4) * 4;
    (ihl >= 20 && thl >= 20 && p.len() >= ihl + thl).then_some((ihl, thl))
}

/// Hands each IP packet of `read` — one read from a TUN device with vnet headers and TSO on
/// (the header, then the packet) — to `each`: a TCP super-packet cut into its segments as
/// the kernel's `tcp_gso_segment` would (sequence numbers advanced, IP length, id and
/// checksum per segment, FIN and PSH on the last, CWR on the first), a packet with a partial
/// checksum completed, anything else as it came. `scratch` is reused between calls. Returns
/// the packets handed over; a read too short for its header hands none.
pub fn split(read: &[u8], scratch: &mut Vec<u8>, mut each: impl FnMut(&[u8])) -> usize {
    let Some((h, packet)) = (read.len() > VNET_HDR_LEN).then(|| read.split_at(VNET_HDR_LEN)) else {
        return 0;
    };
    let hdr = VnetHdr::read(h);
    let gso_tcp = hdr.gso_type & !GSO_ECN == GSO_TCPV4 && hdr.gso_size > 0;
    match tcp_ipv4(packet) {
        Some((ihl, thl)) if gso_tcp => {
            let heads = ihl + thl;
            let payload = &packet[heads..];
            let mss = usize::from(hdr.gso_size);
            let n = payload.len().div_ceil(mss).max(1);
            let seq0 = u32::from_be_bytes(packet[ihl + 4..ihl + 8].try_into().expect("4 bytes"));
            let id0 = u16::from_be_bytes([packet[4], packet[5]]);
            let flags0 = packet[ihl + 13];
            for i in 0..n {
                let part = &payload[(i * mss).min(payload.len())..((i + 1) * mss).min(payload.len())];
                scratch.clear();
                scratch.extend_from_slice(&packet[..heads]);
                scratch.extend_from_slice(part);
                rewrite_segment(scratch, ihl, i, n, id0, seq0.wrapping_add((i * mss) as u32), flags0);
                // Complete the checksum the kernel left partial: summed over the pseudo-header
                // sum in its field.
                let c = !fold(ones_sum(0, &scratch[ihl..]));
                scratch[ihl + 16..ihl + 18].copy_from_slice(&c.to_be_bytes());
                each(scratch);
            }
            n
        }
        _ if hdr.flags & F_NEEDS_CSUM != 0 => {
            let (start, at) = (usize::from(hdr.csum_start), usize::from(hdr.csum_start) + usize::from(hdr.csum_offset));
            if at + 2 > packet.len() {
                return 0;
            }
            scratch.clear();
            scratch.extend_from_slice(packet);
            // The field holds the pseudo-header's sum: the rest is summed over it.
            let c = !fold(ones_sum(0, &scratch[start..]));
            scratch[at..at + 2].copy_from_slice(&c.to_be_bytes());
            each(scratch);
            1
        }
        _ => {
            each(packet);
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 segment with valid checksums: 20-byte IP header, 32-byte TCP header
    /// (timestamps), `payload` bytes of a pattern of `seq`.
    fn segment(seq: u32, payload: usize, flags: u8, port: u16) -> Vec<u8> {
        let mut p = vec![0u8; 52 + payload];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((52 + payload) as u16).to_be_bytes());
        p[4..6].copy_from_slice(&(seq as u16).to_be_bytes());
        p[6] = 0x40;
        p[8] = 64;
        p[9] = IPPROTO_TCP;
        p[12..16].copy_from_slice(&[10, 7, 0, 1]);
        p[16..20].copy_from_slice(&[10, 7, 0, 2]);
        let c = !fold(ones_sum(0, &p[..20]));
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p[20..22].copy_from_slice(&port.to_be_bytes());
        p[22..24].copy_from_slice(&40_000u16.to_be_bytes());
        p[24..28].copy_from_slice(&seq.to_be_bytes());
        p[28..32].copy_from_slice(&77u32.to_be_bytes());
        p[32] = 8 << 4;
        p[33] = flags;
        p[34..36].copy_from_slice(&500u16.to_be_bytes());
        p[40..44].copy_from_slice(&[1, 1, 8, 10]);
        for (i, b) in p[52..].iter_mut().enumerate() {
            *b = (seq as usize + i) as u8;
        }
        let tcp_len = (32 + payload) as u32;
        let sum = ones_sum(ones_sum(0, &p[12..20]) + u32::from(IPPROTO_TCP) + tcp_len, &p[20..]);
        p[36..38].copy_from_slice(&(!fold(sum)).to_be_bytes());
        p
    }

    fn run(packets: &[Vec<u8>]) -> Vec<(VnetHdr, Vec<u8>)> {
        let mut c = Coalescer::default();
        let mut out = Vec::new();
        let mut write = |h: &[u8; VNET_HDR_LEN], p: &[u8]| out.push((VnetHdr::read(h), p.to_vec()));
        for p in packets {
            c.push(p, &mut write);
        }
        c.flush(&mut write);
        out
    }

    /// What the kernel makes of a received GSO packet, written from RFC 793/1071: the
    /// completed checksum and each segment's bytes.
    fn tcp_checksum_after_completion_ok(p: &[u8]) -> bool {
        let ihl = usize::from(p[0] & 0x0f) * 4;
        let mut q = p.to_vec();
        let c = !fold(ones_sum(0, &q[ihl..]));
        q[ihl + 16..ihl + 18].copy_from_slice(&c.to_be_bytes());
        let pseudo = ones_sum(0, &q[12..20]) + u32::from(IPPROTO_TCP) + (q.len() - ihl) as u32;
        fold(ones_sum(pseudo, &q[ihl..])) == 0xffff
    }

    #[test]
    fn a_run_of_full_segments_is_one_gso_packet_with_every_byte_in_order() {
        let mss = 1_448;
        let mut segs: Vec<Vec<u8>> = (0..5).map(|i| segment(1_000 + i * mss as u32, mss, TCP_ACK, 5201)).collect();
        segs.push(segment(1_000 + 5 * mss as u32, 300, TCP_ACK | TCP_PSH, 5201));
        let out = run(&segs);
        assert_eq!(out.len(), 1);
        let (h, p) = &out[0];
        assert_eq!((h.gso_type, h.flags, h.gso_size, h.hdr_len, h.csum_start, h.csum_offset), (GSO_TCPV4, F_NEEDS_CSUM, mss as u16, 52, 20, 16));
        assert_eq!(p.len(), 52 + 5 * mss + 300);
        assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
        assert_eq!(fold(ones_sum(0, &p[..20])), 0xffff, "IP header checksum");
        assert!(tcp_checksum_after_completion_ok(p));
        assert_eq!(p[33], TCP_ACK | TCP_PSH, "the last segment's PSH is the packet's");
        let payload: Vec<u8> = segs.iter().flat_map(|s| s[52..].to_vec()).collect();
        assert_eq!(&p[52..], &payload[..]);
    }

    #[test]
    fn anything_gro_would_not_merge_is_written_as_it_came_and_in_order() {
        let mss = 1_000;
        let a = segment(0, mss, TCP_ACK, 5201);
        let gap = segment(2 * mss as u32, mss, TCP_ACK, 5201); // one segment missing before it
        let other_flow = segment(3 * mss as u32, mss, TCP_ACK, 5202);
        let fin = segment(4 * mss as u32, mss, TCP_ACK | 0x01, 5202);
        let mut changed_ack = segment(mss as u32, mss, TCP_ACK, 5201);
        changed_ack[28] = 9;
        // A short segment ends a run: the next one, though contiguous, starts its own.
        let full = segment(20_000, mss, TCP_ACK, 5201);
        let short = segment(21_000, 10, TCP_ACK, 5201);
        let after_short = segment(21_010, 10, TCP_ACK, 5201);
        let pure_ack = segment(0, 0, TCP_ACK, 5201);
        let packets = vec![a, gap, other_flow, fin, changed_ack, full.clone(), short.clone(), after_short, pure_ack];
        let out = run(&packets);
        assert_eq!(out.len(), packets.len() - 1);
        for (i, (h, p)) in out.iter().enumerate() {
            if i == 5 {
                assert_eq!((h.gso_type, h.gso_size), (GSO_TCPV4, mss as u16));
                assert_eq!(&p[52..], &[&full[52..], &short[52..]].concat()[..]);
                continue;
            }
            let sent = &packets[if i < 5 { i } else { i + 1 }];
            assert_eq!(*h, VnetHdr::read(&PLAIN));
            assert_eq!(p, sent, "unchanged, checksums intact");
        }
    }

    #[test]
    fn runs_end_at_the_segment_and_length_limits() {
        let mss = 1_448;
        let segs: Vec<Vec<u8>> = (0..100).map(|i| segment(i * mss as u32, mss, TCP_ACK, 5201)).collect();
        let out = run(&segs);
        let sizes: Vec<usize> = out.iter().map(|(_, p)| (p.len() - 52) / mss).collect();
        assert_eq!(sizes, vec![44, 44, 12]);
        assert!(out.iter().all(|(_, p)| p.len() <= MAX_IP_LEN));
        let payload: Vec<u8> = out.iter().flat_map(|(_, p)| p[52..].to_vec()).collect();
        let sent: Vec<u8> = segs.iter().flat_map(|s| s[52..].to_vec()).collect();
        assert_eq!(payload, sent);
    }

    #[test]
    fn a_super_packet_is_cut_into_the_segments_tcp_would_have_sent() {
        let mss = 1_000;
        // Five segments and a short one, as TCP hands them to a device with TSO: one header,
        // the payload whole, IP length and checksum of the whole, the TCP checksum partial.
        let segs: Vec<Vec<u8>> = (0..5)
            .map(|i| segment(7_000 + i * mss as u32, mss, TCP_ACK, 5201))
            .chain([segment(12_000, 123, TCP_ACK | TCP_PSH, 5201)])
            .enumerate()
            .map(|(i, mut s)| {
                // Consecutive IP ids from the first, as one super-packet's segments get.
                s[4..6].copy_from_slice(&(100 + i as u16).to_be_bytes());
                s[10..12].copy_from_slice(&[0, 0]);
                let c = !fold(ones_sum(0, &s[..20]));
                s[10..12].copy_from_slice(&c.to_be_bytes());
                s
            })
            .collect();
        let out = run(&segs);
        assert_eq!(out.len(), 1);
        let (h, merged) = &out[0];
        let mut read = vec![0u8; VNET_HDR_LEN];
        h.write(&mut read);
        read.extend_from_slice(merged);
        let mut got = Vec::new();
        let n = split(&read, &mut Vec::new(), |p| got.push(p.to_vec()));
        assert_eq!(n, 6);
        for (g, s) in got.iter().zip(&segs) {
            assert_eq!(g, s, "every byte as the sender built it");
        }
    }

    #[test]
    fn a_partial_checksum_is_completed_and_anything_else_passes_unchanged() {
        let s = segment(1, 300, TCP_ACK | TCP_PSH, 5201);
        let mut partial = s.clone();
        let pseudo = ones_sum(0, &s[12..20]) + u32::from(IPPROTO_TCP) + (s.len() - 20) as u32;
        partial[36..38].copy_from_slice(&fold(pseudo).to_be_bytes());
        let mut read = vec![0u8; VNET_HDR_LEN];
        VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: 0,
            hdr_len: 52,
            gso_size: 0,
            csum_start: 20,
            csum_offset: 16,
        }
        .write(&mut read);
        read.extend_from_slice(&partial);
        let mut got = Vec::new();
        assert_eq!(split(&read, &mut Vec::new(), |p| got.push(p.to_vec())), 1);
        assert_eq!(got, vec![s.clone()]);
        let mut plain = PLAIN.to_vec();
        plain.extend_from_slice(&s);
        got.clear();
        split(&plain, &mut Vec::new(), |p| got.push(p.to_vec()));
        assert_eq!(got, vec![s]);
        assert_eq!(split(&[0u8; 4], &mut Vec::new(), |_| panic!("nothing to hand over")), 0);
    }
}
