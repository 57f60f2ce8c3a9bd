//! FBDT's own knobs. Every knob the papers leave open is here, with the default we chose and
//! why (see specs/fbdt.md "our decisions" and docs/architecture.md); the knobs FBDT shares
//! with the meta layer are in `StreamParams`.

use crate::error::{ConfigError, WindowParseError};
use crate::scheme::StreamParams;
use crate::time::Duration;

/// What the stall rule makes of a path's transport having heard no ACK while it had data
/// in flight (`PathStats::ack_silence`), counted from the path's last progress (issue 41,
/// docs/faults.md). A fast retransmission still brings duplicate ACKs, so it is no
/// silence; a link that went away is, at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckSilenceUse {
    /// Ignored: the lateness rule waits its quiet time.
    Off,
    /// A silence of `stall_late` stands for the lateness rule's quiet time; the oldest
    /// copy must still be overdue.
    QuietTime,
    /// That, and a silence longer than a live connection's ACK clock leaves between two
    /// ACKs — one round trip (TCP's smoothed RTT) — by `stall_late` is a stall by
    /// itself, whatever the copies' due times say: those count the bytes ahead at the
    /// path's drain rate, which an earlier outage and its slow-start recovery pull down.
    Proof,
}

/// How the transmission window is sized (spec decision 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WindowConfig {
    /// `factor × Σ rate_i × max srtt_i` over the live, unstalled paths, clamped to `[min, max]`
    /// bytes, re-evaluated at every window load. Before any estimate exists the window is
    /// `initial` bytes.
    Auto {
        factor: f64,
        min: usize,
        max: usize,
        initial: usize,
    },
    /// A fixed number of bytes, as in the paper's experiments (64 KiB).
    Fixed(usize),
    /// A delivery-delay budget (issue 15): `Σ rate_i × delay` over the live, unstalled
    /// paths, at least two segments per path and at most `max` bytes — a window the paths
    /// drain within the budget, so the backward lane's bytes wait at most about that long
    /// for the forward lane. Before any estimate: 1 MiB clamped the same way. With it, the
    /// arrival rule (`sender::arrival`) decides who sends what.
    Budget { delay: Duration, max: usize },
}

/// Largest window `WindowConfig::Budget` gives when nothing bounds it lower.
pub const BUDGET_MAX_WINDOW: usize = 16 * 1024 * 1024;

/// Default [`FbdtConfig::frame_budget`]: half the budget window's 0.5 ms. Simulated
/// (issue 37, docs/simulator.md; los, mobility, rats4, 10 s, against one segment per
/// frame): in the TCP model 0.25 ms cost 0.2–0.5 % of the goodput with p99 in-order delay
/// 0.1 ms shorter, 0.5 ms 0.8–2.1 % with p99 0.05–0.17 ms longer, 1 ms 2.0–3.2 % with
/// p99 1.3–1.9 ms longer; in the pipe 0.25 ms moved neither.
pub const DEFAULT_FRAME_BUDGET: Duration = Duration::from_micros(250);

/// The default window: 0.5 ms of the summed rate, the best of the budgets measured in the
/// paper's scenarios (docs/architecture.md, "Window size"). With the arrival rule the
/// window sets the in-order delay, not the throughput: a path whose delay exceeds the
/// others' works ahead by as many windows as its delay is worth.
pub const DEFAULT_BUDGET: Duration = Duration::from_micros(500);

/// Default [`FbdtConfig::stall_late`]; chosen in docs/faults.md ("The stall rule") from
/// the simulated false stalls and gaps.
pub const DEFAULT_STALL_LATE: Duration = Duration::from_millis(10);

/// Default [`FbdtConfig::wake_copies_after`]: half the shortest common power-save timeout
/// (WiGig's 100 ms in `--radio defaults`); docs/workloads.md, "Wake copies".
pub const DEFAULT_WAKE_COPIES_AFTER: Duration = Duration::from_millis(50);

impl WindowConfig {
    /// The throughput-first window of the earlier releases (`window=auto`): twice the
    /// summed rate times the longest ACK RTT, 256 KiB to 16 MiB.
    pub fn auto() -> Self {
        WindowConfig::Auto {
            factor: 2.0,
            min: 256 * 1024,
            max: 16 * 1024 * 1024,
            initial: 1024 * 1024,
        }
    }

    /// A window of `delay` at the paths' summed rate, up to [`BUDGET_MAX_WINDOW`].
    pub fn budget(delay: Duration) -> Self {
        WindowConfig::Budget {
            delay,
            max: BUDGET_MAX_WINDOW,
        }
    }

    /// A budget in milliseconds as users type it (`0.5`; fractions allowed, at Gbit/s
    /// rates a millisecond is a large window).
    pub fn parse_budget_ms(ms: &str) -> Result<Self, WindowParseError> {
        ms.parse::<f64>()
            .ok()
            .filter(|ms| ms.is_finite() && (0.001..=60_000.0).contains(ms))
            .map(|ms| WindowConfig::budget(Duration::from_micros((ms * 1000.0).round() as u64)))
            .ok_or_else(|| WindowParseError::Budget(ms.to_string()))
    }
}

/// `budget=<ms>`, `auto`, or a fixed size (`65536`, `64k`, `4m`). The size is checked
/// against the buffers by [`FbdtConfig::validate`].
impl std::str::FromStr for WindowConfig {
    type Err = WindowParseError;

    fn from_str(v: &str) -> Result<Self, WindowParseError> {
        if v == "auto" {
            return Ok(WindowConfig::auto());
        }
        if let Some(ms) = v.strip_prefix("budget=") {
            return WindowConfig::parse_budget_ms(ms);
        }
        let lower = v.to_ascii_lowercase();
        let (num, mult) = match lower.strip_suffix('k') {
            Some(n) => (n, 1 << 10),
            None => lower.strip_suffix('m').map_or((lower.as_str(), 1), |n| (n, 1 << 20)),
        };
        num.parse::<usize>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .map(WindowConfig::Fixed)
            .ok_or_else(|| WindowParseError::Window(v.to_string()))
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct FbdtConfig {
    pub window: WindowConfig,
    /// Redundant-transmission wait as a multiple of the holder path's RTT: the paper's
    /// min(RTT_other, RTO) is this factor ≤ 1; factors > 1 are allowed for the RTO sweep.
    pub redundancy_wait: f64,
    /// A copy is late only this long past its expected ACK at least; beyond that floor,
    /// 4 × the holder's deviation from its expectations (as TCP's RTO adds 4 × rttvar).
    /// Without it a path with µs RTTs found half its copies "late" (issue 15).
    pub redundancy_floor: Duration,
    /// Redundant transmissions (a late copy re-sent while its holder lives and moves)
    /// stop once their bytes exceed this share of the delivered bytes; rescues of dead or
    /// stalled paths' copies do not count and are never capped.
    pub redundancy_cap: f64,
    /// A path holding unacknowledged data whose receive counter has not moved for
    /// max(`stall_rtts` × its ACK RTT, `stall_min`) is stalled: it gets no new window
    /// regions and counts as an outage in its reliability score.
    pub stall_rtts: f64,
    pub stall_min: Duration,
    /// The lateness rule (issue 41), beside the one above: a path is also stalled once its
    /// oldest undelivered copy's ACK is overdue — past the time the sender expected it
    /// when it handed the copy over (the bytes ahead of it at the path's drain rate, at
    /// least its base RTT, plus the ACK delay) by max(this, the path's usual lateness +
    /// 4 × its deviation) — and its counter has not moved for max(`stall_quiet_rtts` ×
    /// its ACK RTT, this) either. None: the RTT rule alone.
    pub stall_late: Option<Duration>,
    /// A lost TCP segment holds a path's counter for about one loaded RTT (fast
    /// retransmit) while its copies grow overdue: the lateness rule waits this many ACK
    /// RTTs of silence. Simulated (docs/faults.md, "The stall rule"): 1 declared such
    /// recoveries stalls on los and rats4, 1.5 none.
    pub stall_quiet_rtts: f64,
    /// What the stall rule makes of the transport's silence (`PathStats::ack_silence`):
    /// see [`AckSilenceUse`].
    pub stall_on_ack_silence: AckSilenceUse,
    /// A new forward path must score this many times the current one to take over
    /// (hysteresis against flapping, spec decision 8) ...
    pub forward_hysteresis: f64,
    /// ... and keep doing so for this long (hysteresis in time, issue 15): one score sample
    /// after a burst of ACKs does not move the forward lane. A forward path that stalls or
    /// dies is replaced at once.
    pub forward_hold: Duration,
    /// A path may hold this many of its TCP windows (cwnd, or rate × srtt) of payload
    /// undelivered, plus two segments (spec decision 6). Above 1 so the pipe never runs
    /// dry between ACKs; every window more is queueing delay that the arrival rule must
    /// wait out. Simulated los: 1.0 costs 2.7% of WiGig's goodput, 1.25 none, and the
    /// former 2.0 doubled the path's queueing delay (docs/architecture.md).
    pub send_limit_windows: f64,
    /// A DATA frame carries as many adjacent segments of one lane end as the path drains
    /// in this long (at least one, at most 256 KiB, never more than the send limit and
    /// the arrival rule hand the path): per-frame work — polls, framing, reassembly, ACKs —
    /// shrinks on fast paths, while segments stay the unit of lanes, splits and re-sends
    /// (issue 37). A path that still holds data waits until room for such a frame opens
    /// instead of sending a segment whenever room for one does. The default is
    /// `DEFAULT_FRAME_BUDGET` (250 µs); 0 sends one segment per frame as soon as it fits (the
    /// paper's, and the rule before issue 37).
    pub frame_budget: Duration,
    /// The send limit counts what the path's transport has not acknowledged yet
    /// (`PathStats::unacked_bytes`, plus what was sent since that report) when that is
    /// less than what FBDT's own ACKs leave outstanding, and no longer adds the bytes that
    /// arrive between two ACKs: sparse ACKs then commit no more data to a path. On by
    /// default (with 128 KiB ACKs, [`crate::config::DEFAULT_ACK_BYTES`]); off in
    /// [`FbdtConfig::paper`], whose FBDT knows only its own ACKs. A driver that reports no
    /// transport figures (`PathStats::unacked_bytes` = None) gets the ACK-only rule.
    pub in_flight_from_transport: bool,
    /// Written bytes may wait outside any window (not yet handed to a lane) only up to
    /// what the live paths drain in this long (at least two windows): beyond it the
    /// application's writes wait, as TCP_NOTSENT_LOWAT makes a socket's. A relay that
    /// multiplexes streams (the proxy's mux) then decides late which stream goes next, so
    /// a short answer does not queue behind megabytes of a bulk one. `None`: the whole
    /// send buffer may fill: the default here, so the simulator's bulk flows and the
    /// core's tests see the whole buffer; `fbdt serve|proxy|perf` set 5 ms
    /// (`--unsent-budget`).
    pub unsent_budget: Option<Duration>,
    /// Radios doze when idle (802.11 power save, a WiGig beam dropped, 5G DRX), and which
    /// of them wakes first is unknown until an ACK comes back: after every path has been
    /// idle this long, the first `wake_copy_bytes` sent also go to a second path as soon
    /// as it has nothing of its own, until the first ACK, so a small transfer from idle
    /// takes the radio that wakes first, at the price of its bytes twice (issue 39). Below common power-save timeouts (100–200 ms), above
    /// the gaps of an active exchange. `None`: off (the paper's FBDT).
    pub wake_copies_after: Option<Duration>,
    /// How much of an episode's data gets a wake copy, from its first byte. A wake-up
    /// dominates short transfers (a request, a page's objects); from about a megabyte it
    /// is a fraction of the transfer, and copies would take the second radio's capacity
    /// from it (simulated `workload file mobility --radio defaults`: all copied, 1 MB from
    /// idle took 15.3 ms instead of 14.7; 128 KiB copied, 14.7, while 100 kB went from
    /// 12.5 to 6.8 ms).
    pub wake_copy_bytes: u64,
}

impl Default for FbdtConfig {
    fn default() -> Self {
        FbdtConfig {
            window: WindowConfig::budget(DEFAULT_BUDGET),
            redundancy_wait: 1.0,
            redundancy_floor: Duration::from_millis(2),
            redundancy_cap: 0.02,
            stall_rtts: 3.0,
            stall_min: Duration::from_millis(30),
            stall_late: Some(DEFAULT_STALL_LATE),
            stall_quiet_rtts: 1.5,
            stall_on_ack_silence: AckSilenceUse::Proof,
            forward_hysteresis: 1.2,
            forward_hold: Duration::from_millis(50),
            send_limit_windows: 1.25,
            frame_budget: DEFAULT_FRAME_BUDGET,
            in_flight_from_transport: true,
            unsent_budget: None,
            wake_copies_after: Some(DEFAULT_WAKE_COPIES_AFTER),
            wake_copy_bytes: 128 * 1024,
        }
    }
}

impl FbdtConfig {
    /// The paper's fixed 64 KiB window (with MSS-sized segments, see `Config::paper`),
    /// one segment per frame, and a send limit and stall rule from FBDT's own ACKs.
    pub fn paper() -> Self {
        FbdtConfig {
            window: WindowConfig::Fixed(64 * 1024),
            frame_budget: Duration::ZERO,
            in_flight_from_transport: false,
            stall_on_ack_silence: AckSilenceUse::Off,
            wake_copies_after: None,
            ..FbdtConfig::default()
        }
    }

    /// Checks the knobs against the shared ones (`params` is already valid).
    pub fn validate(&self, params: &StreamParams) -> Result<(), ConfigError> {
        match self.window {
            WindowConfig::Fixed(w) if w < params.segment_size || w > params.recv_buffer => {
                return Err(ConfigError::Window(format!("fixed window of {w} bytes")));
            }
            WindowConfig::Auto {
                factor,
                min,
                max,
                initial,
            } if !(factor.is_finite() && factor > 0.0)
                || min < params.segment_size
                || max < min
                || initial < min
                || initial > max =>
            {
                return Err(ConfigError::Window(format!(
                    "auto window factor {factor}, min {min}, max {max}, initial {initial}"
                )));
            }
            WindowConfig::Budget { delay, max } if delay == Duration::ZERO || max < params.segment_size => {
                return Err(ConfigError::Window(format!(
                    "budget window of {} ms, max {max} bytes",
                    delay.as_secs_f64() * 1e3
                )));
            }
            _ => {}
        }
        if !(self.redundancy_wait.is_finite() && self.redundancy_wait >= 0.0) {
            return Err(ConfigError::RedundancyWait(self.redundancy_wait));
        }
        if !(self.redundancy_cap.is_finite() && (0.0..=1.0).contains(&self.redundancy_cap)) {
            return Err(ConfigError::Other("redundancy_cap must be a share in [0, 1]"));
        }
        if !(self.stall_rtts.is_finite() && self.stall_rtts > 0.0) {
            return Err(ConfigError::Other("stall_rtts must be a finite factor > 0"));
        }
        if !(self.stall_quiet_rtts.is_finite() && self.stall_quiet_rtts >= 0.0) {
            return Err(ConfigError::Other("stall_quiet_rtts must be a finite factor ≥ 0"));
        }
        if !(self.send_limit_windows.is_finite() && self.send_limit_windows >= 1.0) {
            return Err(ConfigError::Other("send_limit_windows must be a finite factor ≥ 1"));
        }
        if !(self.forward_hysteresis.is_finite() && self.forward_hysteresis >= 1.0) {
            return Err(ConfigError::Other("forward_hysteresis must be ≥ 1"));
        }
        if self.wake_copies_after.is_some_and(|d| d == Duration::ZERO) {
            return Err(ConfigError::Other("wake_copies_after must be > 0 (None turns wake copies off)"));
        }
        Ok(())
    }
}
