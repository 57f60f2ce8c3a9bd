//! What a run is given ([`SimScheme`], [`SimParams`]) and what it returns ([`SimOutcome`]):
//! plain data shared by the stepping machine ([`crate::Sim`]), the endpoints and [`crate::run`].

use fbdt_core::{Config, ConnectionStats};

use crate::link::LinkParams;
use crate::tcp::CongestionControl;

/// What runs over the simulated paths.
// One value per run: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum SimScheme {
    /// A session of the core's `Connection`: FBDT, or the MPTCP-style meta layer when
    /// `Config::scheme` says so (`SimScheme::meta`).
    Session(Config),
    /// Single-path TCP on the path with this index.
    Tcp(usize),
}

impl SimScheme {
    /// The MPTCP-style meta layer with `scheduler` and its defaults (`Config::meta`).
    pub fn meta(scheduler: fbdt_core::SchedulerKind) -> Self {
        SimScheme::Session(Config::meta(scheduler))
    }
}

/// How a path is modelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathModel {
    /// An ideal TCP pipe ([`crate::link`]): fast, exact about bytes, no congestion control.
    #[default]
    Pipe,
    /// A TCP connection per path and direction ([`crate::tcp`]): congestion window,
    /// loss recovery, retransmission timer back-off, bottleneck queue.
    Tcp,
}

impl PathModel {
    pub const ALL: [PathModel; 2] = [PathModel::Pipe, PathModel::Tcp];

    pub fn name(self) -> &'static str {
        match self {
            PathModel::Pipe => "pipe",
            PathModel::Tcp => "tcp",
        }
    }
}

impl std::fmt::Display for PathModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PathModel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        PathModel::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let known: Vec<&str> = PathModel::ALL.iter().map(|m| m.name()).collect();
            format!("unknown path model `{s}` (known: {})", known.join(", "))
        })
    }
}

/// How the simulated application's bytes travel, and how the receiver checks them. Both
/// check every byte's value and position; they differ in cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Payload {
    /// Zero-copy (the default): the sender writes slices of one shared pattern buffer
    /// ([`crate::pattern::shared`], period [`crate::pattern::PERIOD`]); frames carry them
    /// as shared slices through the links into the receiving core
    /// (`Connection::handle_recv_split`); the receiver recognises a slice of the shared
    /// buffer at its offset's position by identity and compares anything the core
    /// copied byte by byte. A run's cost grows with frames, not bytes. Blind only to a
    /// displacement by a whole multiple of the period (≈ 8 MiB).
    #[default]
    Shared,
    /// Every byte generated from its stream offset (no period), copied through the core's
    /// slice API (`write`, `poll_transmit`, `handle_recv`, `read`) and compared byte by
    /// byte on arrival: the reference the shared mode is tested against.
    Exact,
}

/// How the receiving application's bytes were verified (every byte is, one way or the
/// other).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// Bytes that arrived as the shared pattern's own memory at their position.
    pub by_identity: u64,
    /// Bytes compared with the pattern value by value.
    pub compared: u64,
}

/// The bottleneck queue of a path whose queue was not given: 1000 packets of 1500 bytes.
pub const DEFAULT_QUEUE_BYTES: u64 = 1000 * 1500;

#[derive(Clone, Debug)]
pub struct SimParams {
    /// The path model.
    pub model: PathModel,
    pub link: LinkParams,
    /// TCP model: the congestion control (the scenario's).
    pub congestion_control: CongestionControl,
    /// TCP model: each path's bottleneck queue in bytes (paths past the end: 1000 packets).
    pub queue_bytes: Vec<u64>,
    /// TCP model: seed of the links' loss draws.
    pub seed: u64,
    /// Bytes the application sends, then ends its stream; `None` = backlogged for the
    /// whole run. A sized run stops as soon as the receiver has everything.
    pub transfer_bytes: Option<u64>,
    /// Connections killed mid-run (a TCP reset, a dead interface), each optionally
    /// reconnected later.
    pub path_resets: Vec<PathReset>,
    /// One direction of a path cut for a while, the other left up ([`OneWayOutage`]).
    pub one_way_outages: Vec<OneWayOutage>,
    /// Goodput series resolution.
    pub sample_interval_s: f64,
    /// Steps in a row that may happen at the same instant before the run is declared a
    /// livelock (a bounded drive, like quinn's `drive_bounded`).
    pub max_steps_at_one_instant: u32,
    /// A schedule's `scan` step is announced to both endpoints (`Hint::ScanSoon`) this long
    /// before it starts, and `Hint::ScanEnded` when it ends. 0.1 s: MuSher's hook holds the
    /// scan until the subflow's send queue drains; our scans start on schedule, so the
    /// notice must cover the drain — at least one RTT plus the queue (≈ 2 × BDP / rate =
    /// 2 RTTs of the allowance), i.e. tens of ms on the WiFi paths of the scenarios.
    pub scan_notice_s: f64,
    /// How payload bytes travel and are checked.
    pub payload: Payload,
    /// TCP model, multipath schemes: the per-path windows coupled or not.
    pub coupling: Coupling,
}

/// Coupled congestion control of a multipath scheme's paths (scheme option `coupled`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Coupling {
    /// Each path's TCP on its own (N paths through one bottleneck take N shares).
    #[default]
    Off,
    /// RFC 6356's Linked Increases on every (non-BBR) path in place of the scenario's
    /// controller: Reno's increase scaled by `min(alpha · cwnd_i / cwnd_total, 1)`
    /// ([`crate::shared::lia_factor`]), halving on a loss, slow start without HyStart.
    Lia,
    /// Coupled Cubic on Cubic paths (LIA, which is coupled Reno, on the others; BBR paths
    /// uncoupled): Cubic's HyStart, β = 0.7 and curve on every path, the curve's C and
    /// the Reno-friendly floor scaled by LIA's factor, so the paths' windows together
    /// grow as one Cubic flow's ([`crate::tcp`]).
    Cubic,
}

impl Coupling {
    pub fn name(self) -> &'static str {
        match self {
            Coupling::Off => "off",
            Coupling::Lia => "lia",
            Coupling::Cubic => "cubic",
        }
    }
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            model: PathModel::default(),
            link: LinkParams::default(),
            congestion_control: CongestionControl::default(),
            queue_bytes: Vec::new(),
            seed: 0,
            transfer_bytes: None,
            path_resets: Vec::new(),
            one_way_outages: Vec::new(),
            sample_interval_s: 0.1,
            max_steps_at_one_instant: 10_000,
            scan_notice_s: 0.1,
            payload: Payload::default(),
            coupling: Coupling::Off,
        }
    }
}

/// Kills path `path`'s connection at `at_s`; if `reconnect_after_s` is set, a new
/// connection joins that long after (once the link is up).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathReset {
    pub at_s: f64,
    pub path: usize,
    pub reconnect_after_s: Option<f64>,
}

/// One direction of a path's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Server → client: the download's data.
    Down,
    /// Client → server: the download's ACKs (FBDT's and TCP's).
    Up,
}

/// Direction `direction` of path `path` carries nothing in `[at_s, at_s + duration_s)`
/// (a radio that lost its uplink or downlink) while the other direction stays up. A TCP
/// connection needs both: its bytes still flow the other way, but their TCP-level ACKs
/// are held until the outage ends, so that direction stops once its window is full. The
/// connection is not reset; nothing reconnects while either direction is down.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OneWayOutage {
    pub path: usize,
    pub direction: Direction,
    pub at_s: f64,
    pub duration_s: f64,
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct SimOutcome {
    pub duration_s: f64,
    /// Bytes the receiving application got in order (and checked).
    pub bytes_delivered: u64,
    pub goodput_mbps: f64,
    /// (end of interval in s, goodput in Mbit/s) per `sample_interval_s`.
    pub series: Vec<(f64, f64)>,
    /// Goodput of each whole second.
    pub per_second_mbps: Vec<f64>,
    /// Bytes sent more than once.
    pub redundant_bytes: u64,
    /// Payload bytes handed to each path in the data direction.
    pub per_path_bytes: Vec<u64>,
    pub server: Option<ConnectionStats>,
    pub client: Option<ConnectionStats>,
    /// Time-stamped protocol and schedule events.
    pub log: Vec<String>,
    /// Simulator steps executed.
    pub steps: u64,
    /// The in-order delivery delay of every followed offset (one per
    /// [`fbdt_core::delay_probe::DEFAULT_STEP`] bytes of the data direction), from its first
    /// transmission to its in-order delivery, and the age of those still undelivered at
    /// the end.
    pub delay: fbdt_core::delay_probe::DelaySamples,
    /// Sized transfers: when the receiver had every byte and the stream end (the run goes
    /// on until the sender has the final ACK).
    pub completed_at_s: Option<f64>,
    /// How the receiver verified the bytes it got.
    pub verified: Verification,
    /// `--model tcp`: each path's TCP counters in the data direction (also a path a
    /// scheme left idle: zeros); empty over ideal pipes.
    pub per_path_tcp: Vec<TcpCounters>,
    /// A schedule with a shared bottleneck: what crossed it, per flow.
    pub bottleneck: Option<BottleneckOutcome>,
}

/// Bytes each flow got across the shared bottleneck over the run (data direction, as
/// they arrived: headers and repeats included).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BottleneckOutcome {
    /// The scheme's, summed over its paths that join the link.
    pub scheme_bytes: u64,
    /// Each competing single-path TCP flow's.
    pub competing_bytes: Vec<u64>,
    /// Seconds the bytes were counted over (the run's).
    pub duration_s: f64,
}

/// What a path's TCP-level model counted over a run (data direction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Losses that reduced the window: once per loss episode of fast recovery, and every
    /// retransmission timeout that restarted it.
    pub loss_events: u64,
    /// Retransmission timer expiries, the backed-off ones during an outage included.
    pub timeouts: u64,
}
