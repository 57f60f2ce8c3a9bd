//! The TCP-level path model (`--model tcp`): the congestion window, loss recovery and
//! retransmission timer of one TCP connection's direction, layered on [`crate::link::Link`]
//! (which keeps the bytes, the backlog and in-order delivery).
//!
//! A window-level model, chunk by chunk (a chunk is one frame as the core wrote it, a few
//! segments): the sender sends at Linux's pacing rate (2 × or 1.2 × cwnd/srtt) while
//! in-flight bytes stay below `min(cwnd, max window)`; the bottleneck drains at the path's
//! rate, so everything beyond one bandwidth-delay product waits in the bottleneck queue
//! (adding queueing delay) and what would overflow the queue is lost.
//!
//! Modelled:
//! - slow start (initial window 10 segments) up to ssthresh, then Cubic growth
//!   (C = 0.4, β = 0.7, RFC 8312) or, for `bbr`, a BBR-like mode: slow-start up to
//!   2 × the estimated BDP, which it then holds, ignoring random loss;
//! - loss: each segment is lost with the scenario's loss probability (seeded, per link) or
//!   when the bottleneck queue overflows; a lost chunk arrives one RTT late (fast
//!   retransmit) and holds back everything after it (in-order delivery); the window is
//!   reduced once per round trip (fast recovery);
//! - outages: nothing is acknowledged while the path is down; the retransmission timer
//!   fires at RTO = srtt + 200 ms after the last ACK and backs off exponentially (each
//!   interval doubled, capped at 120 s, as Linux caps it). Transmission resumes only when a
//!   timer fires with the path up, then from one segment in slow start: a lone TCP loses
//!   the time between the path's return and the next back-off expiry;
//! - TCP_INFO-like reports: srtt (with queueing delay), cwnd and the delivery rate.
//!
//! Not modelled: individual segments and SACK scoreboards (a chunk is lost or not as a
//! whole), receive-window autotuning's ramp (the window is at its maximum at once),
//! delayed ACKs, pacing inside an RTT, spurious RTOs, the ACK direction's own losses, and
//! competing flows on the bottleneck (the paths' queues are each one connection's).

/// Congestion control as the scenario names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CongestionControl {
    #[default]
    Cubic,
    Bbr,
}

impl CongestionControl {
    /// `bbr` (any version) is BBR-like; everything else behaves as Cubic, Linux's default.
    pub fn from_name(name: &str) -> Self {
        if name.starts_with("bbr") {
            CongestionControl::Bbr
        } else {
            CongestionControl::Cubic
        }
    }
}

/// What the TCP model of one link is configured with.
#[derive(Clone, Debug)]
pub struct TcpParams {
    pub cc: CongestionControl,
    /// Bottleneck queue in bytes.
    pub queue_bytes: u64,
    /// Seed of the link's loss draws.
    pub seed: u64,
}

pub const RTO_MIN_S: f64 = 0.2;
pub const RTO_MAX_S: f64 = 120.0;
const INITIAL_WINDOW_SEGMENTS: f64 = 10.0;
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

pub(crate) struct TcpState {
    params: TcpParams,
    mss: f64,
    pub cwnd: f64,
    ssthresh: f64,
    /// Cubic: window before the last reduction and when that epoch began (s).
    w_max: f64,
    epoch_s: f64,
    /// No further reduction before this time (one reduction per round trip).
    recovery_until_s: f64,
    pub srtt_s: Option<f64>,
    /// Transmission is held until this time (a pending retransmission timer).
    pub stalled_until_s: f64,
    /// When the path went down (`None` while up).
    down_at_s: Option<f64>,
    rng: u64,
    pub losses: u64,
    pub timeouts: u64,
}

impl TcpState {
    pub fn new(params: TcpParams, mss: usize) -> Self {
        let mss = mss as f64;
        TcpState {
            rng: params.seed ^ 0x5DEE_CE66_D1CE_4E5B,
            params,
            mss,
            cwnd: INITIAL_WINDOW_SEGMENTS * mss,
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            epoch_s: 0.0,
            recovery_until_s: 0.0,
            srtt_s: None,
            stalled_until_s: 0.0,
            down_at_s: None,
            losses: 0,
            timeouts: 0,
        }
    }

    fn uniform(&mut self) -> f64 {
        // splitmix64: deterministic per link.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Linux's pacing ratio (`tcp_pacing_ss_ratio` 200 %, `tcp_pacing_ca_ratio` 120 %):
    /// the sender paces at this × cwnd / srtt.
    pub fn pacing_gain(&self) -> f64 {
        if self.cwnd < self.ssthresh {
            2.0
        } else {
            1.2
        }
    }

    /// Queueing delay (s) a chunk meets when `in_flight` bytes are out at `rate` over a
    /// base round trip `rtt_s`, and whether it overflows the queue.
    pub fn queue(&self, in_flight: f64, rate: f64, rtt_s: f64) -> (f64, bool) {
        let backlog = (in_flight - rate * rtt_s).max(0.0);
        (backlog / rate, backlog > self.params.queue_bytes as f64)
    }

    /// Decides whether a chunk of `len` bytes is lost (random loss `p` per segment, or a
    /// queue overflow).
    pub fn lost(&mut self, len: usize, p: f64, overflow: bool) -> bool {
        if overflow {
            return true;
        }
        if p <= 0.0 {
            return false;
        }
        let segments = (len as f64 / self.mss).ceil().max(1.0);
        self.uniform() < 1.0 - (1.0 - p).powf(segments)
    }

    /// An ACK for `len` bytes at `t_s` that measured round trip `rtt_s`; `lost` when the
    /// chunk had to be retransmitted (its loss is detected now). `bdp` is the path's base
    /// bandwidth-delay product.
    pub fn on_ack(&mut self, t_s: f64, len: usize, rtt_s: f64, lost: bool, bdp: f64) {
        self.srtt_s = Some(self.srtt_s.map_or(rtt_s, |s| 0.875 * s + 0.125 * rtt_s));
        let bbr = self.params.cc == CongestionControl::Bbr;
        if lost && !bbr && t_s >= self.recovery_until_s {
            self.losses += 1;
            self.w_max = self.cwnd;
            self.cwnd = (self.cwnd * CUBIC_BETA).max(2.0 * self.mss);
            self.ssthresh = self.cwnd;
            self.epoch_s = t_s;
            self.recovery_until_s = t_s + self.srtt_s.unwrap_or(rtt_s);
            return;
        }
        let acked = len as f64;
        if bbr {
            let target = (2.0 * bdp).max(4.0 * self.mss);
            self.cwnd = if self.cwnd < target {
                (self.cwnd + acked).min(target)
            } else {
                target
            };
        } else if self.cwnd < self.ssthresh {
            self.cwnd += acked;
        } else {
            let k = (self.w_max * (1.0 - CUBIC_BETA) / self.mss / CUBIC_C).cbrt();
            let t = t_s - self.epoch_s;
            let target = (CUBIC_C * (t - k).powi(3)) * self.mss + self.w_max;
            // Never faster than slow start, never below Reno's additive increase.
            let reno = self.cwnd + self.mss * acked / self.cwnd;
            self.cwnd = target.clamp(reno, self.cwnd + acked);
        }
    }

    /// The retransmission timeout now (Linux: srtt + max(4·rttvar, 200 ms) ≈ srtt + 200 ms).
    fn rto_s(&self) -> f64 {
        (self.srtt_s.unwrap_or(RTO_MIN_S * 5.0) + RTO_MIN_S).min(RTO_MAX_S)
    }

    pub fn went_down(&mut self, t_s: f64) {
        self.down_at_s.get_or_insert(t_s);
    }

    /// The path is back at `t_s`: returns when transmission resumes. An outage shorter
    /// than a round trip costs one fast retransmit (a window reduction, resume one srtt
    /// later); a longer one waits for the retransmission timer, backed off while the path
    /// was down (the first expiry at or after `t_s`), and restarts from one segment.
    /// `None` if the path was not down.
    pub fn came_up(&mut self, t_s: f64) -> Option<f64> {
        let down = self.down_at_s.take()?;
        let srtt = self.srtt_s.unwrap_or(0.0);
        if t_s - down < srtt {
            self.on_ack(t_s, 0, srtt, true, 0.0);
            self.stalled_until_s = t_s + srtt;
            return Some(self.stalled_until_s);
        }
        let mut rto = self.rto_s();
        let mut fire = down + rto;
        self.timeouts += 1;
        while fire < t_s {
            self.timeouts += 1;
            rto = (2.0 * rto).min(RTO_MAX_S);
            fire += rto;
        }
        self.ssthresh = (self.cwnd * CUBIC_BETA).max(2.0 * self.mss);
        self.w_max = self.cwnd;
        self.cwnd = self.mss;
        self.epoch_s = fire;
        self.stalled_until_s = fire;
        Some(fire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(cc: CongestionControl) -> TcpState {
        TcpState::new(
            TcpParams {
                cc,
                queue_bytes: 100 * 1500,
                seed: 7,
            },
            1448,
        )
    }

    #[test]
    fn slow_start_doubles_then_cubic_reduces_by_beta() {
        let mut s = state(CongestionControl::Cubic);
        let w0 = s.cwnd;
        s.on_ack(0.01, w0 as usize, 0.01, false, 1e9);
        assert_eq!(s.cwnd, 2.0 * w0);
        s.on_ack(0.02, 1448, 0.01, true, 1e9);
        assert!((s.cwnd - 2.0 * w0 * CUBIC_BETA).abs() < 1e-6);
        // A second loss within the same round trip does not reduce again.
        s.on_ack(0.021, 1448, 0.01, true, 1e9);
        assert!((s.cwnd - 2.0 * w0 * CUBIC_BETA).abs() < 1e-6 || s.cwnd > 2.0 * w0 * CUBIC_BETA);
    }

    #[test]
    fn rto_backs_off_exponentially_from_the_outage_start() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 1448, 0.01, false, 1e9);
        s.went_down(1.0);
        // RTO = 0.21 s: fires at 1.21, 1.63, 2.47, 4.15 …; back at 2.5 → resumes at 4.15.
        let fire = s.came_up(2.5).expect("was down");
        assert!((fire - 4.15).abs() < 1e-9, "{fire}");
        assert_eq!(s.cwnd, 1448.0);
        assert_eq!(s.timeouts, 4);
    }

    #[test]
    fn the_back_off_interval_is_capped_at_120_s() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 1448, 0.01, false, 1e9);
        s.went_down(0.0);
        let fire = s.came_up(10_000.0).expect("was down");
        assert!(fire - 10_000.0 <= RTO_MAX_S + 1e-9, "{fire}");
    }

    #[test]
    fn bbr_ignores_random_loss_and_holds_two_bdp() {
        let mut s = state(CongestionControl::Bbr);
        for k in 0..100 {
            s.on_ack(k as f64 * 0.01, 100_000, 0.01, k % 3 == 0, 1e6);
        }
        assert_eq!(s.cwnd, 2e6);
        assert_eq!(s.losses, 0);
    }
}
