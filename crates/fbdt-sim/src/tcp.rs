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
//! - slow start (initial window 10 segments) up to ssthresh or until Cubic's HyStart ends
//!   it (`HyStart`), then Cubic growth
//!   (C = 0.4, β = 0.7, RFC 8312, never below its Reno-friendly window: 0.53 segment per
//!   round trip) or, for `bbr`, a BBR-like mode: slow-start up to 2 × the estimated BDP,
//!   which it then holds, ignoring random loss;
//! - loss: each segment is lost with the scenario's loss probability (seeded, per link) or
//!   when the bottleneck queue overflows (a chunk sent in a burst with others shares
//!   segments with them, as TCP packs queued writes: it risks `len / mss` segments' worth,
//!   a chunk alone at least one segment; a chunk the queue dropped no longer counts as
//!   queued, though it stays in the window until repaired); a lost chunk holds back everything after it
//!   (in-order delivery) until its retransmission arrives, and when that is depends on the
//!   window, as in Linux ([`TcpState::repair`]): with at least `tcp_reordering` (3) segments
//!   sent after the lost one within its round trip (the window's others; SACKs keep the ACK
//!   clock running) it is fast-retransmitted when its ACK was due (one round trip); with
//!   one or two, RACK marks it lost min_rtt / 4 later (`tcp_rack_reo_wnd`); with none (a
//!   tail, or a window of one segment) the tail-loss probe fires at 2·srtt + 2 ms
//!   (`tcp_schedule_loss_probe`; + `TCP_RTO_MIN` instead of 2 ms when it is the only
//!   packet out) unless the retransmission timer (srtt + 200 ms) comes first, which then
//!   repairs it. A retransmission is one segment and lost with the path's probability. A
//!   lost one is found by RACK one round trip after it left when a segment sent after it
//!   gets through, and something is sent after it only when SACKs keep coming once
//!   recovery began (PRR clocks out about one segment per SACK): fast retransmit with
//!   more than `tcp_reordering` segments behind the hole. Otherwise (the retransmission
//!   went alone: RACK's timer, a loss probe, or a timeout found the loss) only the
//!   retransmission timer finds it, re-armed when it was sent and doubled at each
//!   expiry. A timeout restarts the window from one segment in slow start
//!   (`tcp_enter_loss`); a repair without one reduces it once per loss episode (fast
//!   recovery, Cubic's β; the losses of chunks sent before a reduction are its episode's).
//!   A window grows only while the sender fills at least half of it
//!   (`tcp_is_cwnd_limited`; BBR aside). While a loss
//!   waits for its probe or timer with nothing after it, or behind a timeout, the window
//!   does not move (the sender sends nothing new); otherwise later segments' SACKs free it;
//! - outages: nothing is acknowledged while the path is down; the retransmission timer
//!   fires at RTO = srtt + 200 ms after the last ACK and backs off exponentially (each
//!   interval doubled, capped at 120 s, as Linux caps it). Transmission resumes only when a
//!   timer fires with the path up, then from one segment in slow start: a lone TCP loses
//!   the time between the path's return and the next back-off expiry;
//! - TCP_INFO-like reports: srtt (with queueing delay), cwnd and the delivery rate.
//!
//! Not modelled: individual segments and SACK scoreboards (a chunk is lost or not as a
//! whole; only its first lost segment's position is drawn, to count the segments after
//! it; a chunk's later lost segments are repaired with its first, their retransmissions
//! not drawn), PRR's pacing of the window during recovery (only whether it sends after a
//! retransmission; the window of a timed-out chunk is held), spurious-retransmission
//! undo, receive-window autotuning's ramp (the window is at its maximum at once), delayed
//! ACKs, pacing inside an RTT, spurious RTOs and the ACK direction's own losses. Competing
//! flows exist only at a scenario's shared bottleneck ([`crate::shared::SharedLink`]);
//! elsewhere each path's queue is one connection's.

/// Congestion control as the scenario names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CongestionControl {
    #[default]
    Cubic,
    Bbr,
    /// NewReno (`reno`): slow start without HyStart until a loss, then one segment per
    /// round trip, halved on a loss (RFC 5681). The controller RFC 6356's coupling is
    /// derived for, and what a competing flow runs to measure it on its own terms.
    Reno,
}

impl CongestionControl {
    /// `bbr` (any version) is BBR-like, `reno` NewReno; everything else behaves as Cubic,
    /// Linux's default.
    pub fn from_name(name: &str) -> Self {
        if name.starts_with("bbr") {
            CongestionControl::Bbr
        } else if name == "reno" {
            CongestionControl::Reno
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
/// Linux's `TCP_TIMEOUT_MIN` (2 jiffies; 2 ms at HZ = 1000), added to a loss probe's 2·srtt.
pub const TCP_TIMEOUT_MIN_S: f64 = 0.002;
/// Segments past a hole that make fast retransmit: `tcp_reordering`'s default,
/// `TCP_FASTRETRANS_THRESH`.
pub const DUPTHRESH: u32 = 3;
const INITIAL_WINDOW_SEGMENTS: f64 = 10.0;
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;
/// Reno's (and RFC 6356's coupled subflows') multiplicative decrease: the window halves.
const RENO_BETA: f64 = 0.5;
/// Segments per round trip an AIMD flow with Cubic's β adds to be as fair as Reno.
const RENO_FRIENDLY: f64 = 3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA);
/// HyStart looks only at windows of at least this many segments (`hystart_low_window`).
const HYSTART_LOW_WINDOW: f64 = 16.0;
/// ACKs at most this far apart make a train (`hystart_ack_delta_us`, 2 ms).
const HYSTART_ACK_DELTA_S: f64 = 0.002;
/// RTT samples a round's delay is judged on (`HYSTART_MIN_SAMPLES`).
const HYSTART_MIN_SAMPLES: u32 = 8;
/// The delay increase that ends slow start is delay_min / 8, clamped to 4–16 ms
/// (`HYSTART_DELAY_MIN`, `HYSTART_DELAY_MAX`).
const HYSTART_DELAY_MIN_S: f64 = 0.004;
const HYSTART_DELAY_MAX_S: f64 = 0.016;
/// Without a loss yet Cubic grows at least one segment per 20 ACKed (`bictcp_update`: `cnt`
/// capped at 20 while `last_max_cwnd` is 0), about 5 % per round trip.
const CUBIC_UNPROBED_CNT: f64 = 20.0;

/// An ACK the model delivers to [`TcpState::on_ack_at`].
#[derive(Clone, Copy, Debug)]
pub struct Ack {
    pub t_s: f64,
    /// Bytes it acknowledges (a chunk).
    pub len: usize,
    /// The chunk's round trip (queueing included).
    pub rtt_s: f64,
    /// The chunk had to be retransmitted (its loss is detected now).
    pub lost: bool,
    /// Its repair took a retransmission timeout.
    pub timed_out: bool,
    /// When the chunk was sent (s): a loss of a chunk sent before the last reduction is
    /// part of that reduction's episode.
    pub sent_s: f64,
}

/// How a lost chunk is repaired ([`TcpState::repair`]).
#[derive(Clone, Copy, Debug)]
pub struct Repair {
    /// When the retransmission that gets through leaves the sender (s).
    pub resend_s: f64,
    /// Retransmission timeouts it took (0: fast retransmit, RACK or a loss probe).
    pub timeouts: u32,
}

pub(crate) struct TcpState {
    params: TcpParams,
    mss: f64,
    pub cwnd: f64,
    ssthresh: f64,
    /// Cubic: window before the last reduction and when that epoch began (s).
    w_max: f64,
    epoch_s: f64,
    /// When the last reduction began its loss episode (s): a loss of a chunk sent before
    /// it belongs to that episode and reduces nothing more (Linux's recovery lasts until
    /// everything sent before it began is acknowledged, `high_seq`; one reduction per
    /// episode, `tcp_enter_recovery`, and `tcp_enter_loss` keeps the episode's ssthresh).
    episode_from_s: f64,
    pub srtt_s: Option<f64>,
    /// Transmission is held until this time (a pending retransmission timer).
    pub stalled_until_s: f64,
    /// When the path went down (`None` while up).
    down_at_s: Option<f64>,
    rng: u64,
    pub losses: u64,
    pub timeouts: u64,
    /// The last retransmission timeout that restarted the window (s).
    timed_out_at_s: f64,
    hystart: HyStart,
    /// Cubic's origin when HyStart ended slow start before any loss: the window then, the
    /// cubic curve's flat point (K = 0), as `bictcp_update` starts an epoch with
    /// `last_max_cwnd` ≤ cwnd.
    unprobed_origin: f64,
    /// Coupled mode (RFC 6356 LIA, [`crate::shared::lia_factor`]): the factor the next
    /// ACK's Reno increase is scaled by (`None`: uncoupled). A coupled path runs LIA as
    /// Linux's `mptcp_coupled` does, whatever the scenario's controller: slow start without
    /// HyStart until the first loss, then `min(alpha · acked · mss / cwnd_total,
    /// acked · mss / cwnd_i)` per ACK, halved on a loss (RFC 6356 §3 couples only the
    /// increase; the decrease is standard TCP's). BBR paths are not coupled.
    pub coupling: Option<f64>,
    /// A coupled Cubic path runs coupled Cubic instead of LIA ([`crate::Coupling::Cubic`]):
    /// Cubic's slow start (HyStart), β and curve, with the curve's C and the Reno-friendly
    /// floor scaled by the coupling factor, so the paths' windows together grow as one
    /// Cubic flow's.
    pub cubic_coupled: bool,
    /// Bytes in flight when the ACK being handled was sent for (the window before it
    /// was acknowledged), set by the link before [`TcpState::on_ack_at`]: a window grows
    /// only while it is cwnd-limited ([`TcpState::cwnd_limited`]). Infinite until told
    /// (a sender that fills its window).
    pub flight_bytes: f64,
}

/// Cubic's HyStart (`hystart_update`, net/ipv4/tcp_cubic.c; on by default with both
/// detections): slow start ends (ssthresh = cwnd) within the round trip whose ACK train
/// lasts longer than half the least RTT, or whose first RTT samples exceed it by
/// delay_min / 8 (4–16 ms). Without it the model's slow start doubled on until the queue
/// overflowed, a round trip late, and left Cubic at twice the window Linux reaches
/// (`tc-delay-wigig`'s WiFi: 2470 segments where the testbed's kernel peaked at ≈ 1350;
/// the MPTCP send buffer grows with that peak, `crate::sndbuf`).
///
/// The model sends chunks paced, so its ACKs do not come in trains; the train is what an
/// unpaced Linux sender's would be (Cubic without fq does not pace): in slow start a
/// round's ACKs come back at the bottleneck's rate, so the train has lasted (bytes ACKed
/// in the round) / rate, and it breaks where the model's ACKs leave a gap of more than
/// 2 ms beyond the chunk's own time at that rate (an application-limited sender) or where
/// one ACK per two segments is already 2 ms apart at that rate.
#[derive(Clone, Debug)]
struct HyStart {
    found: bool,
    /// The round ends with the first ACK this late: one srtt after it began (for
    /// "snd_una passed the round's end_seq").
    round_end_s: f64,
    /// Bytes ACKed this round while its train was unbroken; `None` once it broke.
    train_bytes: Option<f64>,
    last_ack_s: f64,
    /// RTT samples this round (an ACK per two segments) and the least of the first ones.
    samples: u32,
    curr_rtt_s: f64,
    delay_min_s: f64,
}

impl HyStart {
    fn new() -> Self {
        HyStart {
            found: false,
            round_end_s: f64::NEG_INFINITY,
            train_bytes: None,
            last_ack_s: f64::NEG_INFINITY,
            samples: 0,
            curr_rtt_s: f64::INFINITY,
            delay_min_s: f64::INFINITY,
        }
    }

    /// `ack` with the window at `cwnd` bytes of `mss`-byte segments, the connection's
    /// srtt `srtt_s` and the bottleneck's rate `rate` (bytes/s): whether slow start ends now.
    fn exits(&mut self, ack: &Ack, mss: f64, cwnd: f64, srtt_s: f64, rate: f64) -> bool {
        let (t_s, rtt_s, len) = (ack.t_s, ack.rtt_s, ack.len as f64);
        let segments = (len / mss).ceil().max(1.0);
        let cwnd_segments = cwnd / mss;
        self.delay_min_s = self.delay_min_s.min(rtt_s);
        // A path that is down has no rate to clock a train: the delay rule alone.
        let rate = if rate > 0.0 { rate } else { f64::INFINITY };
        let own_s = len / rate;
        if t_s >= self.round_end_s {
            self.round_end_s = t_s + srtt_s;
            self.train_bytes = Some(0.0);
            self.last_ack_s = t_s - own_s;
            self.samples = 0;
            self.curr_rtt_s = f64::INFINITY;
        }
        if cwnd_segments < HYSTART_LOW_WINDOW {
            return false;
        }
        let per_ack_s = 2.0 * len / segments / rate;
        self.train_bytes = self
            .train_bytes
            .filter(|_| t_s - self.last_ack_s - own_s <= HYSTART_ACK_DELTA_S && per_ack_s <= HYSTART_ACK_DELTA_S)
            .map(|b| b + len);
        self.last_ack_s = t_s;
        if self.train_bytes.is_some_and(|b| b / rate > self.delay_min_s / 2.0) {
            return true;
        }
        if self.samples < HYSTART_MIN_SAMPLES {
            self.curr_rtt_s = self.curr_rtt_s.min(rtt_s);
            self.samples += (segments / 2.0).ceil() as u32;
            if self.samples < HYSTART_MIN_SAMPLES {
                return false;
            }
        }
        let thresh = (self.delay_min_s / 8.0).clamp(HYSTART_DELAY_MIN_S, HYSTART_DELAY_MAX_S);
        self.curr_rtt_s > self.delay_min_s + thresh
    }
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
            episode_from_s: f64::NEG_INFINITY,
            srtt_s: None,
            stalled_until_s: 0.0,
            down_at_s: None,
            losses: 0,
            timeouts: 0,
            timed_out_at_s: f64::NEG_INFINITY,
            hystart: HyStart::new(),
            unprobed_origin: 0.0,
            coupling: None,
            cubic_coupled: false,
            flight_bytes: f64::INFINITY,
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
    /// queue overflow): `Some(k)` when it is, `k` being how many of its segments follow
    /// the first lost one (they can raise duplicate ACKs / SACKs for it). One draw: the
    /// first lost segment's index is the draw's geometric quantile, so a lossless chunk
    /// draws exactly as before.
    ///
    /// A `packed` chunk left in the same burst as others (back to back with the one before
    /// it, or with more queued behind it): TCP packed them into full segments, so it risks
    /// `len / mss` segments' worth of loss, not a whole segment of its own. Without that, a stream of 36-byte frames queued behind a timeout (FBDT's
    /// ALIGN frames) drew a loss per frame — some forty per packet on a 5 % path — and every
    /// one became another timeout at a one-segment window.
    pub fn lost(&mut self, len: usize, p: f64, overflow: bool, packed: bool) -> Option<u32> {
        let exact = len as f64 / self.mss;
        let segments = exact.ceil().max(1.0);
        if overflow {
            // The queue's tail drops the chunk from its first segment on.
            return Some(segments as u32 - 1);
        }
        if p <= 0.0 {
            return None;
        }
        let u = self.uniform();
        let at_risk = if packed { exact } else { segments };
        if u >= 1.0 - (1.0 - p).powf(at_risk) {
            return None;
        }
        // P(first loss at j) ∝ (1 − p)^j · p: j = ⌊ln(1 − u) / ln(1 − p)⌋ < segments.
        let first = ((1.0 - u).ln() / (1.0 - p).ln()).floor().clamp(0.0, segments - 1.0);
        Some((segments - 1.0 - first) as u32)
    }

    /// The congestion window (segments) when a chunk's segment that has `after` more of
    /// its `len` bytes' segments behind it leaves, the chunk's first segment having left
    /// with a window of `first` segments. A chunk is larger than a small window: a real
    /// sender sends its later segments as ACKs of the earlier ones come back, and in slow
    /// start each ACKed segment opens the window by one (`tcp_slow_start`), so the k-th
    /// segment leaves with about `first` + k/2 — up to ssthresh. After a timeout (window
    /// one segment) a loss late in a 16 KiB chunk therefore has segments after it to raise
    /// SACKs, as it would on Linux, instead of always waiting for the retransmission
    /// timer. In congestion avoidance (and BBR's held window) the window stays `first`.
    pub fn window_at_segment(&self, first: u32, len: usize, after: u32) -> u32 {
        let segments = (len as f64 / self.mss).ceil().max(1.0) as u32;
        let index = segments.saturating_sub(1).saturating_sub(after);
        let slow_start = self.params.cc != CongestionControl::Bbr && self.cwnd < self.ssthresh;
        if !slow_start {
            return first;
        }
        let cap = (self.ssthresh / self.mss).floor().max(f64::from(first));
        (f64::from(first + index / 2)).min(cap) as u32
    }

    /// How a chunk lost at `sent_s` is repaired, the way Linux finds the loss (see the
    /// module doc): `follow` segments were sent after the lost one within its round trip
    /// (the window's others, or what there was to send), `window_segments` is the
    /// congestion window in segments, `rtt_s` the chunk's round trip (queueing included),
    /// `min_rtt_s` the path's base round trip, `p` the path's loss per segment (each
    /// retransmission is one segment and is lost with it).
    pub fn repair(
        &mut self,
        sent_s: f64,
        rtt_s: f64,
        min_rtt_s: f64,
        follow: u32,
        window_segments: u32,
        p: f64,
    ) -> Repair {
        let srtt = self.srtt_s.unwrap_or(rtt_s);
        let mut rto = self.rto_s();
        let mut timeouts = 0;
        let mut resend_s = if follow >= DUPTHRESH {
            // Fast retransmit: `tcp_reordering` (TCP_FASTRETRANS_THRESH = 3) SACKed
            // segments past the hole; RACK's reordering window is then zero
            // (`tcp_rack_reo_wnd`): marked lost when their ACKs arrive.
            sent_s + rtt_s
        } else if follow >= 1 {
            // Fewer SACKed segments than `tcp_reordering`: RACK waits its reordering
            // window, min_rtt / 4 (`tcp_rack_reo_wnd`, the REO timer), past the later
            // segment's ACK before it marks the hole lost.
            sent_s + rtt_s + min_rtt_s / 4.0
        } else {
            // Nothing follows it (a tail, or a window of one segment): the tail-loss
            // probe (`tcp_schedule_loss_probe`) at 2·srtt + TCP_TIMEOUT_MIN (2 jiffies,
            // 2 ms at HZ = 1000), or 2·srtt + TCP_RTO_MIN when it is the only packet
            // out (a delayed ACK may be pending), unless the RTO comes first.
            let extra = if window_segments > 1 {
                TCP_TIMEOUT_MIN_S
            } else {
                RTO_MIN_S
            };
            let pto = 2.0 * srtt + extra;
            if pto < rto {
                sent_s + pto
            } else {
                timeouts += 1;
                let t = sent_s + rto;
                rto = (2.0 * rto).min(RTO_MAX_S);
                t
            }
        };
        // A retransmission is lost as any segment is. RACK marks it lost when a segment
        // sent after it is SACKed (`tcp_rack_detect_loss` compares send times, so a
        // retransmission counts from when it left), with no reordering window in
        // recovery (`tcp_rack_reo_wnd`): one round trip after it left. Something is sent
        // after it only when SACKs keep arriving once recovery has begun: PRR
        // (`tcp_cwnd_reduction`) sends about one segment per segment newly delivered, the
        // retransmission first. That is so when fast retransmit found the loss at the
        // third SACK with more segments out behind it (`follow` > 3); when RACK's timer
        // or a loss probe found it, the segments after the hole were all SACKed already
        // and the retransmission leaves alone. And the segment sent after it must itself
        // get through. Otherwise only the retransmission timer finds it (re-armed when
        // the retransmission leaves, `tcp_xmit_retransmit_queue`), doubled at each expiry
        // (`tcp_retransmit_timer`: icsk_backoff++); after a timeout the window is one
        // segment (`tcp_enter_loss`, no loss probe outside the Open state), so a
        // retransmission lost then is always found by the backed-off timer.
        let clocked = follow > DUPTHRESH;
        while p > 0.0 && self.uniform() < p {
            if clocked && timeouts == 0 && self.uniform() >= p {
                resend_s += rtt_s;
                continue;
            }
            timeouts += 1;
            resend_s += rto;
            rto = (2.0 * rto).min(RTO_MAX_S);
        }
        self.timeouts += timeouts as u64;
        Repair { resend_s, timeouts }
    }

    /// An ACK for `len` bytes at `t_s` that measured round trip `rtt_s` (so sent at
    /// `t_s − rtt_s`); `lost` when the chunk had to be retransmitted (its loss is detected
    /// now). `bdp` is the path's base
    /// bandwidth-delay product; the bottleneck's rate is not given (HyStart's ACK train is
    /// not measured, its delay rule is).
    pub fn on_ack(&mut self, t_s: f64, len: usize, rtt_s: f64, lost: bool, bdp: f64) {
        let ack = Ack {
            t_s,
            len,
            rtt_s,
            lost,
            timed_out: false,
            sent_s: t_s - rtt_s,
        };
        self.on_ack_at(ack, bdp, f64::INFINITY)
    }

    /// An ACK (`ack.timed_out` when its chunk's repair took a retransmission timeout: the
    /// window restarts from one segment, `tcp_enter_loss`) on a path whose bottleneck
    /// drains `rate` bytes/s with a base bandwidth-delay product of `bdp` bytes.
    pub fn on_ack_at(&mut self, ack: Ack, bdp: f64, rate: f64) {
        let Ack {
            t_s,
            len,
            rtt_s,
            lost,
            timed_out,
            sent_s,
        } = ack;
        // Sent after the last reduction began: a loss now is a new episode.
        let new_episode = sent_s >= self.episode_from_s;
        self.srtt_s = Some(self.srtt_s.map_or(rtt_s, |s| 0.875 * s + 0.125 * rtt_s));
        let bbr = self.params.cc == CongestionControl::Bbr;
        if timed_out {
            // `tcp_enter_loss`: ssthresh from the congestion control (Cubic: β · cwnd,
            // Reno and LIA: half) — unless the chunk belongs to the episode a reduction
            // already began (Recovery: the episode's ssthresh stays) — cwnd one segment,
            // slow start from the retransmission on; a new episode from here.
            self.losses += 1;
            if new_episode {
                self.ssthresh = (self.cwnd * self.beta()).max(2.0 * self.mss);
                self.w_max = self.cwnd;
            }
            self.cwnd = self.mss;
            self.epoch_s = t_s;
            self.episode_from_s = t_s;
            self.timed_out_at_s = t_s;
            return;
        }
        if t_s < self.timed_out_at_s {
            // SACKed before the timeout (delivered then, acknowledged cumulatively now):
            // no growth from it (Linux counts a segment's delivery once).
            return;
        }
        if lost && !bbr && new_episode {
            // One reduction per loss episode (not per srtt: the srtt lags a round trip
            // that grows while a queue overflows, and the episode's later losses are
            // found after it).
            self.losses += 1;
            self.w_max = self.cwnd;
            self.cwnd = (self.cwnd * self.beta()).max(2.0 * self.mss);
            self.ssthresh = self.cwnd;
            self.epoch_s = t_s;
            self.episode_from_s = t_s;
            return;
        }
        let acked = len as f64;
        // Every controller but BBR returns unless `tcp_is_cwnd_limited` (`bictcp_cong_avoid`,
        // `tcp_reno_cong_avoid`, `mptcp_ccc_cong_avoid`): a window the sender does not fill
        // does not grow. Cubic's HyStart still samples the ACK (`hystart_update` runs from
        // `bictcp_acked`, before that check).
        let grows = bbr || self.cwnd_limited();
        if bbr {
            let target = (2.0 * bdp).max(4.0 * self.mss);
            self.cwnd = if self.cwnd < target {
                (self.cwnd + acked).min(target)
            } else {
                target
            };
        } else if self.cwnd < self.ssthresh {
            let srtt = self.srtt_s.unwrap_or(rtt_s);
            if self.hystart_on()
                && !self.hystart.found
                && len > 0
                && self.hystart.exits(&ack, self.mss, self.cwnd, srtt, rate)
            {
                self.hystart.found = true;
                self.ssthresh = self.cwnd;
                self.epoch_s = t_s;
                self.unprobed_origin = self.cwnd;
            } else if grows {
                self.cwnd += acked;
            }
        } else if !grows {
            // Not cwnd-limited: congestion avoidance leaves the window as it is.
        } else if let Some(f) = self.lia() {
            // RFC 6356 §3: Reno's acked · mss / cwnd_i scaled by min(alpha · cwnd_i /
            // cwnd_total, 1) — exactly `shared::lia_increase`.
            self.cwnd += f.clamp(0.0, 1.0) * acked * self.mss / self.cwnd;
        } else if self.params.cc == CongestionControl::Reno {
            self.cwnd += acked * self.mss / self.cwnd;
        } else {
            let f = self.coupling.map_or(1.0, |f| f.clamp(0.0, 1.0));
            self.avoid_congestion(t_s, acked, f);
        }
    }

    /// The multiplicative decrease in force: Cubic's β, or Reno's half for Reno and for a
    /// coupled (LIA) path.
    fn beta(&self) -> f64 {
        if self.lia().is_some() || self.params.cc == CongestionControl::Reno {
            RENO_BETA
        } else {
            CUBIC_BETA
        }
    }

    /// HyStart is Cubic's (`tcp_cubic.c`): Reno and the coupled controllers (Linux's
    /// `mptcp_coupled`, `tcp_slow_start` alone) slow-start until a loss.
    fn hystart_on(&self) -> bool {
        self.params.cc == CongestionControl::Cubic && self.lia().is_none()
    }

    /// Linux's `tcp_is_cwnd_limited` in slow start (cwnd < 2 × packets out), used in
    /// congestion avoidance too: a sender that keeps less than half its window in flight
    /// (FBDT's send limit, an application-limited sender) is not limited by it. Every
    /// controller but BBR checks it, as in Linux (until issue 40's round 5 only coupled
    /// paths did).
    fn cwnd_limited(&self) -> bool {
        2.0 * self.flight_bytes >= self.cwnd
    }

    /// The coupled increase's factor when this path runs LIA (coupled, not BBR, not
    /// coupled Cubic).
    fn lia(&self) -> Option<f64> {
        let cubic = self.cubic_coupled && self.params.cc == CongestionControl::Cubic;
        self.coupling.filter(|_| self.params.cc != CongestionControl::Bbr && !cubic)
    }

    /// Cubic's congestion avoidance for `acked` bytes at `t_s`, its additive growth (the
    /// curve's C, the Reno-friendly floor) scaled by `f`: 1 uncoupled, the coupling factor
    /// `min(alpha · cwnd_i / cwnd_total, 1)` for coupled Cubic. The curve's C scaled by
    /// `f ≈ cwnd_i / cwnd_total` makes every path's K the aggregate's, `∛(W_total (1 − β) / C)`,
    /// and the paths' curves add up to one flow's, `C (t − K)³`. The growth before any loss
    /// (one segment per 20 ACKed, ≈ 5 % a round trip) is proportional to the window and
    /// adds up to 5 % of the aggregate unscaled.
    fn avoid_congestion(&mut self, t_s: f64, acked: f64, f: f64) {
        // A factor of 0 (a window of nothing against the others) would make K infinite.
        let c = CUBIC_C * f.max(1e-3);
        if self.w_max == 0.0 {
            // Congestion avoidance before any loss (HyStart ended slow start): the cubic
            // curve from the window then (K = 0; Linux adds delay_min to the epoch's age),
            // at least one segment per 20 ACKed.
            let t = t_s - self.epoch_s + self.hystart.delay_min_s.min(1.0);
            let target = c * t.powi(3) * self.mss + self.unprobed_origin;
            let floor = self.cwnd + acked / CUBIC_UNPROBED_CNT;
            self.cwnd = target.clamp(floor, self.cwnd + acked);
        } else {
            let k = (self.w_max * (1.0 - CUBIC_BETA) / self.mss / c).cbrt();
            let t = t_s - self.epoch_s;
            let target = (c * (t - k).powi(3)) * self.mss + self.w_max;
            // Never faster than slow start, never below the Reno-friendly window Cubic
            // keeps (`tcp_friendliness`, RFC 8312 §4.2): an AIMD flow with Cubic's β
            // grows by 3(1 − β)/(1 + β) ≈ 0.53 segment per round trip, not Reno's one.
            // It is what a small window grows by: the cubic curve is flat for K
            // seconds (1.4 s from a w_max of 4 segments), a lossy path's whole epoch.
            let reno = self.cwnd + f * RENO_FRIENDLY * self.mss * acked / self.cwnd;
            self.cwnd = target.clamp(reno, self.cwnd + acked);
        }
    }

    /// The retransmission timeout now (Linux: srtt + max(4·rttvar, 200 ms) ≈ srtt + 200 ms).
    fn rto_s(&self) -> f64 {
        (self.srtt_s.unwrap_or(RTO_MIN_S * 5.0) + RTO_MIN_S).min(RTO_MAX_S)
    }

    /// A fresh connection in place of this one (the runtime replaced a stalled one):
    /// initial window, no RTT sample, no timer pending. The loss draws and counters go on.
    pub fn fresh(&mut self) {
        self.cwnd = INITIAL_WINDOW_SEGMENTS * self.mss;
        self.ssthresh = f64::INFINITY;
        self.w_max = 0.0;
        self.epoch_s = 0.0;
        self.episode_from_s = f64::NEG_INFINITY;
        self.srtt_s = None;
        self.stalled_until_s = 0.0;
        self.down_at_s = None;
        self.timed_out_at_s = f64::NEG_INFINITY;
        self.hystart = HyStart::new();
        self.unprobed_origin = 0.0;
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
        self.ssthresh = (self.cwnd * self.beta()).max(2.0 * self.mss);
        self.w_max = self.cwnd;
        self.cwnd = self.mss;
        self.epoch_s = fire;
        self.episode_from_s = fire;
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

    /// The ACK of a 16 KiB chunk at `t_s` whose repair took a retransmission timeout.
    fn time_out_at(s: &mut TcpState, t_s: f64) {
        let ack = Ack {
            t_s,
            len: 16_384,
            rtt_s: 0.002,
            lost: true,
            timed_out: true,
            sent_s: t_s - 0.002,
        };
        s.on_ack_at(ack, 1e9, f64::INFINITY);
    }

    /// Slow start on a path of `rate` bytes/s and base round trip `rtt_s`, ACKs of 16 KiB
    /// chunks coming back at the bottleneck's pace (as an unpaced sender's do), `gap_s`
    /// more between chunks: the window each round trip began with, until slow start ends
    /// (or 14 rounds: 10 segments become 160 000).
    fn slow_start_rounds(s: &mut TcpState, rate: f64, rtt_s: f64, gap_s: f64) -> Vec<f64> {
        let chunk = 16_384.0;
        let mut t = 0.0;
        let mut rounds = Vec::new();
        while s.cwnd < s.ssthresh && rounds.len() < 14 {
            rounds.push(s.cwnd);
            let start = t;
            let mut sent = 0.0;
            let window = s.cwnd;
            while sent < window && s.cwnd < s.ssthresh {
                t += chunk / rate + gap_s;
                let ack = Ack {
                    t_s: t,
                    len: chunk as usize,
                    rtt_s,
                    lost: false,
                    timed_out: false,
                    sent_s: t - rtt_s,
                };
                s.on_ack_at(ack, rate * rtt_s, rate);
                sent += chunk;
            }
            t = t.max(start + rtt_s);
        }
        rounds
    }

    /// HyStart's ACK train (`hystart_update`): slow start ends within the round whose
    /// ACKs, back to back, have come for half the least round trip — the window then
    /// holds between one and one and a half bandwidth-delay products, far below where
    /// doubling on until the queue overflows would take it.
    #[test]
    fn hystart_ends_slow_start_when_a_rounds_ack_train_lasts_half_a_round_trip() {
        let mut s = state(CongestionControl::Cubic);
        let (rate, rtt) = (70.9e6, 0.004);
        let bdp = rate * rtt;
        let rounds = slow_start_rounds(&mut s, rate, rtt, 0.0);
        assert!(rounds.len() < 14, "slow start never ended: {rounds:?}");
        assert_eq!(s.ssthresh, s.cwnd);
        assert!(s.cwnd >= bdp && s.cwnd < 1.6 * bdp, "{} of a BDP {bdp}", s.cwnd);
        assert_eq!(s.losses, 0);
    }

    /// ACKs more than 2 ms apart (an application-limited sender) make no train: only the
    /// delay rule can end slow start, and with no queue it does not.
    #[test]
    fn hystart_needs_back_to_back_acks() {
        let mut s = state(CongestionControl::Cubic);
        let rounds = slow_start_rounds(&mut s, 70.9e6, 0.004, 0.0025);
        assert_eq!(rounds.len(), 14, "slow start ended at {}", s.cwnd);
        assert!(s.ssthresh.is_infinite());
    }

    /// HyStart's delay rule: once the window holds 16 segments, a round whose first eight
    /// RTT samples all exceed the least RTT by delay_min / 8 (at least 4 ms) ends slow
    /// start; a smaller rise does not.
    #[test]
    fn hystart_ends_slow_start_when_the_round_trip_grows() {
        let run = |rise_s: f64| {
            let mut s = state(CongestionControl::Cubic);
            let mut t = 0.0;
            for k in 0..200 {
                let rtt = 0.02 + if k >= 20 { rise_s } else { 0.0 };
                t += 0.001;
                s.on_ack(t, 1448, rtt, false, 1e9);
                if s.cwnd >= s.ssthresh {
                    break;
                }
            }
            s
        };
        let rose = run(0.0045);
        assert_eq!(rose.ssthresh, rose.cwnd, "a 4.5 ms rise ends slow start");
        assert!(rose.cwnd >= 16.0 * 1448.0);
        let small = run(0.0035);
        assert!(small.ssthresh.is_infinite(), "a 3.5 ms rise does not");
    }

    /// After HyStart, before any loss, Cubic starts its curve at the window HyStart left
    /// (no concave approach) and grows at least one segment per 20 ACKed, ≈ 5 % per round.
    #[test]
    fn after_hystart_cubic_grows_at_least_five_percent_a_round() {
        let mut s = state(CongestionControl::Cubic);
        let (rate, rtt) = (70.9e6, 0.004);
        slow_start_rounds(&mut s, rate, rtt, 0.0);
        let start = s.cwnd;
        let mut t = 1.0;
        for _ in 0..10 {
            let n = (s.cwnd / 1448.0).round() as usize;
            for _ in 0..n {
                s.on_ack(t, 1448, rtt, false, rate * rtt);
            }
            t += rtt;
        }
        let growth = s.cwnd / start;
        assert!(growth >= 1.05f64.powi(10) * 0.98, "{growth}");
        assert!(growth < 2.0, "{growth}: not slow start");
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

    /// In congestion avoidance with a window too small for the cubic curve to move (its
    /// K is seconds), the window grows at the Reno-friendly rate: 3(1 − β)/(1 + β)
    /// ≈ 0.53 segment per round trip's worth of ACKs.
    #[test]
    fn a_small_cubic_window_grows_at_the_reno_friendly_rate() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 4 * 1448, 0.002, false, 1e9);
        s.on_ack(0.01, 1448, 0.002, true, 1e9);
        let start = s.cwnd;
        assert!(start < s.ssthresh + 1e-9, "congestion avoidance");
        // Ten round trips of ACKs, one segment each, 2 ms apart.
        let mut t = 0.02;
        for _ in 0..10 {
            let n = (s.cwnd / 1448.0).round() as usize;
            for _ in 0..n {
                s.on_ack(t, 1448, 0.002, false, 1e9);
            }
            t += 0.002;
        }
        let grown = (s.cwnd - start) / 1448.0;
        assert!((grown - 10.0 * RENO_FRIENDLY).abs() < 1.0, "{grown} segments");
    }

    /// A coupled path runs RFC 6356 LIA whatever the scenario's controller: slow start
    /// goes on where Cubic's HyStart would end it, a loss halves the window, and in
    /// congestion avoidance an ACK adds Reno's acked · mss / cwnd scaled by the coupling
    /// factor — with the factor 1/2 of two equal paths, a round trip's ACKs add half a
    /// segment (`shared::lia_increase`).
    #[test]
    fn a_coupled_path_runs_lia_on_a_reno_increase() {
        let (rate, rtt) = (70.9e6, 0.004);
        let mut cubic = state(CongestionControl::Cubic);
        slow_start_rounds(&mut cubic, rate, rtt, 0.0);
        assert!(cubic.ssthresh.is_finite(), "HyStart ends Cubic's slow start");
        let mut s = state(CongestionControl::Cubic);
        s.coupling = Some(1.0);
        // A sender that fills its window (`a_window_grows_only_when_cwnd_limited`).
        s.flight_bytes = f64::INFINITY;
        let rounds = slow_start_rounds(&mut s, rate, rtt, 0.0);
        assert_eq!(rounds.len(), 14, "no HyStart: slow start until a loss");
        assert!(s.ssthresh.is_infinite());
        let w = s.cwnd;
        s.on_ack(1.0, 1448, rtt, true, rate * rtt);
        assert!((s.cwnd - w * RENO_BETA).abs() < 1e-6, "halved");
        s.coupling = Some(0.5);
        let start = s.cwnd;
        let n = (start / 1448.0).round() as usize;
        for k in 0..n {
            s.on_ack(1.1 + k as f64 * 1e-5, 1448, rtt, false, rate * rtt);
        }
        let grown = (s.cwnd - start) / 1448.0;
        assert!((grown - 0.5).abs() < 0.01, "{grown} segments in a round trip");
        // BBR is not coupled: it keeps its two BDP.
        let mut b = state(CongestionControl::Bbr);
        b.coupling = Some(0.5);
        for k in 0..100 {
            b.on_ack(k as f64 * 0.01, 100_000, 0.01, false, 1e6);
        }
        assert_eq!(b.cwnd, 2e6);
    }

    /// One ACK at `t` with `share` of the window in flight: did the window grow?
    fn grows_with(s: &mut TcpState, t: f64, share: f64) -> bool {
        let before = s.cwnd;
        s.flight_bytes = share * before;
        s.on_ack(t, 1448, 0.01, false, 1e9);
        s.cwnd > before
    }

    /// A window whose sender keeps less than half of it in flight (FBDT's send limit, an
    /// application-limited sender) does not grow, in slow start or after; filled, it grows.
    /// Coupled (Linux's `tcp_is_cwnd_limited` in `mptcp_ccc_cong_avoid`) and uncoupled
    /// (`bictcp_cong_avoid`, `tcp_reno_cong_avoid`) alike; BBR is not held.
    #[test]
    fn a_window_grows_only_when_cwnd_limited() {
        let grows = grows_with;
        for (cc, coupling) in [
            (CongestionControl::Cubic, None),
            (CongestionControl::Reno, None),
            (CongestionControl::Cubic, Some(1.0)),
        ] {
            let mut s = state(cc);
            s.coupling = coupling;
            let name = format!("{cc:?} coupled {coupling:?}");
            assert!(!grows(&mut s, 0.01, 0.4), "{name}: slow start, not cwnd-limited");
            assert!(grows(&mut s, 0.02, 1.0), "{name}: slow start, cwnd-limited");
            s.on_ack(0.03, 1448, 0.01, true, 1e9);
            assert!(s.cwnd >= s.ssthresh, "{name}: congestion avoidance");
            assert!(!grows(&mut s, 0.1, 0.4), "{name}: congestion avoidance, not cwnd-limited");
            assert!(grows(&mut s, 0.2, 1.0), "{name}: congestion avoidance, cwnd-limited");
        }
        let mut b = state(CongestionControl::Bbr);
        b.flight_bytes = 0.0;
        b.on_ack(0.01, 1448, 0.01, false, 1e6);
        assert!(b.cwnd > INITIAL_WINDOW_SEGMENTS * 1448.0, "BBR is not held");
    }

    /// One reduction per loss episode (Linux's recovery lasts until everything sent before
    /// it began is acknowledged, `high_seq`): a loss of a chunk sent before the last
    /// reduction does not reduce again, however late it is found — the round trip grows
    /// while a queue overflows, and an srtt-long guard ran out before the episode's last
    /// loss was found. A chunk sent after the reduction starts a new episode. A timeout
    /// within an episode restarts from one segment but keeps its ssthresh
    /// (`tcp_enter_loss` in Recovery).
    #[test]
    fn a_loss_episode_reduces_the_window_once() {
        for cc in [CongestionControl::Cubic, CongestionControl::Reno] {
            let mut s = state(cc);
            s.on_ack(0.01, 200_000, 0.01, false, 1e9);
            // Sent at 0.99, found at 1.0: the episode's first loss.
            s.on_ack(1.0, 1448, 0.01, true, 1e9);
            let cut = s.cwnd;
            assert!(cut < 200_000.0, "{cc:?}: reduced");
            // Sent at 0.995, before the reduction, found at 1.05 (the round trip grew to
            // 55 ms in the overflowing queue): the same episode.
            s.on_ack(1.05, 1448, 0.055, true, 1e9);
            assert!(s.cwnd >= cut, "{cc:?}: reduced twice in one episode ({} < {cut})", s.cwnd);
            assert_eq!(s.losses, 1, "{cc:?}");
            // Sent at 1.05, after it: a new episode.
            let before = s.cwnd;
            s.on_ack(1.1, 1448, 0.05, true, 1e9);
            assert!(s.cwnd < before, "{cc:?}: a new episode reduces");
            assert_eq!(s.losses, 2, "{cc:?}");
            // A timeout of a chunk sent before that reduction: one segment, same ssthresh.
            let ssthresh = s.ssthresh;
            let ack = Ack {
                t_s: 1.4,
                len: 1448,
                rtt_s: 0.32,
                lost: true,
                timed_out: true,
                // Before the reduction at 1.1.
                sent_s: 1.08,
            };
            s.on_ack_at(ack, 1e9, f64::INFINITY);
            assert_eq!(s.cwnd, 1448.0, "{cc:?}");
            assert_eq!(s.ssthresh, ssthresh, "{cc:?}: no second reduction of ssthresh");
        }
    }

    /// Coupled Cubic: a path with the coupling factor ½ (two equal paths) and half an
    /// uncoupled Cubic flow's window and ACKs grows by half the flow's growth after the
    /// same loss — the same K, the curve's C and the Reno-friendly floor halved — so two
    /// such paths add up to one Cubic flow. With the factor 1 it is plain Cubic.
    #[test]
    fn coupled_cubic_paths_add_up_to_one_cubic_flow() {
        let mss = 1448.0;
        let mut flow = state(CongestionControl::Cubic);
        let mut path = state(CongestionControl::Cubic);
        path.coupling = Some(0.5);
        path.cubic_coupled = true;
        assert!(path.lia().is_none() && path.hystart_on(), "Cubic's start, not LIA's");
        assert_eq!(path.beta(), CUBIC_BETA);
        let (w_flow, w_path) = (2000.0 * mss, 1000.0 * mss);
        flow.cwnd = w_flow;
        path.cwnd = w_path;
        flow.on_ack(1.0, 1448, 0.01, true, 1e9);
        path.on_ack(1.0, 1448, 0.01, true, 1e9);
        let k = (2000.0 * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt();
        let (mut crossed_flow, mut crossed_path) = (None, None);
        for step in 1..=2000 {
            let t = 1.0 + step as f64 * 0.01;
            flow.on_ack(t, 200_000, 0.05, false, 1e9);
            path.on_ack(t, 100_000, 0.05, false, 1e9);
            let grown_flow = flow.cwnd - CUBIC_BETA * w_flow;
            let grown_path = path.cwnd - CUBIC_BETA * w_path;
            assert!(
                (grown_path - grown_flow / 2.0).abs() <= 0.02 * grown_flow / 2.0 + mss,
                "t {t}: path grew {grown_path}, flow {grown_flow}"
            );
            if flow.cwnd >= w_flow && crossed_flow.is_none() {
                crossed_flow = Some(t - 1.0);
            }
            if path.cwnd >= w_path && crossed_path.is_none() {
                crossed_path = Some(t - 1.0);
            }
        }
        let (cf, cp) = (crossed_flow.expect("flow back"), crossed_path.expect("path back"));
        assert!((cf - cp).abs() <= 0.05 && cf <= k + 0.05, "{cf} {cp}, K {k}");
        // Factor 1: plain Cubic, bit for bit.
        let mut one = state(CongestionControl::Cubic);
        one.coupling = Some(1.0);
        one.cubic_coupled = true;
        let mut plain = state(CongestionControl::Cubic);
        for s in [&mut one, &mut plain] {
            s.cwnd = w_path;
            s.on_ack(1.0, 1448, 0.01, true, 1e9);
            for step in 1..=500 {
                s.on_ack(1.0 + step as f64 * 0.01, 50_000, 0.05, false, 1e9);
            }
        }
        assert_eq!(one.cwnd, plain.cwnd);
    }

    /// Reno (a competitor on RFC 6356's own terms): no HyStart, one segment per round trip,
    /// halved on a loss.
    #[test]
    fn reno_adds_a_segment_a_round_trip_and_halves() {
        let mut s = state(CongestionControl::Reno);
        let rounds = slow_start_rounds(&mut s, 70.9e6, 0.004, 0.0);
        assert_eq!(rounds.len(), 14, "no HyStart");
        s.on_ack(1.0, 1448, 0.004, true, 1e9);
        let start = s.cwnd;
        assert_eq!(s.ssthresh, start);
        for _ in 0..10 {
            let n = (s.cwnd / 1448.0).round() as usize;
            for _ in 0..n {
                s.on_ack(1.1, 1448, 0.004, false, 1e9);
            }
        }
        let grown = (s.cwnd - start) / 1448.0;
        assert!((grown - 10.0).abs() < 0.2, "{grown} segments in ten round trips");
        assert_eq!(CongestionControl::from_name("reno"), CongestionControl::Reno);
        assert_eq!(CongestionControl::from_name("westwood"), CongestionControl::Cubic);
    }

    /// With enough segments after the hole for fast retransmit the loss costs one round
    /// trip; with a window of one segment nothing can signal it and the retransmission
    /// timer (≥ 200 ms) repairs it; in between RACK's reordering window, min_rtt / 4.
    #[test]
    fn repair_depends_on_the_window() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 1448, 0.002, false, 1e9);
        let rtt = 0.002;
        let large = s.repair(1.0, rtt, rtt, 19, 20, 0.0);
        assert!((large.resend_s - (1.0 + rtt)).abs() < 1e-12, "{large:?}");
        assert_eq!(large.timeouts, 0);
        let rack = s.repair(1.0, rtt, rtt, 1, 2, 0.0);
        assert!((rack.resend_s - (1.0 + 1.25 * rtt)).abs() < 1e-12, "{rack:?}");
        let one = s.repair(1.0, rtt, rtt, 0, 1, 0.0);
        assert!(one.resend_s - 1.0 >= RTO_MIN_S, "{one:?}");
        assert_eq!(one.timeouts, 1);
        // A tail loss in a larger window: the loss probe at 2·srtt + 2 ms, well before
        // the RTO.
        let tail = s.repair(1.0, rtt, rtt, 0, 8, 0.0);
        assert!(
            (tail.resend_s - (1.0 + 2.0 * rtt + TCP_TIMEOUT_MIN_S)).abs() < 1e-12,
            "{tail:?}"
        );
        assert_eq!(tail.timeouts, 0);
    }

    /// A retransmission sent alone (RACK's timer found the loss: the segments after the
    /// hole were SACKed already, nothing clocks out more) is found lost only by the RTO,
    /// and each further loss doubles it: after k timeouts the retransmission that gets
    /// through leaves rto·(2^k − 1) after the first one.
    #[test]
    fn a_lost_retransmission_backs_off() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 1448, 0.002, false, 1e9);
        let rto = s.rto_s();
        let mut seen = [0u32; 4];
        for _ in 0..400 {
            let r = s.repair(1.0, 0.002, 0.002, 2, 20, 0.5);
            let expected = 1.0025 + rto * (2f64.powi(r.timeouts as i32) - 1.0);
            assert!((r.resend_s - expected).abs() < 1e-9, "{r:?}, expected {expected}");
            seen[(r.timeouts as usize).min(3)] += 1;
        }
        // Half the retransmissions are lost: every depth occurs.
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    }

    /// Fast retransmit with segments still out behind the hole: their SACKs let PRR send
    /// new segments after the retransmission, and when one of those is SACKed RACK marks
    /// the lost retransmission lost (no reordering window in recovery): one round trip
    /// after it left, not the RTO. Only when the segment sent after it is lost too does
    /// the timer find it, and from then on the window is one segment (backed-off timer).
    #[test]
    fn a_lost_retransmission_with_segments_after_it_is_found_by_rack() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 1448, 0.002, false, 1e9);
        let (rtt, rto) = (0.002, s.rto_s());
        let mut by_rack = 0;
        let mut by_timer = 0;
        for _ in 0..2000 {
            let r = s.repair(1.0, rtt, rtt, 10, 20, 0.1);
            let after_first = r.resend_s - (1.0 + rtt);
            if r.timeouts == 0 {
                // k lost retransmissions, each found one round trip after it left.
                let k = (after_first / rtt).round();
                assert!((after_first - k * rtt).abs() < 1e-9, "{r:?}");
                assert!(after_first < 0.2, "{r:?}: no timer");
                if k > 0.0 {
                    by_rack += 1;
                }
            } else {
                // RACK found k ≥ 0 of them, then the timer and its back-off.
                let timers = rto * (2f64.powi(r.timeouts as i32) - 1.0);
                let k = ((after_first - timers) / rtt).round();
                assert!(k >= 0.0 && (after_first - timers - k * rtt).abs() < 1e-9, "{r:?}");
                by_timer += 1;
            }
        }
        // A retransmission is lost with 0.1 and found by RACK unless the segment after it
        // is lost too (0.1): about 0.09 by RACK against 0.01 by the timer.
        assert!(by_rack > 4 * by_timer && by_timer > 5, "{by_rack} {by_timer}");
    }

    /// After a timeout (window one segment, `tcp_enter_loss`) nothing is sent after the
    /// retransmission: a lost one waits for the timer, doubled each time.
    #[test]
    fn a_lost_retransmission_after_a_timeout_waits_for_the_backed_off_timer() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 1448, 0.002, false, 1e9);
        let rto = s.rto_s();
        let mut seen = [0u32; 4];
        for _ in 0..400 {
            // A window of one segment, nothing after the hole: the first timeout, then
            // every lost retransmission another, doubled.
            let r = s.repair(1.0, 0.002, 0.002, 0, 1, 0.5);
            let k = r.timeouts;
            assert!(k >= 1, "{r:?}");
            let expected = 1.0 + rto * (2f64.powi(k as i32) - 1.0);
            assert!((r.resend_s - expected).abs() < 1e-9, "{r:?}, expected {expected}");
            seen[(k as usize).min(3)] += 1;
        }
        // Half the retransmissions are lost: every depth past the first timeout occurs.
        assert!(seen[1..].iter().all(|&n| n > 0), "{seen:?}");
    }

    /// The first lost segment's position follows from the same draw: the segments after
    /// it are between 0 and the chunk's segments − 1, and a chunk that loses none draws
    /// as before.
    #[test]
    fn a_lost_chunk_says_how_many_segments_follow_the_hole() {
        let mut s = state(CongestionControl::Cubic);
        let mut lost = 0;
        for _ in 0..2000 {
            if let Some(after) = s.lost(16 * 1024, 0.05, false, false) {
                assert!(after <= 11, "{after}");
                lost += 1;
            }
        }
        // 1 − 0.95^12 ≈ 46 % of 12-segment chunks.
        assert!((800..1050).contains(&lost), "{lost}");
        assert_eq!(s.lost(16 * 1024, 0.0, true, false), Some(11));
    }

    /// A small frame alone is a packet of its own and risks a whole segment's loss; packed
    /// with others it risks its share: 40 packed 36-byte frames (one segment's worth) are
    /// lost about as often as one segment, 40 lone ones forty times as often.
    #[test]
    fn packed_small_frames_risk_their_share_of_a_segment() {
        let mut s = state(CongestionControl::Cubic);
        let count = |s: &mut TcpState, packed: bool| {
            (0..40_000)
                .filter(|_| s.lost(36, 0.05, false, packed).is_some())
                .count()
        };
        let packed = count(&mut s, true);
        let alone = count(&mut s, false);
        // Expected 40 000 × (1 − 0.95^(36/1448)) ≈ 51 and 40 000 × 0.05 = 2000.
        assert!((25..90).contains(&packed), "{packed}");
        assert!((1800..2200).contains(&alone), "{alone}");
        // A packed 16 KiB chunk risks its 11.3 segments, not 12.
        let lost = (0..20_000)
            .filter(|_| s.lost(16_396, 0.05, false, true).is_some())
            .count();
        assert!(
            (8450..9150).contains(&lost),
            "{lost}: expected 20 000 × (1 − 0.95^11.32) ≈ 8 800"
        );
    }

    /// After a retransmission timeout the window restarts from one segment; chunks SACKed
    /// before it (acknowledged cumulatively after) do not grow it again.
    #[test]
    fn a_timeout_restarts_from_one_segment() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 100_000, 0.002, false, 1e9);
        let before = s.cwnd;
        time_out_at(&mut s, 0.5);
        assert_eq!(s.cwnd, 1448.0);
        assert!((s.ssthresh - before * CUBIC_BETA).abs() < 1e-6);
        s.on_ack(0.3, 16_384, 0.002, false, 1e9);
        assert_eq!(s.cwnd, 1448.0);
        s.on_ack(0.6, 1448, 0.002, false, 1e9);
        assert_eq!(s.cwnd, 2.0 * 1448.0);
    }

    /// A 16 KiB chunk (12 segments) sent with a window of one segment after a timeout:
    /// in slow start its later segments leave with a larger window, so a loss among them
    /// has segments after it (RACK or fast retransmit), while a loss of its first segment
    /// is still a lone packet (the retransmission timer). Congestion avoidance keeps the
    /// window it began with.
    #[test]
    fn a_chunk_larger_than_the_window_opens_it_in_slow_start() {
        let mut s = state(CongestionControl::Cubic);
        s.on_ack(0.0, 100_000, 0.002, false, 1e9);
        time_out_at(&mut s, 0.5);
        assert_eq!(s.cwnd, 1448.0, "window of one segment after the timeout");
        let ssthresh = (s.ssthresh / 1448.0).floor() as u32;
        assert!(ssthresh >= 6);
        // First segment lost: 11 follow it, but it left alone.
        assert_eq!(s.window_at_segment(1, 16_384, 11), 1);
        // Last segment lost: it left with about 1 + 11/2 segments.
        assert_eq!(s.window_at_segment(1, 16_384, 0), 6);
        // Four segments of the backlog follow it within its round trip.
        let r = s.repair(1.0, 0.002, 0.002, 4, 6, 0.0);
        assert_eq!(r.timeouts, 0, "found by RACK, not the timer");
        // Congestion avoidance: no growth within the chunk.
        s.cwnd = s.ssthresh;
        assert_eq!(s.window_at_segment(3, 16_384, 0), 3);
    }
}
