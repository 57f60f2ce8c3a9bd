//! Coupled congestion control: RFC 6356's Linked Increases (LIA) over a session's paths.
//!
//! The simulator's TCP model runs [`lia_increase`] on every ACK of a coupled path. A real
//! runtime cannot: each path is a kernel TCP connection running its own controller, and
//! Linux has no coupled one. [`LiaPacer`] keeps the coupled window each path would have from
//! what the path's TCP_INFO shows between two samples (bytes acknowledged, retransmissions,
//! smoothed RTT, bytes in flight) and turns it into a pacing ceiling, window / RTT, which the
//! runtime sets as the socket's `SO_MAX_PACING_RATE`. The kernel's own window still applies;
//! the path sends at the lower of the two, so coupling can only take rate away from a path,
//! never add it.

use crate::time::{Duration, Instant};

/// RFC 6356 §3's `alpha` for windows `(cwnd_i, rtt_i)` (bytes, s):
/// `cwnd_total · max_i(cwnd_i / rtt_i²) / (Σ_i cwnd_i / rtt_i)²`. 1 for a single path.
pub fn lia_alpha(windows: &[(f64, f64)]) -> f64 {
    let total: f64 = windows.iter().map(|w| w.0).sum();
    let best = windows
        .iter()
        .map(|&(c, r)| c / (r * r))
        .fold(0.0, f64::max);
    let sum: f64 = windows.iter().map(|&(c, r)| c / r).sum();
    if sum <= 0.0 {
        return 1.0;
    }
    total * best / (sum * sum)
}

/// RFC 6356 §3's increase of member `i` for an ACK of `acked` bytes (MSS `mss`):
/// `min(alpha · acked · mss / cwnd_total, acked · mss / cwnd_i)` bytes — the coupled
/// increase, never more than the member's own uncoupled (Reno) increase.
pub fn lia_increase(windows: &[(f64, f64)], i: usize, acked: f64, mss: f64) -> f64 {
    let total: f64 = windows.iter().map(|w| w.0).sum();
    let own = windows[i].0;
    (lia_alpha(windows) * acked * mss / total).min(acked * mss / own)
}

/// The ratio of the coupled increase to the member's uncoupled one,
/// `min(alpha · cwnd_i / cwnd_total, 1)`: what a Reno increase (`acked · mss / cwnd_i`) is
/// scaled by to become exactly [`lia_increase`].
pub fn lia_factor(windows: &[(f64, f64)], i: usize) -> f64 {
    let Some(&(own, _)) = windows.get(i) else {
        return 1.0;
    };
    let total: f64 = windows.iter().map(|w| w.0).sum();
    if total <= 0.0 || own <= 0.0 {
        return 1.0;
    }
    (lia_alpha(windows) * own / total).min(1.0)
}

/// One path's TCP state at a sample, as [`LiaPacer`] reads it. Counters are the current
/// connection's own (TCP_INFO's), so they start over with a new connection.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CoupledSample {
    /// Bytes TCP has seen acknowledged (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Segments retransmitted (`tcpi_total_retrans`): a rise outside an episode already
    /// under way is a new loss episode.
    pub retransmits: u32,
    /// TCP is repairing losses (`tcpi_ca_state` Recovery or Loss): retransmissions while it
    /// stays there belong to the episode that put it there.
    pub in_recovery: bool,
    /// Smoothed RTT; zero before TCP has measured one.
    pub srtt: Duration,
    /// The sender's MSS (bytes).
    pub mss: u32,
    /// Bytes sent and not yet acknowledged.
    pub in_flight_bytes: u64,
    /// The kernel controller's own window (bytes).
    pub cwnd_bytes: u64,
}

/// Linux's initial window (segments), where a new connection's coupled window starts.
const INITIAL_SEGMENTS: f64 = 10.0;
/// The smallest coupled window (segments), as TCP's after a loss.
const MIN_SEGMENTS: f64 = 2.0;

/// One coupled path.
#[derive(Clone, Copy, Debug)]
struct Member {
    /// Which of the path's connections this is about (the runtime's count).
    connection: u32,
    /// The coupled window (bytes).
    window: f64,
    slow_start: bool,
    bytes_acked: u64,
    retransmits: u32,
    /// The window LIA's alpha sees: the coupled one or the kernel's, whichever is lower
    /// (that is what the path can have in flight).
    in_force: f64,
    srtt_s: f64,
    /// The last sample found TCP in recovery.
    in_recovery: bool,
    /// Retransmissions before this instant belong to the episode already answered (a
    /// short episode may begin and end between two samples).
    recovery_until: Instant,
    /// When the previous sample was taken: what was acknowledged since, over this time,
    /// is the rate the path delivered.
    sampled_at: Instant,
}

/// The coupled windows of one session's paths (RFC 6356 LIA: slow start to the first loss,
/// then the linked increase, halving once per loss episode), fed with samples of each path's
/// TCP state and read as pacing ceilings. Deterministic and clock-free: `now` is an input.
///
/// A window grows only while the path keeps at least half of it in flight (Linux's
/// `tcp_is_cwnd_limited`, which `mptcp_coupled` also asks): a path held below it by the
/// application, FBDT's send limit or the kernel's own window does not grow a window it
/// does not use. What is in flight is judged by the larger of the sample's bytes in flight
/// and what the path delivered since the previous sample, per RTT (Little's law: the
/// average in flight). A point sample alone can miss a path paced at its ceiling whose
/// bursts are acknowledged between samples, or one whose sample came late (docs/congestion.md,
/// rounds 7 and 9).
#[derive(Clone, Debug, Default)]
pub struct LiaPacer {
    members: Vec<Option<Member>>,
}

impl LiaPacer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Path `i`'s connection `connection` showed `s` at `now`: updates its coupled window and
    /// returns its pacing ceiling (bytes/s), or `None` while TCP has no RTT yet.
    pub fn on_sample(&mut self, i: usize, connection: u32, s: &CoupledSample, now: Instant) -> Option<u64> {
        if s.srtt == Duration::ZERO || s.mss == 0 {
            return None;
        }
        if self.members.len() <= i {
            self.members.resize(i + 1, None);
        }
        let mss = f64::from(s.mss);
        let srtt_s = s.srtt.as_secs_f64();
        let fresh = self.members[i].is_none_or(|m| m.connection != connection);
        if fresh {
            let window = (s.cwnd_bytes as f64).max(INITIAL_SEGMENTS * mss);
            self.members[i] = Some(Member {
                connection,
                window,
                slow_start: true,
                bytes_acked: s.bytes_acked,
                retransmits: s.retransmits,
                in_force: window.min(s.cwnd_bytes as f64).max(mss),
                srtt_s,
                in_recovery: s.in_recovery,
                recovery_until: now,
                sampled_at: now,
            });
            return self.ceiling(i);
        }
        let windows = self.windows_except(i);
        let m = self.members[i].as_mut()?;
        let acked = s.bytes_acked.saturating_sub(m.bytes_acked) as f64;
        let since = now.saturating_since(m.sampled_at).as_secs_f64();
        let delivered_per_rtt = if since > 0.0 { acked / since * srtt_s } else { 0.0 };
        let in_use = (s.in_flight_bytes as f64).max(delivered_per_rtt);
        m.sampled_at = now;
        // One halving per episode, as TCP reduces once per recovery: a slow start's
        // overshoot repairs losses over several RTTs, and halving per RTT of it took a
        // window of 360 segments to 15 on the testbed.
        let new_episode = s.retransmits > m.retransmits && !m.in_recovery && now >= m.recovery_until;
        m.bytes_acked = s.bytes_acked;
        m.retransmits = s.retransmits;
        m.in_recovery = s.in_recovery;
        m.srtt_s = srtt_s;
        if new_episode {
            m.window = (m.window / 2.0).max(MIN_SEGMENTS * mss);
            m.slow_start = false;
            m.recovery_until = now + s.srtt;
        } else if acked > 0.0 && 2.0 * in_use >= m.window {
            m.window += if m.slow_start {
                acked
            } else {
                let mut all = windows;
                let own = all.len();
                all.push((m.window.min(s.cwnd_bytes as f64).max(mss), srtt_s));
                lia_increase(&all, own, acked, mss)
            };
        }
        m.in_force = m.window.min(s.cwnd_bytes as f64).max(mss);
        self.ceiling(i)
    }

    /// Path `i` carries nothing coupled (no connection, or a controller not coupled): it
    /// leaves the others' alpha.
    pub fn leave(&mut self, i: usize) {
        if let Some(m) = self.members.get_mut(i) {
            *m = None;
        }
    }

    /// Path `i`'s coupled window (bytes), if it is a member.
    pub fn window(&self, i: usize) -> Option<u64> {
        self.member(i).map(|m| m.window as u64)
    }

    fn member(&self, i: usize) -> Option<&Member> {
        self.members.get(i).and_then(Option::as_ref)
    }

    /// Window over RTT; twice that in slow start, as Linux paces a slow start (its
    /// `tcp_pacing_ss_ratio`), so the ceiling does not slow the doubling.
    fn ceiling(&self, i: usize) -> Option<u64> {
        self.member(i).map(|m| {
            let gain = if m.slow_start { 2.0 } else { 1.0 };
            (gain * m.window / m.srtt_s).max(1.0) as u64
        })
    }

    /// `(window in force, srtt)` of every member but `i`.
    fn windows_except(&self, i: usize) -> Vec<(f64, f64)> {
        self.members
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .filter_map(|(_, m)| m.map(|m| (m.in_force, m.srtt_s)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: f64 = 1448.0;

    /// RFC 6356 §3 by hand on two paths: 10 segments over 10 ms and 20 segments over
    /// 40 ms. cwnd/rtt² is 10/1e-4 = 100 000 and 20/16e-4 = 12 500 segments/s², the
    /// sum of cwnd/rtt is 1000 + 500 = 1500 segments/s, so
    /// alpha = 30 · 100 000 / 1500² = 4/3. An ACK of one segment on the first path adds
    /// min(4/3 · 1/30, 1/10) = 2/45 segment; on the second, min(2/45, 1/20) = 2/45.
    #[test]
    fn lia_follows_rfc_6356_on_two_paths() {
        let w = [(10.0 * MSS, 0.010), (20.0 * MSS, 0.040)];
        assert!((lia_alpha(&w) - 4.0 / 3.0).abs() < 1e-12, "{}", lia_alpha(&w));
        let inc0 = lia_increase(&w, 0, MSS, MSS) / MSS;
        let inc1 = lia_increase(&w, 1, MSS, MSS) / MSS;
        assert!((inc0 - 2.0 / 45.0).abs() < 1e-12, "{inc0}");
        assert!((inc1 - 2.0 / 45.0).abs() < 1e-12, "{inc1}");
        // The factor on Reno's own increase (1/10 and 1/20 segment).
        assert!((lia_factor(&w, 0) - (2.0 / 45.0) / 0.1).abs() < 1e-12);
        assert!((lia_factor(&w, 1) - (2.0 / 45.0) / 0.05).abs() < 1e-12);
    }

    /// Two equal paths through one bottleneck: alpha = 1/2, and the pair grows by half a
    /// segment per round trip in all — with each loss halving only one path's window
    /// (a quarter of the total), the aggregate's equilibrium is one Reno flow's.
    #[test]
    fn two_equal_paths_grow_together_as_one_flow() {
        let w = [(50.0 * MSS, 0.02), (50.0 * MSS, 0.02)];
        assert!((lia_alpha(&w) - 0.5).abs() < 1e-12);
        // One round trip: 50 ACKs of one segment on each path.
        let per_rtt: f64 = (0..2).map(|i| 50.0 * lia_increase(&w, i, MSS, MSS)).sum::<f64>() / MSS;
        assert!((per_rtt - 0.5).abs() < 1e-12, "{per_rtt}");
        // A single path is plain Reno: one segment per round trip.
        let one = [(50.0 * MSS, 0.02)];
        assert!((lia_alpha(&one) - 1.0).abs() < 1e-12);
        assert!((50.0 * lia_increase(&one, 0, MSS, MSS) / MSS - 1.0).abs() < 1e-12);
        assert_eq!(lia_factor(&one, 0), 1.0);
    }

    const RTT: Duration = Duration::from_millis(20);

    /// A window-limited sample: everything the coupled window allows is in flight, and
    /// the kernel's own window is far above it.
    fn limited(bytes_acked: u64, retransmits: u32, window: Option<u64>) -> CoupledSample {
        CoupledSample {
            bytes_acked,
            retransmits,
            srtt: RTT,
            mss: MSS as u32,
            in_flight_bytes: window.unwrap_or(0),
            cwnd_bytes: 100_000_000,
            in_recovery: false,
        }
    }

    /// A connection's first sample: the kernel's initial window of ten segments.
    fn start() -> CoupledSample {
        CoupledSample {
            cwnd_bytes: 10 * MSS as u64,
            ..limited(0, 0, None)
        }
    }

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    /// Drives `paths` coupled paths of equal RTT, each acknowledging its whole window every
    /// RTT, for `rtts` round trips; returns their windows in segments.
    fn run_window_limited(pacer: &mut LiaPacer, paths: usize, from_rtt: u64, rtts: u64, acked: &mut [u64]) -> Vec<f64> {
        for r in from_rtt..from_rtt + rtts {
            for (i, a) in acked.iter_mut().enumerate().take(paths) {
                let w = pacer.window(i).unwrap();
                *a += w;
                pacer.on_sample(i, 1, &limited(*a, 1, Some(w)), at_ms(20 * r));
            }
        }
        (0..paths).map(|i| pacer.window(i).unwrap() as f64 / MSS).collect()
    }

    #[test]
    fn slow_start_doubles_per_round_trip_until_the_first_loss_halves() {
        let mut p = LiaPacer::new();
        let ceiling = p.on_sample(0, 1, &start(), at_ms(0)).unwrap();
        // Ten segments over 20 ms, twice that in slow start.
        assert_eq!(ceiling, (2.0 * 10.0 * MSS / 0.020) as u64);
        p.on_sample(0, 1, &limited(10 * MSS as u64, 0, Some(10 * MSS as u64)), at_ms(20));
        assert_eq!(p.window(0), Some(20 * MSS as u64));
        // A retransmission, TCP in recovery: half, and congestion avoidance from there on.
        let lossy = |retransmits, in_recovery| CoupledSample {
            in_recovery,
            ..limited(20 * MSS as u64, retransmits, Some(10 * MSS as u64))
        };
        p.on_sample(0, 1, &lossy(1, true), at_ms(40));
        assert_eq!(p.window(0), Some(10 * MSS as u64));
        // More retransmissions while TCP stays in recovery are the same episode, however
        // long it lasts.
        p.on_sample(0, 1, &lossy(3, true), at_ms(50));
        p.on_sample(0, 1, &lossy(9, true), at_ms(200));
        assert_eq!(p.window(0), Some(10 * MSS as u64));
        // Out of recovery, the ceiling is the window over the RTT.
        assert_eq!(p.on_sample(0, 1, &lossy(9, false), at_ms(210)), Some((10.0 * MSS / 0.020) as u64));
        // A rise outside recovery, but within an RTT of the episode's start, is still it
        // (an episode may end between two samples)...
        let mut q = LiaPacer::new();
        q.on_sample(0, 1, &start(), at_ms(0));
        q.on_sample(0, 1, &lossy(1, false), at_ms(10));
        q.on_sample(0, 1, &lossy(2, false), at_ms(20));
        assert_eq!(q.window(0), Some(5 * MSS as u64));
        // ...and a rise after it is a new one.
        q.on_sample(0, 1, &lossy(3, false), at_ms(40));
        assert_eq!(q.window(0), Some((2.5 * MSS) as u64));
        // One path alone is Reno: one segment more per RTT of full windows.
        let mut acked = [20 * MSS as u64];
        let w = run_window_limited(&mut p, 1, 11, 10, &mut acked);
        assert!((w[0] - 20.0).abs() < 0.5, "{w:?}");
    }

    /// Two coupled paths of equal RTT in congestion avoidance grow by half a segment per
    /// RTT between them — one Reno flow's increase, not two.
    #[test]
    fn two_coupled_paths_grow_as_much_as_one_reno_flow() {
        let mut p = LiaPacer::new();
        for i in 0..2 {
            p.on_sample(i, 1, &start(), at_ms(0));
            // Out of slow start at once.
            p.on_sample(i, 1, &limited(0, 1, Some(10 * MSS as u64)), at_ms(1));
        }
        let before: f64 = (0..2).map(|i| p.window(i).unwrap() as f64 / MSS).sum();
        let mut acked = [0, 0];
        let after: f64 = run_window_limited(&mut p, 2, 1, 40, &mut acked).iter().sum();
        let per_rtt = (after - before) / 40.0;
        assert!((per_rtt - 0.5).abs() < 0.05, "{per_rtt} segments per RTT ({before} -> {after})");
    }

    #[test]
    fn a_window_the_path_does_not_fill_does_not_grow() {
        let mut p = LiaPacer::new();
        p.on_sample(0, 1, &start(), at_ms(0));
        let w0 = p.window(0).unwrap();
        // ACKs arrive, but the path delivers three of its ten segments per RTT and has a
        // third of its window in flight: application-limited.
        let mut s = limited(3 * MSS as u64, 0, Some(w0 / 3));
        p.on_sample(0, 1, &s, at_ms(20));
        assert_eq!(p.window(0), Some(w0));
        s.in_flight_bytes = w0;
        s.bytes_acked *= 2;
        p.on_sample(0, 1, &s, at_ms(40));
        assert!(p.window(0).unwrap() > w0);
    }

    /// A path paced at its ceiling acknowledges a whole window per RTT, but a sample may fall
    /// between its bursts and see little in flight: what it delivered says it is limited.
    #[test]
    fn a_paced_path_between_bursts_grows_as_reno() {
        let mut p = LiaPacer::new();
        p.on_sample(0, 1, &start(), at_ms(0));
        p.on_sample(0, 1, &limited(0, 1, Some(10 * MSS as u64)), at_ms(1));
        let before = p.window(0).unwrap() as f64 / MSS;
        let mut acked = 0;
        for r in 1..=10 {
            let w = p.window(0).unwrap();
            acked += w;
            p.on_sample(0, 1, &limited(acked, 1, Some(w / 4)), at_ms(20 * r));
        }
        let after = p.window(0).unwrap() as f64 / MSS;
        assert!((after - before - 10.0).abs() < 0.5, "{before} -> {after}");
    }

    #[test]
    fn a_new_connection_starts_over_and_a_path_that_leaves_is_not_counted() {
        let mut p = LiaPacer::new();
        for i in 0..2 {
            p.on_sample(i, 1, &start(), at_ms(0));
            p.on_sample(i, 1, &limited(0, 1, Some(10 * MSS as u64)), at_ms(1));
        }
        let mut acked = [0, 0];
        run_window_limited(&mut p, 2, 1, 20, &mut acked);
        // Path 1 reconnects: counters start at zero again, and so does its window.
        p.on_sample(1, 2, &start(), at_ms(1000));
        assert_eq!(p.window(1), Some(10 * MSS as u64));
        // With path 1 gone, path 0 alone grows as Reno does.
        p.leave(1);
        assert_eq!(p.window(1), None);
        let before = p.window(0).unwrap() as f64 / MSS;
        let mut acked = [acked[0]];
        let after = run_window_limited(&mut p, 1, 100, 10, &mut acked)[0];
        assert!((after - before - 10.0).abs() < 0.5, "{before} -> {after}");
    }

    #[test]
    fn no_ceiling_before_tcp_has_an_rtt() {
        let mut p = LiaPacer::new();
        let s = CoupledSample {
            srtt: Duration::ZERO,
            ..limited(0, 0, None)
        };
        assert_eq!(p.on_sample(0, 1, &s, at_ms(0)), None);
        assert_eq!(p.window(0), None);
    }
}
