//! Scheme names as users type them: `fbdt[+key=value…]`, `tcp:<path>`,
//! `mp:<scheduler>[=<r>][+key=value…]` (the userspace MPTCP-style meta layer) and `mptcp`
//! (kernel MPTCP, testbed only). `+tls` on `fbdt` or `mp:*` runs the session over TLS 1.3
//! (testbed only; every other run is plaintext, as the papers' schemes are). This is the one parser for every backend: the simulator
//! takes [`Scheme::into_sim`], the emulated backend maps [`Scheme`] to its transports.
//! `expand` turns `mp:fixed=5..95/5` into a list. What the testbed lets a socket grow to
//! ([`TestbedLimits`]) is passed in: the simulator runs a scheme with the same ceilings.

pub mod binary;
pub mod cotag;

use anyhow::{anyhow, bail, Context, Result};
use fbdt_core::{AckSilenceUse, Config, FbdtConfig, SchedulerKind, WindowConfig};
use fbdt_scenario::Scenario;
use fbdt_sim::SimScheme;

use crate::TestbedLimits;

#[derive(Clone, Debug)]
pub enum Scheme {
    /// A session of the core's `Connection`: FBDT (`fbdt`), or the meta layer (`mp:*`)
    /// when `Config::scheme` is `SchemeConfig::Meta`; its paths plaintext or TLS 1.3.
    Session(Box<Config>, Encryption),
    /// Single-path TCP on the path with this index.
    Tcp { path: usize },
    /// Kernel MPTCP: starts on the first path, its endpoints add a subflow per other path.
    /// Testbed only.
    KernelMptcp,
    /// COTAG (paper 003) around one kernel TCP flow; two-path testbed only.
    Cotag(cotag::CotagScheme),
    /// Uncoded dual connectivity: one kernel TCP flow's packets alternate over both paths.
    DualRr,
}

/// What protects a session-based scheme's paths on the testbed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encryption {
    /// Bare TCP: the paper-faithful default.
    #[default]
    None,
    /// TLS 1.3 on every path (`+tls`), as the `fbdt` binary runs by default.
    Tls13,
}

impl Encryption {
    /// As results record it: `"none"` or `"tls13"`.
    pub fn label(self) -> &'static str {
        match self {
            Encryption::None => "none",
            Encryption::Tls13 => "tls13",
        }
    }
}

impl Scheme {
    /// What results record for this scheme: `"tls13"` for a session run with `+tls`,
    /// `"none"` for everything else (kernel TCP and MPTCP carry no encryption here).
    pub fn encryption(&self) -> Encryption {
        match self {
            Scheme::Session(_, e) => *e,
            _ => Encryption::None,
        }
    }

    /// What the simulator runs for this scheme; kernel MPTCP has no model there.
    pub fn into_sim(self) -> Result<SimScheme> {
        match self {
            Scheme::Session(_, Encryption::Tls13) => {
                bail!("`+tls` runs only on the emulated testbed (--backend emu): the simulator carries no TLS")
            }
            Scheme::Session(cfg, Encryption::None) => Ok(SimScheme::Session(*cfg)),
            Scheme::Tcp { path } => Ok(SimScheme::Tcp(path)),
            Scheme::KernelMptcp => {
                bail!("scheme `mptcp` (kernel MPTCP) runs only on the emulated testbed (--backend emu)")
            }
            Scheme::Cotag(_) | Scheme::DualRr => {
                bail!("schemes `cotag` and `dual-rr` run only on the emulated testbed (--backend emu)")
            }
        }
    }
}

/// `name` as the simulator runs it: with the testbed's buffer ceilings ([`buffer_parity`]),
/// so that a scheme is the same configuration on both backends. (With the library's 6 MiB
/// meta receive buffer, `mp:kernel` stalled on its shared window in `rats4` at the
/// testbed's scale, where the testbed's kernel MPTCP grew its buffer and did not.)
pub fn parse_sim(name: &str, scenario: &Scenario, seed: u64, limits: &TestbedLimits) -> Result<SimScheme> {
    let (scheme, coupling) = parse_sim_coupled(name, scenario, seed, limits)?;
    if coupling != fbdt_sim::Coupling::Off {
        bail!("scheme `{name}`: `+coupled` runs under `fbdt-lab run --backend sim --model tcp` in this round (this command does not pass it on)");
    }
    Ok(scheme)
}

/// [`parse_sim`] with the scheme's coupled congestion control (`+coupled`,
/// `+coupled=lia|off`), which the simulator takes in its parameters
/// (`SimParams::coupling`).
pub fn parse_sim_coupled(
    name: &str,
    scenario: &Scenario,
    seed: u64,
    limits: &TestbedLimits,
) -> Result<(SimScheme, fbdt_sim::Coupling)> {
    let (_, opts) = runtime_options(name, scenario)?;
    if !opts.is_empty() {
        bail!("scheme `{name}`: `+cc=`, `+rtofloor=`, `+replace=`, `+batch=` and `+coupled=shared` run only on the emulated testbed (--backend emu) in this round: the simulator's TCP model has one controller per run and makes no system calls");
    }
    let mut parsed = parse(name, scenario, seed)?;
    if let Scheme::Session(cfg, _) = &mut parsed {
        buffer_parity(name, cfg, limits.tcp_buffer_max);
    }
    Ok((parsed.into_sim()?, opts.coupling))
}

/// On the testbed every kernel socket may grow its buffers to `tcp_buffer_max` — kernel
/// MPTCP's one receive buffer included. FBDT's reorder and send buffers and the `mp:*` meta
/// layer's shared receive buffer get the same ceiling, unless the scheme names its own
/// (`+rcvbuf=`, `+sndbuf=`), on both backends ([`parse_sim`]). (32 MiB, FBDT's library
/// default, filled up on four bloated paths and triggered needless rescues: 3–5% redundant
/// bytes in `rats4`.)
pub fn buffer_parity(name: &str, core: &mut fbdt_core::Config, kernel_max: Option<u64>) {
    let Some(max) = kernel_max.and_then(|m| usize::try_from(m).ok()) else {
        return;
    };
    if !name.contains("+rcvbuf=") {
        core.recv_buffer = max;
    }
    if !name.contains("+sndbuf=") {
        core.send_buffer = max;
    }
}

/// What a scheme name asks of the runtime's sockets rather than of the protocol core:
/// `+cc=<plan>` (repeatable: `cc=bbr` every path, `cc=wigig:bbr` one path, `cc=auto` or
/// `cc=wigig:auto`), `+rtofloor=on|off`, `+replace=eager|patient` and `+batch=<bytes>` on `fbdt` and `mp:*`; `+cc=<name>` (every path) on
/// `mptcp` and `tcp:<path>`, where it becomes the testbed's controller for that run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RuntimeOptions {
    pub congestion: fbdt_net::CongestionPlan,
    /// `+rtofloor=on|off`; `None`: the runtime's default (on).
    pub rto_floor: Option<bool>,
    /// `+replace=eager`: the earlier connection-replacement rule
    /// (`NetConfig::patient_replacement` off), to measure the difference.
    pub eager_replacement: bool,
    /// `+coupled` (`=lia`) / `+coupled=off`: RFC 6356 LIA coupling of the per-path
    /// windows — in the simulator's TCP model per ACK, on the testbed as per-path pacing
    /// ceilings (`NetConfig::coupled`). `+coupled=cubic` runs in the simulator only.
    pub coupling: fbdt_sim::Coupling,
    /// `+coupled=shared`: LIA only on the paths the runtime finds behind one queue
    /// (`CoupledMode::WhenShared`), on the testbed only: the simulator has no detector.
    pub coupled_when_shared: bool,
    /// `+batch=<bytes>`: the runtime's `writev` batch per path (`NetConfig::write_batch`),
    /// to measure its CPU and delay price on the testbed; the simulator makes no syscalls.
    pub write_batch: Option<usize>,
}

impl RuntimeOptions {
    pub fn is_empty(&self) -> bool {
        self.congestion.is_empty()
            && self.rto_floor.is_none()
            && !self.eager_replacement
            && self.write_batch.is_none()
            && !self.coupled_when_shared
    }

    /// These options on a runtime configuration.
    pub fn apply(&self, net: &mut fbdt_net::NetConfig) {
        net.congestion = self.congestion.clone();
        net.coupled = match (self.coupling, self.coupled_when_shared) {
            (fbdt_sim::Coupling::Lia, false) => fbdt_net::CoupledMode::Always,
            (fbdt_sim::Coupling::Lia, true) => fbdt_net::CoupledMode::WhenShared,
            _ => fbdt_net::CoupledMode::Off,
        };
        if let Some(on) = self.rto_floor {
            net.rto_floor = on;
        }
        net.patient_replacement = !self.eager_replacement;
        if let Some(b) = self.write_batch {
            net.write_batch = b;
        }
    }

    /// The one controller a kernel scheme (`mptcp`, `tcp:<path>`) runs, if the name set one.
    pub fn kernel_congestion(&self) -> Option<&str> {
        self.congestion.initial()
    }
}

/// Splits the runtime options ([`RuntimeOptions`]) off `name`: the rest is what [`parse`]
/// reads. Controllers are checked against this kernel's list.
pub fn runtime_options(name: &str, scenario: &Scenario) -> Result<(String, RuntimeOptions)> {
    let name = name.trim();
    let names: Vec<&str> = scenario.paths.iter().map(|p| p.name.as_str()).collect();
    let mut opts = RuntimeOptions::default();
    let mut rest = Vec::new();
    for (i, part) in name.split('+').enumerate() {
        if i > 0 {
            if let Some(v) = part.strip_prefix("cc=") {
                let plan = fbdt_net::CongestionPlan::parse(v, &names).map_err(|e| anyhow!("scheme `{name}`: cc={e}"))?;
                opts.congestion.extend(plan);
                continue;
            }
            if let Some(v) = part.strip_prefix("rtofloor=") {
                opts.rto_floor = Some(match v {
                    "on" | "1" | "true" => true,
                    "off" | "0" | "false" => false,
                    _ => bail!("scheme `{name}`: rtofloor=`{v}`: expected on or off"),
                });
                continue;
            }
            if part == "coupled" || part.starts_with("coupled=") {
                let v = part.strip_prefix("coupled=").unwrap_or("lia");
                opts.coupled_when_shared = v == "shared";
                opts.coupling = match v {
                    "lia" | "on" | "shared" => fbdt_sim::Coupling::Lia,
                    "cubic" => fbdt_sim::Coupling::Cubic,
                    "off" => fbdt_sim::Coupling::Off,
                    v => bail!("scheme `{name}`: coupled=`{v}`: expected lia, shared, cubic or off"),
                };
                continue;
            }
            if let Some(v) = part.strip_prefix("batch=") {
                let b = bytes(v).map_err(|e| anyhow!("scheme `{name}`: batch={e}"))?;
                if !(16 * 1024..=4 * 1024 * 1024).contains(&b) {
                    bail!("scheme `{name}`: batch=`{v}`: expected 16k to 4m bytes per write");
                }
                opts.write_batch = Some(b);
                continue;
            }
            if let Some(v) = part.strip_prefix("replace=") {
                opts.eager_replacement = match v {
                    "eager" => true,
                    "patient" => false,
                    _ => bail!("scheme `{name}`: replace=`{v}`: expected eager or patient"),
                };
                continue;
            }
        }
        rest.push(part);
    }
    let base = rest.join("+");
    let kernel = base == "mptcp" || base.starts_with("tcp:");
    if opts.coupling != fbdt_sim::Coupling::Off && !(base.starts_with("fbdt") || base.starts_with("mp:")) {
        bail!("scheme `{name}`: `+coupled` couples the paths of a multipath scheme: it applies to fbdt and mp:*");
    }
    if kernel {
        let per_path = !opts.congestion.paths.is_empty() || matches!(opts.congestion.all, Some(fbdt_net::Choice::Auto));
        if per_path || opts.rto_floor.is_some() || opts.eager_replacement || opts.write_batch.is_some() {
            bail!("scheme `{name}`: kernel schemes take one controller for the whole run (`+cc=bbr`), no per-path or auto choice, no rtofloor and no batch");
        }
    } else if !(opts.is_empty() || base.starts_with("fbdt") || base.starts_with("mp:")) {
        bail!("scheme `{name}`: `+cc=`, `+rtofloor=`, `+replace=` and `+batch=` apply to fbdt, mp:*, mptcp and tcp:<path>");
    }
    opts.congestion.validate().map_err(|e| anyhow!("scheme `{name}`: {e}"))?;
    Ok((base, opts))
}

/// Parses `"fbdt+rto=0.5+window=64k"`, `"tcp:wifi"`, … against the scenario's paths.
/// Runtime options ([`runtime_options`]) are checked and left out of the [`Scheme`].
pub fn parse(name: &str, scenario: &Scenario, seed: u64) -> Result<Scheme> {
    let (base, _) = runtime_options(name, scenario)?;
    let name = base.as_str();
    if let Some(path) = name.strip_prefix("tcp:") {
        let idx = scenario.path_index(path).ok_or_else(|| {
            let known: Vec<&str> = scenario.paths.iter().map(|p| p.name.as_str()).collect();
            anyhow!(
                "scheme `{name}`: scenario `{}` has no path `{path}` (paths: {})",
                scenario.name,
                known.join(", ")
            )
        })?;
        return Ok(Scheme::Tcp { path: idx });
    }
    let mut parts = name.split('+');
    match parts.next() {
        Some("fbdt") => {
            let mut cfg = Config {
                seed,
                ..Config::default()
            };
            let mut encryption = Encryption::None;
            for opt in parts {
                if opt == "tls" {
                    encryption = Encryption::Tls13;
                    continue;
                }
                apply_option(&mut cfg, opt).with_context(|| format!("scheme `{name}`"))?;
            }
            cfg.validate().map_err(|e| anyhow!("scheme `{name}`: {e}"))?;
            Ok(Scheme::Session(Box::new(cfg), encryption))
        }
        Some("mptcp") if name == "mptcp" => Ok(Scheme::KernelMptcp),
        Some("dual-rr") if name == "dual-rr" => Ok(Scheme::DualRr),
        Some("cotag") => Ok(Scheme::Cotag(cotag::parse(name, parts)?)),
        Some(s) if s.starts_with("mp:") => {
            let sched = &s["mp:".len()..];
            let kind = SchedulerKind::parse(sched).ok_or_else(|| {
                anyhow!(
                    "scheme `{name}`: unknown scheduler `{sched}` (known: minrtt, blest, ecf, rr, \
                     redundant, fixed=<0..100>, amuse, musher)"
                )
            })?;
            let mut cfg = Config {
                seed,
                ..Config::meta(kind)
            };
            let mut encryption = Encryption::None;
            for opt in parts {
                if opt == "tls" {
                    encryption = Encryption::Tls13;
                    continue;
                }
                apply_mp_option(&mut cfg, opt).with_context(|| format!("scheme `{name}`"))?;
            }
            cfg.validate().map_err(|e| anyhow!("scheme `{name}`: {e}"))?;
            Ok(Scheme::Session(Box::new(cfg), encryption))
        }
        _ => bail!("unknown scheme `{name}`: expected fbdt[+option=value…], tcp:<path>, mp:<scheduler>, mptcp, cotag[+T=<ms>] or dual-rr"),
    }
}

/// Expands `mp:fixed=A..B/S` (optionally with `+options`) into one scheme per r; other
/// names are returned unchanged.
pub fn expand(name: &str) -> Result<Vec<String>> {
    let Some(rest) = name.strip_prefix("mp:fixed=") else {
        return Ok(vec![name.to_string()]);
    };
    let (range, opts) = rest.split_once('+').map_or((rest, None), |(r, o)| (r, Some(o)));
    let Some((a, b)) = range.split_once("..") else {
        return Ok(vec![name.to_string()]);
    };
    let (b, step) = b.split_once('/').unwrap_or((b, "1"));
    let num = |v: &str| -> Result<u32> { v.parse().map_err(|_| anyhow!("`{name}`: `{v}` is not a whole number")) };
    let (a, b, step) = (num(a)?, num(b)?, num(step)?);
    if step == 0 || a > b || b > 100 {
        bail!("`{name}`: expected mp:fixed=A..B/S with 0 ≤ A ≤ B ≤ 100 and S ≥ 1");
    }
    Ok((a..=b)
        .step_by(step as usize)
        .map(|r| match opts {
            Some(o) => format!("mp:fixed={r}+{o}"),
            None => format!("mp:fixed={r}"),
        })
        .collect())
}

fn apply_mp_option(cfg: &mut Config, opt: &str) -> Result<()> {
    let (key, value) = opt
        .split_once('=')
        .ok_or_else(|| anyhow!("option `{opt}` must be key=value"))?;
    match key {
        "rcvbuf" => cfg.recv_buffer = bytes(value)?,
        "sndbuf" => cfg.send_buffer = bytes(value)?,
        "seg" => cfg.segment_size = bytes(value)?,
        "reinject" => {
            meta(cfg)?.reinject = Some(match value {
                "1" | "on" | "true" => true,
                "0" | "off" | "false" => false,
                _ => bail!("reinject=`{value}`: expected on or off"),
            })
        }
        "gain" => meta(cfg)?.cwnd_gain = value.parse().map_err(|_| anyhow!("gain=`{value}` is not a number"))?,
        _ => bail!("unknown option `{key}` (known for mp:*: rcvbuf, sndbuf, seg, reinject, gain, tls)"),
    }
    Ok(())
}

/// The meta layer's knobs of an `mp:*` configuration.
fn meta(cfg: &mut Config) -> Result<&mut fbdt_core::MetaConfig> {
    cfg.meta_config_mut().ok_or_else(|| anyhow!("not a meta-layer scheme"))
}

/// FBDT's knobs of an `fbdt` configuration.
fn fbdt(cfg: &mut Config) -> Result<&mut fbdt_core::FbdtConfig> {
    cfg.fbdt_mut().ok_or_else(|| anyhow!("not an FBDT scheme"))
}

/// Parses sizes like `64k`, `16m`, `1448`.
fn bytes(v: &str) -> Result<usize> {
    let v = v.to_ascii_lowercase();
    let (num, mult) = match v.strip_suffix('k') {
        Some(n) => (n, 1024),
        None => match v.strip_suffix('m') {
            Some(n) => (n, 1024 * 1024),
            None => (v.as_str(), 1),
        },
    };
    let n: usize = num
        .parse()
        .map_err(|_| anyhow!("`{v}` is not a byte count (e.g. 1448, 64k, 16m)"))?;
    n.checked_mul(mult).ok_or_else(|| anyhow!("`{v}` is too large"))
}

fn apply_option(cfg: &mut Config, opt: &str) -> Result<()> {
    let (key, value) = opt
        .split_once('=')
        .ok_or_else(|| anyhow!("option `{opt}` must be key=value"))?;
    match key {
        "rto" => {
            fbdt(cfg)?.redundancy_wait = value.parse().map_err(|_| anyhow!("rto=`{value}` is not a number"))?;
        }
        "window" => match value {
            "paper" => {
                // The paper's window, segments and framing: one segment per frame, ACKs
                // by frames (issue 37's frames and ACKs by bytes are not the paper's).
                let f = fbdt(cfg)?;
                f.window = FbdtConfig::paper().window;
                f.frame_budget = FbdtConfig::paper().frame_budget;
                f.in_flight_from_transport = FbdtConfig::paper().in_flight_from_transport;
                cfg.segment_size = Config::paper().segment_size;
                cfg.ack_bytes = Config::paper().ack_bytes;
            }
            v => fbdt(cfg)?.window = v.parse::<WindowConfig>().map_err(|e| anyhow!("window={e}"))?,
        },
        "budget" => fbdt(cfg)?.window = WindowConfig::parse_budget_ms(value).map_err(|e| anyhow!(e))?,
        "seg" => cfg.segment_size = bytes(value)?,
        "rcvbuf" => cfg.recv_buffer = bytes(value)?,
        "sndbuf" => cfg.send_buffer = bytes(value)?,
        // Payload bytes between two ACKs of a path (0: by frames alone): how sparse the
        // receiver's ACKs may be, to measure what they cost (issue 37).
        "acks" => cfg.ack_bytes = bytes(value)?,
        // What the send limit counts as outstanding on a path: FBDT's ACKs alone, or also
        // the transport's (TCP_INFO; the link model), so sparse ACKs commit no more data.
        "inflight" => {
            fbdt(cfg)?.in_flight_from_transport = match value {
                "acks" => false,
                "transport" => true,
                _ => bail!("inflight=`{value}`: expected `acks` or `transport`"),
            }
        }
        // The stall rule (docs/faults.md): `rtt`, the RTT rule alone (3 × the ACK RTT, at
        // least 30 ms, as before issue 41's lateness rule); a number, the lateness
        // rule's floor in ms beside it.
        "stall" => fbdt(cfg)?.stall_late = ms_unless(key, value, "rtt")?,
        // What the stall rule makes of the transport's silence (no ACK while data is in
        // flight, `FbdtConfig::stall_on_ack_silence`): `on` (the default: it stands for
        // the lateness rule's quiet time, and past a round trip it is a stall by itself),
        // `quiet` (the former only) or `off`, to measure what each brings.
        "silence" => {
            fbdt(cfg)?.stall_on_ack_silence = match value {
                "on" => AckSilenceUse::Proof,
                "quiet" => AckSilenceUse::QuietTime,
                "off" => AckSilenceUse::Off,
                _ => bail!("silence=`{value}`: expected `on`, `quiet` or `off`"),
            }
        }
        // The server's STALLED reports (`Config::report_stalls`): `off` leaves a returned
        // link to the server's retransmission timer, as before version 7 (docs/faults.md).
        "stallreport" => {
            cfg.report_stalls = match value {
                "on" => true,
                "off" => false,
                _ => bail!("stallreport=`{value}`: expected `on` or `off`"),
            }
        }
        // Wake copies (`FbdtConfig::wake_copies_after`): `off`, or the idle time in ms after
        // which the first segments sent also go to a second path.
        "wake" => fbdt(cfg)?.wake_copies_after = ms_unless(key, value, "off")?,
        // How long a DATA frame's segments take to drain (`FbdtConfig::frame_budget`), in
        // ms (0: one segment per frame, up to 10 ms): what frame size costs in CPU and delay.
        "frame" => fbdt(cfg)?.frame_budget = ms_within(key, value, 0.0, 10.0)?,
        // How long the receiver may hold a path's arrivals before it acknowledges them
        // (`Config::max_ack_delay`), in ms from 0.1 to 50: what time-based ACKs cost where a
        // path's rate leaves its byte rule unmet for longer (issue 37). Both ends get it:
        // the sender's timing expects the peer's delay to be its own.
        "ackdelay" => cfg.max_ack_delay = ms_within(key, value, 0.1, 50.0)?,
        "hold" => {
            let ms: u64 = value
                .parse()
                .map_err(|_| anyhow!("hold=`{value}` is not a whole number of ms"))?;
            fbdt(cfg)?.forward_hold = fbdt_core::Duration::from_millis(ms);
        }
        "limit" => {
            fbdt(cfg)?.send_limit_windows = value
                .parse()
                .ok()
                .filter(|f: &f64| f.is_finite() && *f >= 1.0)
                .ok_or_else(|| anyhow!("limit=`{value}` is not a number of TCP windows ≥ 1"))?;
        }
        // What written bytes may wait outside FBDT's windows (`FbdtConfig::unsent_budget`):
        // `off` (the library's default) or ms, as `fbdt serve|proxy --unsent-budget`.
        "unsent" => fbdt(cfg)?.unsent_budget = unsent_budget(value)?,
        "factor" => match &mut fbdt(cfg)?.window {
            WindowConfig::Auto { factor, .. } => {
                *factor = value.parse().map_err(|_| anyhow!("factor=`{value}` is not a number"))?
            }
            WindowConfig::Fixed(_) | WindowConfig::Budget { .. } => {
                bail!("factor applies to window=auto only (put window=auto before it)")
            }
        },
        _ => {
            bail!("unknown option `{key}` (known: rto, window, budget, seg, rcvbuf, sndbuf, acks, ackdelay, inflight, factor, frame, hold, limit, silence, stall, stallreport, unsent, wake, tls)")
        }
    }
    Ok(())
}

/// `key=MS`, a number of milliseconds from `lo` to `hi`.
fn ms_within(key: &str, value: &str, lo: f64, hi: f64) -> Result<fbdt_core::Duration> {
    let ms: f64 = value
        .parse()
        .ok()
        .filter(|ms: &f64| (lo..=hi).contains(ms))
        .ok_or_else(|| anyhow!("{key}=`{value}` is not a number of ms from {lo} to {hi}"))?;
    Ok(fbdt_core::Duration::from_secs_f64(ms / 1e3))
}

/// `key=WORD` (None) or `key=MS`, a whole number of milliseconds > 0.
fn ms_unless(key: &str, value: &str, word: &str) -> Result<Option<fbdt_core::Duration>> {
    if value == word {
        return Ok(None);
    }
    let ms: u64 = value
        .parse()
        .ok()
        .filter(|&ms: &u64| ms > 0)
        .ok_or_else(|| anyhow!("{key}=`{value}`: expected `{word}` or a whole number of ms > 0"))?;
    Ok(Some(fbdt_core::Duration::from_millis(ms)))
}

/// `unsent=MS|off`: the same range `fbdt --unsent-budget` takes (0.1 ms to 10 s).
fn unsent_budget(value: &str) -> Result<Option<fbdt_core::Duration>> {
    if value == "off" {
        return Ok(None);
    }
    let ms: f64 = value
        .parse()
        .ok()
        .filter(|ms: &f64| (0.1..=10_000.0).contains(ms))
        .ok_or_else(|| anyhow!("unsent=`{value}`: expected milliseconds in 0.1..=10000, or `off`"))?;
    Ok(Some(fbdt_core::Duration::from_secs_f64(ms / 1e3)))
}

#[cfg(test)]
mod tests;
