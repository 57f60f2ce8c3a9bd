//! The event loop: earliest event first, fixed tie-break order, so a run repeats bit for
//! bit (after picoquic's test loop). Each step: apply schedule changes, move links, deliver
//! arrivals (data direction, then reverse; path order), fire due timers, run the
//! applications, let each endpoint fill every path's room, then jump to the next event.

use fbdt_core::{Config, ConnectionStats, Duration, Event, Hint, Instant, PathStats};
use fbdt_scenario::Schedule;
use thiserror::Error;

use crate::endpoint::{FbdtEnd, Side, SimEndpoint, TcpEnd};
use crate::link::{Link, LinkParams};

/// What runs over the simulated paths.
// One value per run: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum SimScheme {
    /// The core's `Connection`: FBDT, or the MPTCP-style meta layer when `Config::scheme`
    /// is set (`SimScheme::mptcp`).
    Fbdt(Config),
    /// Single-path TCP on the path with this index.
    Tcp(usize),
}

impl SimScheme {
    /// The meta layer with `scheduler` and its defaults (`Config::meta`).
    pub fn mptcp(scheduler: fbdt_core::SchedulerKind) -> Self {
        SimScheme::Fbdt(Config::meta(scheduler))
    }
}

#[derive(Clone, Debug)]
pub struct SimParams {
    pub link: LinkParams,
    /// Bytes the application sends, then ends its stream; `None` = backlogged for the
    /// whole run. A sized run stops as soon as the receiver has everything.
    pub transfer_bytes: Option<u64>,
    /// Connections killed mid-run (a TCP reset, a dead interface), each optionally
    /// reconnected later.
    pub path_resets: Vec<PathReset>,
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
}

impl Default for SimParams {
    fn default() -> Self {
        SimParams {
            link: LinkParams::default(),
            transfer_bytes: None,
            path_resets: Vec::new(),
            sample_interval_s: 0.1,
            max_steps_at_one_instant: 10_000,
            scan_notice_s: 0.1,
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

#[derive(Debug, Error)]
pub enum SimError {
    #[error("{side:?} endpoint at t={t:.6}s: {msg}")]
    Endpoint { side: Side, t: f64, msg: String },
    #[error("livelock: more than {0} steps at t={1:.6}s without time advancing")]
    Livelock(u32, f64),
    #[error("scheme uses path {0}, the schedule has {1}")]
    NoSuchPath(usize, usize),
    #[error("invalid configuration: {0}")]
    Config(String),
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
    /// Sized transfers: when the receiver had every byte and the stream end (the run goes
    /// on until the sender has the final ACK).
    pub completed_at_s: Option<f64>,
}

fn at(t_s: f64) -> Instant {
    Instant::from_micros((t_s * 1e6).round().max(0.0) as u64)
}

struct PathSim {
    data: Link,
    reverse: Link,
    next_step: usize,
    /// A reset path reconnects once its link is up again, one RTT later.
    reconnect: Option<Option<Instant>>,
    /// TCP_INFO-like view given to the endpoints. Frozen while the path is down: a TCP
    /// stack keeps its last srtt/cwnd through an outage until its RTO fires.
    reported: PathStats,
    /// Next step index to look at for a scan announcement.
    next_scan_notice: usize,
    /// The path is in a scan step (announced end pending).
    scanning: bool,
}

impl PathSim {
    fn refresh_report(&mut self, max_window: u64) {
        if !self.data.is_up() {
            return;
        }
        let rtt = 2.0 * self.data.delay_s();
        let rate = self.data.rate();
        self.reported = PathStats {
            srtt: Some(Duration::from_secs_f64(rtt)),
            delivery_rate_bps: Some(rate * 8.0),
            cwnd_bytes: Some(((rate * rtt) as u64).min(max_window)),
        };
    }
}

/// Runs `scheme` over `schedule` for `schedule.duration_s` seconds. `progress` is called
/// with the simulated time at every sample.
pub fn run(
    schedule: &Schedule,
    scheme: &SimScheme,
    params: &SimParams,
    mut progress: impl FnMut(f64),
) -> Result<SimOutcome, SimError> {
    let n = schedule.paths.len();
    let (mut server, mut client): (Box<dyn SimEndpoint>, Box<dyn SimEndpoint>) = match scheme {
        SimScheme::Fbdt(cfg) => (
            Box::new(
                FbdtEnd::new(Side::Server, cfg.clone(), n, params.transfer_bytes, Instant::ZERO)
                    .map_err(SimError::Config)?,
            ),
            Box::new(
                FbdtEnd::new(Side::Client, cfg.clone(), n, params.transfer_bytes, Instant::ZERO)
                    .map_err(SimError::Config)?,
            ),
        ),
        SimScheme::Tcp(p) => {
            if *p >= n {
                return Err(SimError::NoSuchPath(*p, n));
            }
            (
                Box::new(TcpEnd::new(Side::Server, *p, params.transfer_bytes)),
                Box::new(TcpEnd::new(Side::Client, *p, params.transfer_bytes)),
            )
        }
    };
    let mut paths: Vec<PathSim> = schedule
        .paths
        .iter()
        .map(|tl| {
            let mut data = Link::new(params.link.clone());
            let mut reverse = Link::new(params.link.clone());
            let s = tl.steps[0];
            data.set(Instant::ZERO, s.rate_mbps, s.delay_ms, s.loss);
            reverse.set(Instant::ZERO, s.rate_mbps, s.delay_ms, 0.0);
            PathSim {
                data,
                reverse,
                next_step: 1,
                reconnect: None,
                reported: PathStats::default(),
                next_scan_notice: 1,
                scanning: false,
            }
        })
        .collect();

    let end = at(schedule.duration_s);
    let sample = at(params.sample_interval_s).as_micros().max(1);
    let mut next_sample = Instant::from_micros(sample);
    let mut out = SimOutcome {
        duration_s: schedule.duration_s,
        ..SimOutcome::default()
    };
    let mut in_sample = 0u64;
    let mut now = Instant::ZERO;
    let mut same_instant = 0u32;
    let mut buf = Vec::new();
    let fail = |side, now: Instant, msg| SimError::Endpoint {
        side,
        t: now.as_secs_f64(),
        msg,
    };
    for r in &params.path_resets {
        if r.path >= n {
            return Err(SimError::NoSuchPath(r.path, n));
        }
    }
    let mut resets: Vec<PathReset> = params.path_resets.clone();
    resets.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let mut next_reset = 0usize;
    let mut reconnect_delay: Vec<Option<f64>> = vec![None; n];

    loop {
        out.steps += 1;
        while let Some(r) = resets.get(next_reset).filter(|r| at(r.at_s) <= now) {
            let p = &mut paths[r.path];
            p.data.flush();
            p.reverse.flush();
            p.reconnect = None;
            server.path_down(r.path, now);
            client.path_down(r.path, now);
            out.log.push(format!("{now} path{} killed", r.path));
            if let Some(after) = r.reconnect_after_s {
                p.reconnect = Some(None);
                reconnect_delay[r.path] = Some(after);
            }
            next_reset += 1;
        }
        for (i, (p, tl)) in paths.iter_mut().zip(&schedule.paths).enumerate() {
            while let Some(step) = tl.steps.get(p.next_step).filter(|s| at(s.t_s) <= now) {
                p.data.advance(now);
                p.reverse.advance(now);
                p.data.set(now, step.rate_mbps, step.delay_ms, step.loss);
                p.reverse.set(now, step.rate_mbps, step.delay_ms, 0.0);
                if p.scanning && !step.scan {
                    p.scanning = false;
                    server.path_hint(i, Hint::ScanEnded);
                    client.path_hint(i, Hint::ScanEnded);
                }
                p.scanning |= step.scan;
                out.log.push(format!(
                    "{now} {} rate={} delay={}ms loss={}{}",
                    tl.name,
                    step.rate_mbps,
                    step.delay_ms,
                    step.loss,
                    if step.scan { " scan" } else { "" }
                ));
                p.next_step += 1;
            }
            while let Some((k, step)) = tl
                .steps
                .iter()
                .enumerate()
                .skip(p.next_scan_notice)
                .find(|(_, s)| s.scan)
                .filter(|(_, s)| at(s.t_s - params.scan_notice_s) <= now)
            {
                p.next_scan_notice = k + 1;
                if !tl.steps[k - 1].scan {
                    server.path_hint(i, Hint::ScanSoon);
                    client.path_hint(i, Hint::ScanSoon);
                    out.log
                        .push(format!("{now} {} scan announced for {:.3}s", tl.name, step.t_s));
                }
            }
            p.data.advance(now);
            p.reverse.advance(now);
            if let Some(pending) = p.reconnect {
                match pending {
                    None if p.data.is_up() => {
                        let wait = reconnect_delay[i].take().unwrap_or(2.0 * p.data.delay_s());
                        p.reconnect = Some(Some(now + Duration::from_secs_f64(wait)));
                    }
                    Some(t) if t <= now => {
                        p.reconnect = None;
                        server.path_up(i, now);
                        client.path_up(i, now);
                        out.log.push(format!("{now} path{i} reconnected"));
                    }
                    _ => {}
                }
            }
        }
        for (i, p) in paths.iter_mut().enumerate() {
            while let Some(chunk) = p.data.pop_arrival(now) {
                client.recv(i, &chunk, now).map_err(|m| fail(Side::Client, now, m))?;
            }
        }
        for (i, p) in paths.iter_mut().enumerate() {
            while let Some(chunk) = p.reverse.pop_arrival(now) {
                server.recv(i, &chunk, now).map_err(|m| fail(Side::Server, now, m))?;
            }
        }
        if server.timeout().is_some_and(|t| t <= now) {
            server.on_timeout(now);
        }
        if client.timeout().is_some_and(|t| t <= now) {
            client.on_timeout(now);
        }
        server.run_app(now).map_err(|m| fail(Side::Server, now, m))?;
        let got = client.run_app(now).map_err(|m| fail(Side::Client, now, m))?;
        out.bytes_delivered += got;
        in_sample += got;
        for (i, p) in paths.iter_mut().enumerate() {
            p.refresh_report(params.link.max_window_bytes);
            server.path_stats(i, p.reported);
            client.path_stats(i, p.reported);
        }
        for (ep, data_dir) in [(&mut server, true), (&mut client, false)] {
            for (i, p) in paths.iter_mut().enumerate() {
                let link = if data_dir { &mut p.data } else { &mut p.reverse };
                loop {
                    let room = link.room();
                    if room == 0 {
                        break;
                    }
                    buf.clear();
                    if ep.transmit(i, room, now, &mut buf) == 0 {
                        break;
                    }
                    link.push(std::mem::take(&mut buf));
                }
            }
        }
        let events: Vec<(&str, Event)> = server
            .take_events()
            .into_iter()
            .map(|e| ("server", e))
            .chain(client.take_events().into_iter().map(|e| ("client", e)))
            .collect();
        {
            for (side, e) in events {
                out.log.push(format!("{now} {side} {e:?}"));
                if let Event::PathFailed(p) = e {
                    let i = p.index();
                    if let Some(ps) = paths.get_mut(i) {
                        ps.data.flush();
                        ps.reverse.flush();
                        ps.reconnect = Some(None);
                    }
                    server.path_down(i, now);
                    client.path_down(i, now);
                }
            }
        }
        while now >= next_sample && next_sample <= end {
            let t = next_sample.as_secs_f64();
            out.series
                .push((t, in_sample as f64 * 8.0 / params.sample_interval_s / 1e6));
            in_sample = 0;
            progress(t);
            next_sample = Instant::from_micros(next_sample.as_micros() + sample);
        }
        if params.transfer_bytes.is_some() && client.is_done() {
            out.completed_at_s.get_or_insert(now.as_secs_f64());
            // Run on until the sender has heard that everything arrived.
            if server.is_done() {
                break;
            }
        }
        if now >= end {
            break;
        }

        let mut next = end.min(next_sample);
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = next.min(t);
            }
        };
        for (p, tl) in paths.iter().zip(&schedule.paths) {
            consider(p.data.next_event());
            consider(p.reverse.next_event());
            consider(tl.steps.get(p.next_step).map(|s| at(s.t_s)));
            consider(
                tl.steps
                    .iter()
                    .skip(p.next_scan_notice)
                    .find(|s| s.scan)
                    .map(|s| at(s.t_s - params.scan_notice_s)),
            );
            if let Some(Some(t)) = p.reconnect {
                consider(Some(t));
            }
        }
        consider(server.timeout());
        consider(client.timeout());
        consider(resets.get(next_reset).map(|r| at(r.at_s)));
        if next <= now {
            same_instant += 1;
            if same_instant > params.max_steps_at_one_instant {
                return Err(SimError::Livelock(params.max_steps_at_one_instant, now.as_secs_f64()));
            }
        } else {
            same_instant = 0;
        }
        now = next.max(now);
    }

    let elapsed = out.completed_at_s.unwrap_or(schedule.duration_s).max(1e-9);
    out.goodput_mbps = out.bytes_delivered as f64 * 8.0 / elapsed / 1e6;
    let per_sec = (1.0 / params.sample_interval_s).round().max(1.0) as usize;
    out.per_second_mbps = out
        .series
        .chunks(per_sec)
        .filter(|c| c.len() == per_sec)
        .map(|c| c.iter().map(|s| s.1).sum::<f64>() / per_sec as f64)
        .collect();
    out.server = server.stats();
    out.client = client.stats();
    match (&out.server, scheme) {
        (Some(s), _) => {
            out.redundant_bytes = s.sender.redundant_bytes_sent;
            out.per_path_bytes = s.sender.per_path_bytes_sent.clone();
            out.per_path_bytes.resize(n, 0);
        }
        (None, SimScheme::Tcp(p)) => {
            out.per_path_bytes = vec![0; n];
            out.per_path_bytes[*p] = paths[*p].data.bytes_serialised;
        }
        _ => {}
    }
    Ok(out)
}
