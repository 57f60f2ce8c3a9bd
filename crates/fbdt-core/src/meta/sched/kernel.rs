//! Linux's upstream MPTCP default scheduler (v5.19+, `mptcp_subflow_get_send` in
//! net/mptcp/protocol.c), the one the testbed's kernel (6.18) runs — not minRTT.
//!
//! Its rule: among the active subflows pick the one whose queued bytes would drain soonest
//! at its pacing rate (`linger_time = sk_wmem_queued << 32 / avg_pacing_rate`; ties to the
//! first subflow), then send on it only if its send buffer has room
//! (`sk_stream_memory_free`) — not its congestion window: bytes beyond the window wait in
//! the subflow's send queue. So a subflow with an empty queue is picked whatever its round
//! trip: on the testbed's `tc-delay-wigig` the 1 s-RTT WiGig subflow was handed data every
//! time its queue ran dry (1 MB in 10 s), and each such byte held the cumulative DATA_ACK
//! back for a second (crates/fbdt-sim/src/sndbuf.rs says what that costs).
//!
//! The subflow's send buffer is `tcp_sndbuf_expand`'s (net/ipv4/tcp_input.c): it grows, never
//! shrinks, to 2 × max(cwnd in segments, TCP_INIT_CWND = 10) × per_mss, per_mss = 2304 bytes
//! for a 1448-byte MSS (the testbed showed 46 080 bytes at cwnd 10). The pacing rate is taken
//! as cwnd / srtt (Linux multiplies it by 2 in slow start and 1.2 after, the same for every
//! subflow in the same phase; the kernel also averages it over bursts). Both come from the
//! subflow's own window (`PathView::tcp_cwnd`), not the meta layer's allowance, whose 64 KiB
//! `cwnd_extra` made a 5-segment WiGig subflow look ten times faster than it was and let its
//! send queue grow past what the kernel would allow (tc-loss-wigig: 245 KB where the testbed's
//! held at most 176 KB).
//!
//! A picked subflow keeps the data for a burst (`__mptcp_push_pending` →
//! `__subflow_push_pending`): up to `MPTCP_SEND_BURST_SIZE` (≈ 64 KB) or what the shared
//! window has left, while its send buffer has room. On the testbed's `tc-delay-wigig` the
//! WiGig subflow's send queue held 44 656 bytes at its first pick (its send buffer at
//! cwnd 10, so three round trips of slow start to drain) and 65 456 at every pick after.
//!
//! Not modelled: backup subflows.

use super::{PathView, Scheduler, View};
use crate::path::PathId;

const MSS: u64 = 1448;
const PER_MSS: u64 = 2304;
const TCP_INIT_CWND: u64 = 10;
/// `MPTCP_SEND_BURST_SIZE`: 64 KiB less a TCP header, the TCP option space, an IPv6 header
/// and a fragment header.
const SEND_BURST: u64 = (1 << 16) - 20 - 40 - 40 - 8;

/// A subflow's `sk_sndbuf` for a congestion window of `cwnd_bytes` under
/// `tcp_sndbuf_expand` (see the module comment): `expand` (2 for Cubic, 3 for BBR) ×
/// max(cwnd in segments, TCP_INIT_CWND) × per_mss, uncapped. The kernel only ever grows it.
pub fn subflow_sndbuf(cwnd_bytes: u64, expand: u64) -> u64 {
    expand * (cwnd_bytes / MSS).max(TCP_INIT_CWND) * PER_MSS
}

#[derive(Clone, Default)]
pub struct Kernel {
    /// Each subflow's send buffer so far (bytes), by path index.
    sndbuf: Vec<u64>,
    /// The subflow the current burst goes to and the bytes the burst has left.
    burst: Option<(PathId, u64)>,
}

/// Seconds `p`'s queued bytes take at its pacing rate (an unknown rate drains at once).
fn linger_s(p: &PathView) -> f64 {
    if p.in_flight == 0 || p.srtt_s <= 0.0 || p.tcp_cwnd == 0 {
        return 0.0;
    }
    p.in_flight as f64 * p.srtt_s / p.tcp_cwnd as f64
}

impl Kernel {
    fn sndbuf(&mut self, p: &PathView) -> u64 {
        let i = p.id.index();
        if self.sndbuf.len() <= i {
            self.sndbuf.resize(i + 1, subflow_sndbuf(0, 2));
        }
        self.sndbuf[i] = self.sndbuf[i].max(subflow_sndbuf(p.tcp_cwnd, 2));
        self.sndbuf[i]
    }
}

impl Scheduler for Kernel {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        if let Some((id, left)) = self.burst {
            let on = v.paths.iter().find(|p| p.id == id && p.usable);
            match on {
                Some(p) if left > 0 && p.in_flight < self.sndbuf(p) => return Some(id),
                _ => self.burst = None,
            }
        }
        let mut best: Option<(&PathView, f64)> = None;
        for p in v.paths.iter().filter(|p| p.usable) {
            let l = linger_s(p);
            if best.is_none_or(|(_, b)| l < b) {
                best = Some((p, l));
            }
        }
        let (p, _) = best?;
        let room = self.sndbuf(p);
        if p.in_flight >= room {
            return None;
        }
        self.burst = Some((p.id, SEND_BURST.min(v.window_left)));
        Some(p.id)
    }

    fn on_sent(&mut self, path: PathId, len: u64) {
        if let Some((id, left)) = &mut self.burst {
            if *id == path {
                *left = left.saturating_sub(len);
            }
        }
    }

    /// Upstream MPTCP re-sends data on another subflow only when a subflow's retransmission
    /// timer fires (`__mptcp_retrans`), never opportunistically when the window blocks.
    fn reinject_default(&self) -> bool {
        false
    }

    /// The MPTCP-level retransmission timer and stale subflows, as upstream.
    fn upstream_recovery(&self) -> bool {
        true
    }

    /// `select` checks the subflow's send buffer itself.
    fn queues_past_cwnd(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{path, view};
    use super::*;

    #[test]
    fn an_idle_slow_subflow_is_picked_over_a_busy_fast_one() {
        let paths = [path(0, 4.0, 1_000_000, 500_000), path(1, 1000.0, 14_480, 0)];
        assert_eq!(
            Kernel::default().select(&view(&paths, 1 << 20, 1 << 20)),
            Some(PathId(1))
        );
    }

    #[test]
    fn the_least_lingering_subflow_wins_and_needs_send_buffer_room() {
        // 500 kB over 1 MB/4 ms lingers 2 ms; 20 kB over 14.5 kB/s lingers > 1 s.
        let paths = [path(0, 4.0, 1_000_000, 500_000), path(1, 1000.0, 14_480, 20_000)];
        assert_eq!(
            Kernel::default().select(&view(&paths, 1 << 20, 1 << 20)),
            Some(PathId(0))
        );
        // A full send buffer (2 × 690 segments × 2304 bytes) stops it; no fallback.
        let paths = [path(0, 4.0, 1_000_000, 3_200_000), path(1, 1000.0, 14_480, 20_000_000)];
        assert_eq!(Kernel::default().select(&view(&paths, 1 << 20, 1 << 20)), None);
    }

    /// A picked subflow keeps the data for a burst of `MPTCP_SEND_BURST_SIZE` — four
    /// 16 KiB segments — even once another lingers less, then the choice is made anew; a
    /// full send buffer ends the burst early.
    #[test]
    fn a_picked_subflow_keeps_a_64_kb_burst() {
        let mut k = Kernel::default();
        let mut paths = [path(0, 4.0, 1_000_000, 0), path(1, 1000.0, 14_480, 0)];
        // Both idle: the first subflow wins the tie.
        assert_eq!(k.select(&view(&paths, 1 << 20, 1 << 20)), Some(PathId(0)));
        for sent in 1..=4u64 {
            k.on_sent(PathId(0), 16_384);
            paths[0].in_flight = sent * 16_384;
            let next = k.select(&view(&paths, 1 << 20, 1 << 20));
            if sent < 4 {
                assert_eq!(next, Some(PathId(0)), "segment {sent} of the burst");
            } else {
                // 65 536 bytes sent: the burst is over, the idle subflow lingers less.
                assert_eq!(next, Some(PathId(1)));
            }
        }
        // The slow subflow's send buffer at cwnd 10 is 46 080 bytes: its burst stops at
        // three segments.
        let mut k = Kernel::default();
        let mut paths = [path(0, 4.0, 1_000_000, 3_200_000), path(1, 1000.0, 14_480, 0)];
        assert_eq!(k.select(&view(&paths, 1 << 20, 1 << 20)), Some(PathId(1)));
        let mut taken = 1;
        loop {
            k.on_sent(PathId(1), 16_384);
            paths[1].in_flight += 16_384;
            if k.select(&view(&paths, 1 << 20, 1 << 20)) != Some(PathId(1)) {
                break;
            }
            taken += 1;
        }
        assert_eq!(taken, 3);
    }

    /// The meta layer's allowance (cwnd + 64 KiB `cwnd_extra`) is not the kernel's: a
    /// 5-segment subflow paces at 5 segments per round trip and its send buffer stays at the
    /// initial window's 46 080 bytes however large the allowance.
    #[test]
    fn pacing_and_send_buffer_come_from_the_subflows_own_window() {
        let small = |in_flight| PathView {
            cwnd: 5 * 1448 + 65_536,
            tcp_cwnd: 5 * 1448,
            ..path(1, 2.0, 5 * 1448, in_flight)
        };
        // 40 kB behind 5 segments per 2 ms lingers 11 ms; 500 kB behind 1 MB per 4 ms, 2 ms.
        let paths = [path(0, 4.0, 1_000_000, 500_000), small(40_000)];
        assert_eq!(
            Kernel::default().select(&view(&paths, 1 << 20, 1 << 20)),
            Some(PathId(0))
        );
        // Alone, with 46 080 bytes queued: no room, whatever the allowance says.
        let paths = [path(0, 4.0, 1_000_000, 3_200_000), small(46_080)];
        assert_eq!(Kernel::default().select(&view(&paths, 1 << 20, 1 << 20)), None);
        let paths = [path(0, 4.0, 1_000_000, 3_200_000), small(46_079)];
        assert_eq!(
            Kernel::default().select(&view(&paths, 1 << 20, 1 << 20)),
            Some(PathId(1))
        );
    }
}
