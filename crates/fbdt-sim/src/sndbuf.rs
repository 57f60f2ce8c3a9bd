//! Kernel MPTCP's meta-level send buffer, for the meta layer (`mp:*`) under `--model tcp`.
//!
//! Why: on the testbed (Linux 6.18, `ss -tmiM` sampled once a second in the server's
//! namespace during `tc-delay-wigig`), kernel MPTCP's WiFi subflow sat idle for hundreds of
//! milliseconds at a time (empty send queue, `lastsnd` 560–880 ms) while the MPTCP socket
//! held 3.7–4.9 MB written but not yet DATA_ACKed — two thirds of its send buffer. The
//! DATA_ACK is cumulative, so one byte on the 1 s-RTT WiGig subflow holds back the
//! acknowledgement of every WiFi byte behind it for a second, and the application may not
//! write while the send buffer is that full: the stream moves about one send buffer per
//! WiGig round trip (76 Mbit/s where WiFi alone carries ≈ 350). The send buffer is not a
//! fixed maximum but the sum of the subflows' autotuned send buffers, each a few cwnds.
//!
//! The kernel's rules, with their constants:
//! - `tcp_sndbuf_expand` (net/ipv4/tcp_input.c): a subflow's `sk_sndbuf` grows (never
//!   shrinks) to `sndbuf_expand × max(cwnd, TCP_INIT_CWND = 10, reordering + 1) × per_mss`,
//!   capped at `tcp_wmem[2]`; `sndbuf_expand` is 2 (Cubic's default) or 3 (`bbr_sndbuf_expand`,
//!   net/ipv4/tcp_bbr.c); `per_mss` = roundup_pow_of_two(MSS + MAX_TCP_HEADER +
//!   skb_shared_info) + sk_buff, 2304 bytes for the 1448-byte MSS (the testbed showed
//!   `tb46080` = 2 × 10 × 2304 at cwnd 10 and `tb1760256` = 2 × 382 × 2304 at cwnd 382).
//! - `__mptcp_sync_sndbuf` (net/mptcp/protocol.h): the MPTCP socket's `sk_sndbuf` is
//!   `tcp_wmem[0]` plus the sum of its subflows' (the testbed: `tb5648896` = 4096 +
//!   5 460 480 + 184 320).
//! - `sk_stream_memory_free` / `sk_stream_is_writeable` (include/net/sock.h): a write takes
//!   at most the free space; a writer waiting in `poll` (the testbed's sender,
//!   crates/fbdt-emu/src/perf.rs, with TCP_NOTSENT_LOWAT) is woken only when the free space
//!   is at least half the queued bytes, i.e. while queued ≤ ⅔ of the buffer — the level
//!   the testbed's queue sat at (w = 3.90 MB of tb = 5.65 MB).
//!
//! Bytes count as queued from the write until their DATA_ACK (the msk's `wmem_queued`; on
//! the testbed it tracked `write_seq − snd_una` within 1%). Not modelled: memory pressure
//! (`tcp_mem`), which can shrink buffers; the subflows' own send queues (the meta layer
//! hands a subflow only what its window takes).

use fbdt_core::meta::sched::subflow_sndbuf;

use crate::tcp::CongestionControl;

/// `tcp_wmem[0]`, the kernel's default, which `__mptcp_sync_sndbuf` starts the sum from.
const TCP_WMEM_MIN: u64 = 4096;
/// `tcp_wmem[2]` on the testbed (fbdt-emu's `TestbedOptions::tcp_buffer_max`, 64 MiB).
const TCP_WMEM_MAX: u64 = 64 << 20;

/// The MPTCP socket's send buffer, grown from its subflows' congestion windows.
#[derive(Clone, Debug)]
pub(crate) struct MetaSndbuf {
    /// Each subflow's `sk_sndbuf`.
    subflow: Vec<u64>,
    expand: u64,
}

impl MetaSndbuf {
    /// Room for `paths` subflows, none established yet: `__mptcp_sync_sndbuf` sums only the
    /// subflows the MPTCP socket has (a join 1.5 s in adds its buffer then).
    pub fn new(paths: usize, cc: CongestionControl) -> Self {
        let expand = match cc {
            CongestionControl::Cubic | CongestionControl::Reno => 2,
            CongestionControl::Bbr => 3,
        };
        MetaSndbuf {
            subflow: vec![0; paths],
            expand,
        }
    }

    /// The established subflow on `path` has a congestion window of `cwnd_bytes`; the first
    /// call gives it at least the initial window's buffer (what `tcp_init_buffer_space`
    /// sets when the connection is established).
    pub fn saw_cwnd(&mut self, path: usize, cwnd_bytes: u64) {
        let want = subflow_sndbuf(cwnd_bytes, self.expand).min(TCP_WMEM_MAX);
        if let Some(b) = self.subflow.get_mut(path) {
            *b = (*b).max(want);
        }
    }

    /// The MPTCP socket's `sk_sndbuf`.
    pub fn bytes(&self) -> u64 {
        TCP_WMEM_MIN + self.subflow.iter().sum::<u64>()
    }
}

/// Bytes a poll-driven writer may write now with `queued` bytes written and not yet
/// acknowledged in a send buffer of `sndbuf` bytes: none unless the socket is writable
/// (free space ≥ half the queued bytes), then up to the free space.
pub(crate) fn writable(sndbuf: u64, queued: u64) -> u64 {
    let free = sndbuf.saturating_sub(queued);
    if free >= queued / 2 {
        free
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model's segment size (a 1500-byte MTU with timestamps).
    const MSS: u64 = 1448;

    #[test]
    fn matches_what_the_testbed_kernel_showed() {
        let mut b = MetaSndbuf::new(2, CongestionControl::Cubic);
        assert_eq!(b.bytes(), 4096, "no subflow yet");
        b.saw_cwnd(0, 10 * MSS);
        assert_eq!(b.bytes(), 4096 + 46_080, "the first subflow at its initial window");
        b.saw_cwnd(1, 10 * MSS);
        assert_eq!(b.bytes(), 4096 + 2 * 46_080);
        b.saw_cwnd(0, 1185 * MSS);
        b.saw_cwnd(1, 40 * MSS);
        assert_eq!(b.bytes(), 5_648_896);
        // Never shrinks.
        b.saw_cwnd(0, 103 * MSS);
        assert_eq!(b.bytes(), 5_648_896);
    }

    #[test]
    fn writable_from_two_thirds_down() {
        assert_eq!(writable(300, 200), 100);
        assert_eq!(writable(300, 201), 0);
        assert_eq!(writable(300, 0), 300);
    }
}
