//! The simulator as a stepping machine (after quinn-proto's test `Pair` and picoquic's test
//! loop): [`Sim::step`] does everything due at the current instant, [`Sim::next_wake`] says
//! when something is next due, [`Sim::advance`] jumps there. Earliest event first, fixed
//! tie-break order, so a run repeats bit for bit.
//!
//! One step, in this order: path resets, schedule changes and scan notices, links moved
//! to `now`, reconnects, FBDT's stalled-connection probes (TCP model); arrivals (data
//! direction, then reverse; path order); due timers (server, then client); the
//! applications; TCP_INFO-like reports; each endpoint fills every path's room (server
//! first); protocol events; goodput samples.

use fbdt_core::delay_probe::DelayJoin;
use fbdt_core::{AckSilence, Duration, Event, Hint, Instant, PathStats};
use fbdt_scenario::{PathTimeline, Schedule};

use crate::endpoint::{FbdtEnd, Side, SimEndpoint, TcpEnd};
use crate::error::SimError;
use crate::link::{Chunk, Link};
use crate::params::{
    BottleneckOutcome, Coupling, Direction, PathModel, PathReset, SimOutcome, SimParams, SimScheme, DEFAULT_QUEUE_BYTES,
};
use crate::shared::{Coupler, SharedLink};
use crate::sndbuf::MetaSndbuf;
use crate::tcp::TcpParams;

/// What a competing single-path TCP flow writes: always backlogged, in the TCP model's
/// chunks ([`crate::endpoint::TcpEnd::TCP_MODEL_CHUNK`]), of one shared buffer.
static COMPETING_CHUNK: [u8; crate::endpoint::TcpEnd::TCP_MODEL_CHUNK] = [0; crate::endpoint::TcpEnd::TCP_MODEL_CHUNK];

fn at(t_s: f64) -> Instant {
    Instant::from_micros((t_s * 1e6).round().max(0.0) as u64)
}

/// A probe for a stalled path (fbdt-net's, docs/runtime.md): SYNs every
/// [`PROBE_PERIOD_S`] until one connects.
#[derive(Clone, Copy, Debug)]
struct Probe {
    next_syn: Instant,
    connects_at: Option<Instant>,
}

/// fbdt-net's probe SYN period (`PROBE_PERIOD`), docs/runtime.md.
const PROBE_PERIOD_S: f64 = 0.05;
/// fbdt-net's give-up time of one probe SYN (`PROBE_CONNECT`): a path whose round trip
/// is longer never connects a probe.
const PROBE_CONNECT_S: f64 = 0.3;

struct PathSim {
    data: Link,
    reverse: Link,
    next_step: usize,
    /// A reset path reconnects once its link is up again, one RTT later; under the TCP
    /// model every path first connects so (the SYN and SYN/ACK's round trip).
    reconnect: Option<Option<Instant>>,
    /// The path's first connection completed its handshake: until then nothing is sent on
    /// it and nothing reported.
    connected: bool,
    /// Delay before reconnecting set by a [`PathReset`]; one RTT when unset.
    reconnect_delay_s: Option<f64>,
    /// FBDT's runtime probing a stalled connection ([`Sim::probe`]): the next SYN, and
    /// when the one that got through completes its handshake.
    probe: Option<Probe>,
    /// TCP_INFO-like view given to the endpoints. Frozen while the path is down: a TCP
    /// stack keeps its last srtt/cwnd through an outage until its RTO fires.
    reported: PathStats,
    /// `reported` carries `unacked_bytes` (FBDT counts its send limit from them).
    report_unacked: bool,
    /// The pipe's (rate, round trip) `reported` was made from.
    reported_for: Option<(f64, f64)>,
    /// Next step index to look at for a scan announcement.
    next_scan_notice: usize,
    /// The path is in a scan step (announced end pending).
    scanning: bool,
    /// When each schedule step starts (the schedule's times, rounded once).
    step_at: Vec<Instant>,
    /// The next scan notice: [`PathSim::pending_scan_notice`], kept until it is given.
    scan_notice: Option<(usize, Instant)>,
    /// The data and the reverse direction are cut by a one-way outage.
    cut: [bool; 2],
}

impl PathSim {
    /// Brings `reported` up to date at `now`; the report to hand to the endpoints if it
    /// changed. Only a changed report is handed over: both schemes' senders ignore one
    /// equal to the last (FBDT's compares bit for bit, the meta layer's stores it).
    fn refresh_report(&mut self, max_window: u64, now: Instant) -> Option<PathStats> {
        // Below TCP_INFO's resolution (a millisecond at best) a silence is not one: each
        // step would otherwise hand over a new report.
        let ack_silence = self
            .data
            .ack_silence_since(now)
            .map(|since| AckSilence {
                since: at(since).min(now),
                until: now,
            })
            .filter(|s| s.until.saturating_since(s.since) >= Duration::from_millis(1));
        if !self.data.is_up() {
            // The rest stays as it was, and its transport figures are not repeated (they
            // count from what was sent when they came); the silence grows.
            if self.reported.ack_silence == ack_silence {
                return None;
            }
            self.reported.ack_silence = ack_silence;
            return Some(PathStats {
                unacked_bytes: None,
                ..self.reported
            });
        }
        self.refresh_up(max_window, ack_silence, now).then_some(self.reported)
    }

    /// [`Self::refresh_report`] while the path is up: whether `reported` changed.
    fn refresh_up(&mut self, max_window: u64, ack_silence: Option<AckSilence>, now: Instant) -> bool {
        let unacked_bytes = self.report_unacked.then(|| self.data.unacked_bytes());
        let bits = |s: &PathStats| {
            (
                s.srtt,
                s.delivery_rate_bps.map(f64::to_bits),
                s.cwnd_bytes,
                s.unacked_bytes,
                s.ack_silence,
                s.retransmits,
            )
        };
        let retransmits = self.data.retransmits(now);
        if let Some(t) = self.data.tcp_info() {
            let new = PathStats {
                srtt: Some(Duration::from_secs_f64(t.srtt_s)),
                delivery_rate_bps: Some(t.rate * 8.0),
                cwnd_bytes: Some(t.cwnd_bytes),
                unacked_bytes,
                ack_silence,
                retransmits,
                sampled_at: Some(now),
            };
            let changed = bits(&new) != bits(&self.reported);
            self.reported = new;
            return changed;
        }
        let rtt = self.data.round_trip_s();
        let rate = self.data.rate();
        // A pipe's report changes only with its rate and delay (schedule steps), and with
        // what it holds.
        if self.reported_for == Some((rate, rtt)) {
            if self.reported.unacked_bytes == unacked_bytes {
                return false;
            }
            // Only what it holds moved (at most steps): the rest is made of the same rate
            // and delay, so it stays as it was made.
            self.reported.unacked_bytes = unacked_bytes;
            self.reported.sampled_at = Some(now);
            return true;
        }
        self.reported_for = Some((rate, rtt));
        self.reported = PathStats {
            srtt: Some(Duration::from_secs_f64(rtt)),
            delivery_rate_bps: Some(rate * 8.0),
            cwnd_bytes: Some(((rate * rtt) as u64).min(max_window)),
            unacked_bytes,
            ack_silence: None,
            retransmits: None,
            sampled_at: Some(now),
        };
        true
    }

    /// The next scan step not yet announced (its index) and when its notice is due.
    fn pending_scan_notice(&self, tl: &PathTimeline, notice_s: f64) -> Option<(usize, Instant)> {
        tl.steps
            .iter()
            .enumerate()
            .skip(self.next_scan_notice)
            .find(|(_, s)| s.scan)
            .map(|(k, s)| (k, at(s.t_s - notice_s)))
    }

    fn flush(&mut self) {
        self.data.flush();
        self.reverse.flush();
    }

    /// Both directions carry: what a handshake (a reconnect, a probe's SYN) needs.
    fn both_up(&self) -> bool {
        self.data.is_up() && self.reverse.is_up()
    }

    /// Applies `step` to both links with the one-way cuts `cut` (call `advance(now)`
    /// first); a cut direction also holds the other direction's ACKs.
    fn set_links(&mut self, now: Instant, step: &fbdt_scenario::Step, cut: [bool; 2]) {
        let rate = |c: bool| if c { 0.0 } else { step.rate_mbps };
        self.data.set(now, rate(cut[0]), step.delay_ms, step.loss);
        self.reverse.set(now, rate(cut[1]), step.delay_ms, 0.0);
        self.data.hold_acks(now, cut[1]);
        self.reverse.hold_acks(now, cut[0]);
        self.cut = cut;
    }
}

/// A one-way outage as the stepping machine uses it: path, direction index (0 data,
/// 1 reverse), start and end.
type Cut = (usize, usize, Instant, Instant);

/// Which directions of `path` the one-way outages cut at `now`.
fn cut_at(cuts: &[Cut], path: usize, now: Instant) -> [bool; 2] {
    let mut out = [false; 2];
    for &(p, d, from, to) in cuts {
        if p == path && from <= now && now < to {
            out[d] = true;
        }
    }
    out
}

/// One simulated run in progress.
pub struct Sim<'a> {
    schedule: &'a Schedule,
    scheme: &'a SimScheme,
    params: &'a SimParams,
    server: Box<dyn SimEndpoint>,
    client: Box<dyn SimEndpoint>,
    /// Server, client: whether `transmit_idle` can ever say yes (asked once, as it is
    /// asked before every poll).
    polls_idle: [bool; 2],
    paths: Vec<PathSim>,
    /// Resets sorted by time; `next_reset` is the first not yet carried out.
    resets: Vec<PathReset>,
    /// When each reset is due (rounded once).
    reset_at: Vec<Instant>,
    next_reset: usize,
    /// The server's and the client's next timer, as they said at the end of the last step
    /// (nothing touches them between steps).
    timeouts: [Option<Instant>; 2],
    now: Instant,
    end: Instant,
    /// Sample interval in µs, and the end of the current sample.
    sample: u64,
    next_sample: Instant,
    in_sample: u64,
    /// Steps in a row at the same instant (livelock guard).
    same_instant: u32,
    over: bool,
    buf: Chunk,
    /// One-way outages, and every start and end of one, sorted, with the first not yet
    /// passed.
    cuts: Vec<Cut>,
    cut_edges: Vec<Instant>,
    next_edge: usize,
    /// Payload bytes that arrived in the data direction on each path.
    arrived: Vec<u64>,
    /// Delivered chunks' buffers, reused for the next frames (saves an allocation and the
    /// page faults of a fresh buffer per frame).
    spare: Vec<Chunk>,
    /// First transmissions (server) joined with in-order deliveries (client).
    delay: DelayJoin,
    /// The meta layer under the TCP model: the kernel MPTCP socket's send buffer, which
    /// bounds the bytes written and not yet DATA_ACKed (`crate::sndbuf`).
    sndbuf: Option<MetaSndbuf>,
    /// FBDT under the TCP model: a stalled connection is replaced by a fresh one, as
    /// fbdt-net does ([`Sim::probe`]).
    replaces_stalled: bool,
    /// Both endpoints' events of the current step (`handle_events`), kept for reuse.
    events: Vec<Event>,
    /// The shared bottleneck's competing single-path TCP flows (data direction; their
    /// receivers only count bytes).
    competing: Vec<Link>,
    out: SimOutcome,
}

/// Most spare buffers kept.
const MAX_SPARE: usize = 256;

impl<'a> Sim<'a> {
    /// Sets up both endpoints and every path at time zero.
    pub fn new(schedule: &'a Schedule, scheme: &'a SimScheme, params: &'a SimParams) -> Result<Self, SimError> {
        let n = schedule.paths.len();
        let report_unacked = matches!(scheme, SimScheme::Session(c)
            if matches!(&c.scheme, fbdt_core::SchemeConfig::Fbdt(f) if f.in_flight_from_transport));
        // The TCP model connects each path first (the pipe's connections exist at zero).
        let connect_later = params.model == PathModel::Tcp;
        let (server, client): (Box<dyn SimEndpoint>, Box<dyn SimEndpoint>) = match scheme {
            SimScheme::Session(cfg) => {
                let end = |side| {
                    FbdtEnd::new(
                        side,
                        cfg.clone(),
                        n,
                        params.transfer_bytes,
                        params.payload,
                        Instant::ZERO,
                        connect_later,
                    )
                    .map_err(SimError::Config)
                };
                (Box::new(end(Side::Server)?), Box::new(end(Side::Client)?))
            }
            SimScheme::Tcp(p) => {
                if *p >= n {
                    return Err(SimError::NoSuchPath(*p, n));
                }
                let chunk = match params.model {
                    PathModel::Pipe => TcpEnd::PIPE_CHUNK,
                    PathModel::Tcp => TcpEnd::TCP_MODEL_CHUNK,
                };
                (
                    Box::new(TcpEnd::new(
                        Side::Server,
                        *p,
                        params.transfer_bytes,
                        chunk,
                        params.payload,
                    )),
                    Box::new(TcpEnd::new(
                        Side::Client,
                        *p,
                        params.transfer_bytes,
                        chunk,
                        params.payload,
                    )),
                )
            }
        };
        let paths = schedule
            .paths
            .iter()
            .enumerate()
            .map(|(i, tl)| {
                let link = |direction: u64| match params.model {
                    PathModel::Pipe => Link::new(params.link.clone()),
                    PathModel::Tcp => Link::tcp(
                        params.link.clone(),
                        TcpParams {
                            cc: params.congestion_control,
                            queue_bytes: params.queue_bytes.get(i).copied().unwrap_or(DEFAULT_QUEUE_BYTES),
                            seed: params.seed ^ (2 * i as u64 + direction).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                        },
                    ),
                };
                let mut data = link(0).with_radio(tl.radio).with_bursts(tl.bursts);
                let mut reverse = link(1).with_radio(tl.radio).with_bursts(tl.bursts).lazy();
                let s = tl.steps[0];
                let step_at = tl.steps.iter().map(|s| at(s.t_s)).collect();
                data.set(Instant::ZERO, s.rate_mbps, s.delay_ms, s.loss);
                reverse.set(Instant::ZERO, s.rate_mbps, s.delay_ms, 0.0);
                PathSim {
                    data,
                    reverse,
                    next_step: 1,
                    reconnect: connect_later.then_some(None),
                    connected: !connect_later,
                    reconnect_delay_s: None,
                    probe: None,
                    reported: PathStats::default(),
                    report_unacked,
                    reported_for: None,
                    next_scan_notice: 1,
                    scanning: false,
                    step_at,
                    scan_notice: None,
                    cut: [false; 2],
                }
            })
            .collect::<Vec<PathSim>>();
        let mut paths = paths;
        for (p, tl) in paths.iter_mut().zip(&schedule.paths) {
            p.scan_notice = p.pending_scan_notice(tl, params.scan_notice_s);
        }
        let competing = Self::join(schedule, scheme, params, &mut paths)?;
        if let Some(r) = params.path_resets.iter().find(|r| r.path >= n) {
            return Err(SimError::NoSuchPath(r.path, n));
        }
        if let Some(o) = params.one_way_outages.iter().find(|o| o.path >= n) {
            return Err(SimError::NoSuchPath(o.path, n));
        }
        let cuts: Vec<Cut> = params
            .one_way_outages
            .iter()
            .map(|o| {
                let d = match o.direction {
                    Direction::Down => 0,
                    Direction::Up => 1,
                };
                (o.path, d, at(o.at_s), at(o.at_s + o.duration_s))
            })
            .collect();
        let mut cut_edges: Vec<Instant> = cuts.iter().flat_map(|&(_, _, a, b)| [a, b]).collect();
        cut_edges.sort();
        cut_edges.dedup();
        let mut resets = params.path_resets.clone();
        resets.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        let sample = at(params.sample_interval_s).as_micros().max(1);
        let reset_at = resets.iter().map(|r| at(r.at_s)).collect();
        let timeouts = [server.timeout(), client.timeout()];
        let sndbuf = match scheme {
            SimScheme::Session(cfg) if cfg.meta_config().is_some() && params.model == PathModel::Tcp => {
                Some(MetaSndbuf::new(n, params.congestion_control))
            }
            _ => None,
        };
        let replaces_stalled =
            matches!(scheme, SimScheme::Session(cfg) if cfg.meta_config().is_none()) && params.model == PathModel::Tcp;
        Ok(Sim {
            replaces_stalled,
            schedule,
            scheme,
            params,
            polls_idle: [server.polls_idle(), client.polls_idle()],
            server,
            client,
            paths,
            resets,
            reset_at,
            next_reset: 0,
            cuts,
            cut_edges,
            next_edge: 0,
            arrived: vec![0; n],
            timeouts,
            now: Instant::ZERO,
            end: at(schedule.duration_s),
            sample,
            next_sample: Instant::from_micros(sample),
            in_sample: 0,
            same_instant: 0,
            over: false,
            buf: Chunk::default(),
            spare: Vec::new(),
            delay: DelayJoin::new(),
            sndbuf,
            events: Vec::new(),
            competing,
            out: SimOutcome {
                duration_s: schedule.duration_s,
                ..SimOutcome::default()
            },
        })
    }

    /// The shared bottleneck (its members: the joined paths' data directions, then the
    /// competing flows, which it returns) and the coupling of the scheme's paths. Both
    /// need the TCP model; coupling a multipath scheme.
    fn join(
        schedule: &Schedule,
        scheme: &SimScheme,
        params: &SimParams,
        paths: &mut [PathSim],
    ) -> Result<Vec<Link>, SimError> {
        let tcp_model = params.model == PathModel::Tcp;
        if params.coupling != Coupling::Off {
            if !tcp_model {
                return Err(SimError::Unsupported(
                    "coupled congestion control needs the TCP model (--model tcp): ideal pipes have no windows"
                        .to_string(),
                ));
            }
            if !matches!(scheme, SimScheme::Session(_)) {
                return Err(SimError::Unsupported(
                    "coupled congestion control applies to multipath schemes (fbdt, mp:*), not single-path TCP"
                        .to_string(),
                ));
            }
            let coupler = std::rc::Rc::new(Coupler::new(paths.len()));
            for (k, p) in paths.iter_mut().enumerate() {
                p.data.join_coupler(coupler.clone(), k, params.coupling == Coupling::Cubic);
            }
        }
        let Some(b) = &schedule.bottleneck else {
            return Ok(Vec::new());
        };
        if !tcp_model {
            return Err(SimError::Unsupported(
                "the scenario has a shared bottleneck: only the TCP model carries it (--model tcp)".to_string(),
            ));
        }
        if let Some(&i) = b.paths.iter().find(|&&i| i >= paths.len()) {
            return Err(SimError::NoSuchPath(i, paths.len()));
        }
        let members = b.paths.len() + b.competing_tcp as usize;
        let link = std::rc::Rc::new(SharedLink::new(b.rate_mbps * 1e6 / 8.0, b.queue_bytes, members));
        for (k, &i) in b.paths.iter().enumerate() {
            paths[i].data.join_shared(link.clone(), k);
        }
        let competing = (0..b.competing_tcp as usize)
            .map(|c| {
                let mut l = Link::tcp(
                    params.link.clone(),
                    TcpParams {
                        cc: params.congestion_control,
                        queue_bytes: b.queue_bytes,
                        // Apart from every path's seeds (2i and 2i + 1 above).
                        seed: params.seed ^ (1_000_003 + c as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    },
                );
                // Its own link is the shared one: nothing else limits it.
                l.set(Instant::ZERO, b.rate_mbps, b.competing_delay_ms, 0.0);
                l.join_shared(link.clone(), b.paths.len() + c);
                l
            })
            .collect();
        Ok(competing)
    }

    /// The competing flows moved to `now`: what arrived is counted, and each keeps its
    /// backlog full.
    fn run_competing(&mut self) {
        let now = self.now;
        for l in &mut self.competing {
            l.advance(now);
            while l.pop_arrival(now).is_some() {}
            while l.room() >= COMPETING_CHUNK.len() {
                l.push(Chunk {
                    head: Vec::new(),
                    payload: bytes::Bytes::from_static(&COMPETING_CHUNK),
                });
            }
        }
    }

    /// The current simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The run has ended: its duration is over, or a sized transfer was delivered and
    /// acknowledged. Set by [`Sim::step`].
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Bytes the receiving application has read in order so far.
    pub fn bytes_delivered(&self) -> u64 {
        self.out.bytes_delivered
    }

    /// Lets the sending application write its stream only up to `bytes` (the objects
    /// requested so far) instead of everything at once; a workload driver raises it as the
    /// client asks for more. Takes effect at the next [`Sim::step`].
    pub fn set_app_limit(&mut self, bytes: u64) {
        self.server.set_app_limit(bytes);
    }

    /// Payload bytes that arrived in the data direction on each path so far (the shared
    /// payload mode's, [`crate::Payload::Shared`]; frames' headers and control frames not
    /// counted): when a path carried data again after a fault.
    pub fn data_arrived(&self) -> &[u64] {
        &self.arrived
    }

    /// Goodput samples so far: (end of interval in s, Mbit/s).
    pub fn series(&self) -> &[(f64, f64)] {
        &self.out.series
    }

    /// Does everything due at the current instant.
    pub fn step(&mut self) -> Result<(), SimError> {
        let now = self.now;
        self.out.steps += 1;
        self.apply_resets();
        self.apply_schedule();
        self.probe();
        self.deliver()?;
        self.run_competing();
        if self.timeouts[0].is_some_and(|t| t <= now) {
            self.server.on_timeout(now);
        }
        if self.timeouts[1].is_some_and(|t| t <= now) {
            self.client.on_timeout(now);
        }
        let fail = |side| {
            move |source| SimError::Endpoint {
                side,
                t: now.as_secs_f64(),
                source,
            }
        };
        if let Some(b) = self.sndbuf.as_mut() {
            // The subflows' buffers grow with their windows as ACKs free space
            // (`tcp_new_space`); the application then writes into their sum.
            for (i, p) in self.paths.iter().enumerate().filter(|(_, p)| p.connected) {
                if let Some(t) = p.data.tcp_info() {
                    b.saw_cwnd(i, t.cwnd_bytes);
                }
            }
            self.server.set_send_limit(b.bytes());
        }
        self.server.run_app(now).map_err(fail(Side::Server))?;
        let got = self.client.run_app(now).map_err(fail(Side::Client))?;
        self.out.bytes_delivered += got;
        self.in_sample += got;
        for (i, p) in self.paths.iter_mut().enumerate() {
            if !p.connected {
                continue;
            }
            if let Some(report) = p.refresh_report(self.params.link.max_window_bytes, now) {
                self.server.path_stats(i, report);
                self.client.path_stats(i, report);
            }
        }
        self.transmit();
        // Server first: its first transmissions precede the client's deliveries.
        self.server.take_delay_marks(&mut self.delay);
        self.client.take_delay_marks(&mut self.delay);
        self.handle_events();
        self.take_samples();
        if self.params.transfer_bytes.is_some() && self.client.is_done() {
            self.out.completed_at_s.get_or_insert(now.as_secs_f64());
            // Run on until the sender has heard that everything arrived.
            self.over |= self.server.is_done();
        }
        self.over |= now >= self.end;
        self.timeouts = [self.server.timeout(), self.client.timeout()];
        // While the server would not use more room on any path (until a deadline, or its
        // next input: an arrival or a timer, each a step of its own), the steps at the data
        // pipes' chunk ends would find nothing to do. Any path: such a step polls every
        // path. Exact, as a pipe serialises to the same instants however often it is
        // advanced.
        let wanted = (0..self.paths.len())
            .filter_map(|i| self.server.room_wanted_from(i))
            .min();
        for p in &mut self.paths {
            p.data.set_lazy_until(wanted);
        }
        Ok(())
    }

    /// When something is next due: the earliest of the run's end, the next sample, every
    /// link's next event, schedule step, scan notice and reconnect, both endpoints'
    /// timers and the next reset. Never earlier than `now` unless something is still due.
    pub fn next_wake(&self) -> Instant {
        // A plain loop: this runs at every step.
        let mut next = self.end.min(self.next_sample);
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = next.min(t);
            }
        };
        for p in &self.paths {
            consider(p.data.next_event());
            consider(p.reverse.next_event());
            consider(p.step_at.get(p.next_step).copied());
            consider(p.scan_notice.map(|(_, t)| t));
            consider(p.reconnect.flatten());
            consider(p.probe.map(|pr| pr.connects_at.unwrap_or(pr.next_syn)));
        }
        for l in &self.competing {
            consider(l.next_event());
        }
        consider(self.cut_edges.get(self.next_edge).copied());
        consider(self.timeouts[0]);
        consider(self.timeouts[1]);
        consider(self.reset_at.get(self.next_reset).copied());
        next
    }

    /// Jumps to [`Sim::next_wake`]; fails after `max_steps_at_one_instant` steps in a row
    /// that do not move time (a livelock, like quinn's `drive_bounded`).
    pub fn advance(&mut self) -> Result<(), SimError> {
        self.advance_until(None)
    }

    /// [`Sim::advance`], but to `limit` if nothing is due before it: an application event
    /// the simulator does not know of (a request, a playback deadline).
    pub fn advance_until(&mut self, limit: Option<Instant>) -> Result<(), SimError> {
        let next = limit.map_or(self.next_wake(), |l| self.next_wake().min(l));
        if next <= self.now {
            self.same_instant += 1;
            if self.same_instant > self.params.max_steps_at_one_instant {
                return Err(SimError::Livelock(
                    self.params.max_steps_at_one_instant,
                    self.now.as_secs_f64(),
                ));
            }
        } else {
            self.same_instant = 0;
        }
        self.now = next.max(self.now);
        Ok(())
    }

    /// The outcome: goodput over the run (or until a sized transfer completed), per-second
    /// goodput and the endpoints' counters.
    pub fn finish(self) -> SimOutcome {
        let mut out = self.out;
        let n = self.paths.len();
        let params = self.params;
        let elapsed = out.completed_at_s.unwrap_or(self.schedule.duration_s).max(1e-9);
        out.goodput_mbps = out.bytes_delivered as f64 * 8.0 / elapsed / 1e6;
        let per_sec = (1.0 / params.sample_interval_s).round().max(1.0) as usize;
        out.per_second_mbps = out
            .series
            .chunks(per_sec)
            .filter(|c| c.len() == per_sec)
            .map(|c| c.iter().map(|s| s.1).sum::<f64>() / per_sec as f64)
            .collect();
        out.server = self.server.stats();
        out.client = self.client.stats();
        out.delay = self.delay.finish(self.now);
        out.verified = self.client.verified();
        out.bottleneck = self.schedule.bottleneck.as_ref().map(|b| BottleneckOutcome {
            scheme_bytes: b.paths.iter().map(|&i| self.paths[i].data.bytes_arrived).sum(),
            competing_bytes: self.competing.iter().map(|l| l.bytes_arrived).collect(),
            duration_s: elapsed,
        });
        out.per_path_tcp = self
            .paths
            .iter()
            .filter_map(|p| p.data.tcp_info())
            .map(|t| crate::params::TcpCounters {
                loss_events: t.losses,
                timeouts: t.timeouts,
            })
            .collect();
        match (&out.server, self.scheme) {
            (Some(s), _) => {
                out.redundant_bytes = s.sender.redundant_bytes_sent;
                out.per_path_bytes = s.sender.per_path_bytes_sent.clone();
                out.per_path_bytes.resize(n, 0);
            }
            (None, SimScheme::Tcp(p)) => {
                out.per_path_bytes = vec![0; n];
                out.per_path_bytes[*p] = self.paths[*p].data.bytes_serialised;
            }
            _ => {}
        }
        out
    }

    /// Kills the connections whose reset is due; each may reconnect later.
    fn apply_resets(&mut self) {
        let now = self.now;
        while let Some(r) = self
            .resets
            .get(self.next_reset)
            .filter(|_| self.reset_at[self.next_reset] <= now)
        {
            let p = &mut self.paths[r.path];
            p.flush();
            p.reconnect = None;
            p.probe = None;
            self.server.path_down(r.path, now);
            self.client.path_down(r.path, now);
            self.out.log.push(format!("{now} path{} killed", r.path));
            if let Some(after) = r.reconnect_after_s {
                p.reconnect = Some(None);
                p.reconnect_delay_s = Some(after);
            }
            self.next_reset += 1;
        }
    }

    /// Per path: due schedule steps, due scan notices, the links moved to `now`, and a
    /// pending reconnect.
    fn apply_schedule(&mut self) {
        let now = self.now;
        let notice_s = self.params.scan_notice_s;
        while self.cut_edges.get(self.next_edge).is_some_and(|&t| t <= now) {
            self.next_edge += 1;
        }
        let (server, client) = (&mut self.server, &mut self.client);
        for (i, (p, tl)) in self.paths.iter_mut().zip(&self.schedule.paths).enumerate() {
            let cut = cut_at(&self.cuts, i, now);
            while let Some(step) = tl.steps.get(p.next_step).filter(|_| p.step_at[p.next_step] <= now) {
                p.data.advance(now);
                p.reverse.advance(now);
                p.set_links(now, step, cut);
                if p.scanning && !step.scan {
                    p.scanning = false;
                    server.path_hint(i, Hint::ScanEnded);
                    client.path_hint(i, Hint::ScanEnded);
                }
                p.scanning |= step.scan;
                self.out.log.push(format!(
                    "{now} {} rate={} delay={}ms loss={}{}",
                    tl.name,
                    step.rate_mbps,
                    step.delay_ms,
                    step.loss,
                    if step.scan { " scan" } else { "" }
                ));
                p.next_step += 1;
            }
            while let Some((k, _)) = p.scan_notice.filter(|&(_, t)| t <= now) {
                p.next_scan_notice = k + 1;
                p.scan_notice = p.pending_scan_notice(tl, notice_s);
                // A scan right after a scan step continues it: no second notice.
                if !tl.steps[k - 1].scan {
                    server.path_hint(i, Hint::ScanSoon);
                    client.path_hint(i, Hint::ScanSoon);
                    self.out
                        .log
                        .push(format!("{now} {} scan announced for {:.3}s", tl.name, tl.steps[k].t_s));
                }
            }
            p.data.advance(now);
            p.reverse.advance(now);
            if cut != p.cut {
                let step = tl.steps[p.next_step - 1];
                p.set_links(now, &step, cut);
                let way = |c: bool| if c { "cut" } else { "up" };
                self.out
                    .log
                    .push(format!("{now} {} down {} up {}", tl.name, way(cut[0]), way(cut[1])));
            }
            match p.reconnect {
                Some(None) if p.both_up() => {
                    let wait = p.reconnect_delay_s.take().unwrap_or(2.0 * p.data.delay_s());
                    p.reconnect = Some(Some(now + Duration::from_secs_f64(wait)));
                }
                Some(Some(t)) if t <= now => {
                    p.reconnect = None;
                    // A new connection: under the TCP model it starts afresh, not with
                    // the dead one's window and backed-off timer.
                    p.data.new_connection();
                    p.reverse.new_connection();
                    server.path_up(i, now);
                    client.path_up(i, now);
                    let again = if p.connected { "reconnected" } else { "connected" };
                    p.connected = true;
                    self.out.log.push(format!("{now} path{i} {again}"));
                }
                _ => {}
            }
        }
    }

    /// FBDT's runtime replacing a stalled TCP connection (fbdt-net, `fbdt_core::path_policy`,
    /// docs/runtime.md), under the TCP model: from the client's stall report on (its own
    /// core's, or the server's STALLED arriving over another path), a SYN every
    /// [`PROBE_PERIOD_S`]; one sent while the path is up connects one round trip
    /// later, and if the old connection is still stalled then (its path down or its
    /// backed-off retransmission timer pending) the fresh one takes the path over — the
    /// core re-sends what the old one held. The probe is dropped once the old connection
    /// works again. The SYN's own loss, the JOIN's extra round trip (the core's own
    /// exchange on the new connection) and the 4·srtt/300 ms TCP-silence trigger (the
    /// core's report comes first) are not modelled separately.
    fn probe(&mut self) {
        if !self.replaces_stalled {
            return;
        }
        let now = self.now;
        for (i, p) in self.paths.iter_mut().enumerate() {
            let Some(mut pr) = p.probe else { continue };
            if p.reconnect.is_some() {
                // Torn down and reconnecting anyway: the probe has nothing to replace.
                p.probe = None;
                continue;
            }
            let stalled = p.data.tcp_stalled(now);
            if let Some(t) = pr.connects_at.filter(|&t| t <= now) {
                debug_assert!(t <= now);
                p.probe = None;
                if stalled && p.both_up() {
                    p.data.replace_connection();
                    p.reverse.replace_connection();
                    self.server.path_down(i, now);
                    self.client.path_down(i, now);
                    self.server.path_up(i, now);
                    self.client.path_up(i, now);
                    self.out
                        .log
                        .push(format!("{now} path{i} replaced by a fresh connection"));
                }
                continue;
            }
            if pr.connects_at.is_none() && pr.next_syn <= now {
                if !stalled {
                    p.probe = None;
                    continue;
                }
                if p.both_up() && 2.0 * p.data.delay_s() <= PROBE_CONNECT_S {
                    pr.connects_at = Some(now + Duration::from_secs_f64(2.0 * p.data.delay_s()));
                }
                pr.next_syn = now + Duration::from_secs_f64(PROBE_PERIOD_S);
                p.probe = Some(pr);
            }
        }
    }

    /// Hands every due arrival to its receiver: data direction to the client, then the
    /// reverse direction to the server, each in path order.
    fn deliver(&mut self) -> Result<(), SimError> {
        let now = self.now;
        let spare = &mut self.spare;
        let arrived = &mut self.arrived;
        for (side, ep) in [(Side::Client, &mut self.client), (Side::Server, &mut self.server)] {
            for (i, p) in self.paths.iter_mut().enumerate() {
                let link = if side == Side::Client {
                    &mut p.data
                } else {
                    &mut p.reverse
                };
                while let Some(mut chunk) = link.pop_arrival(now) {
                    if side == Side::Client {
                        arrived[i] += chunk.payload.len() as u64;
                    }
                    ep.recv(i, &chunk, now).map_err(|source| SimError::Endpoint {
                        side,
                        t: now.as_secs_f64(),
                        source,
                    })?;
                    if spare.len() < MAX_SPARE {
                        chunk.clear();
                        spare.push(chunk);
                    }
                }
            }
        }
        Ok(())
    }

    /// Lets each endpoint (server first) fill every path's room, frame by frame.
    fn transmit(&mut self) {
        let now = self.now;
        let [server_idle, client_idle] = self.polls_idle;
        for (ep, data_dir, idle) in [
            (&mut self.server, true, server_idle),
            (&mut self.client, false, client_idle),
        ] {
            for (i, p) in self.paths.iter_mut().enumerate().filter(|(_, p)| p.connected) {
                let link = if data_dir { &mut p.data } else { &mut p.reverse };
                loop {
                    let room = link.room();
                    // Most polls would find nothing (the sender remembers its last
                    // poll): those are left out, exactly (`transmit_idle`).
                    if room == 0 || (idle && ep.transmit_idle(i, room, now)) {
                        break;
                    }
                    self.buf.clear();
                    if ep.transmit(i, room, now, &mut self.buf) == 0 {
                        break;
                    }
                    let next = self.spare.pop().unwrap_or_default();
                    link.push(std::mem::replace(&mut self.buf, next));
                }
            }
        }
    }

    /// Logs both endpoints' events (server first); a failed path is torn down on both
    /// sides and reconnects once its link is up.
    fn handle_events(&mut self) {
        let now = self.now;
        // Into buffers kept across steps: most steps have no event.
        let mut events = std::mem::take(&mut self.events);
        self.server.take_events(&mut events);
        let from_server = events.len();
        self.client.take_events(&mut events);
        for (k, e) in events.drain(..).enumerate() {
            let side = if k < from_server { "server" } else { "client" };
            self.out.log.push(format!("{now} {side} {e:?}"));
            // Only the client dials: its own core's report or the server's STALLED
            // (`Event::PeerStalled`, which crossed another path to get here) starts a
            // probe; the server's report alone does not.
            let probe_for = match &e {
                Event::PathStalled(p) | Event::PeerStalled(p) if side == "client" => Some(p),
                _ => None,
            };
            if let (Some(p), true) = (probe_for, self.replaces_stalled) {
                if let Some(ps) = self.paths.get_mut(p.index()).filter(|ps| ps.probe.is_none()) {
                    ps.probe = Some(Probe {
                        next_syn: now,
                        connects_at: None,
                    });
                }
            }
            if let Event::PathFailed(p) = e {
                let i = p.index();
                if let Some(ps) = self.paths.get_mut(i) {
                    ps.flush();
                    ps.reconnect = Some(None);
                    ps.probe = None;
                }
                self.server.path_down(i, now);
                self.client.path_down(i, now);
            }
        }
        self.events = events;
    }

    /// Closes every sample interval that ended by `now` (none past the run's end).
    fn take_samples(&mut self) {
        while self.now >= self.next_sample && self.next_sample <= self.end {
            let t = self.next_sample.as_secs_f64();
            let mbps = self.in_sample as f64 * 8.0 / self.params.sample_interval_s / 1e6;
            self.out.series.push((t, mbps));
            self.in_sample = 0;
            self.next_sample = Instant::from_micros(self.next_sample.as_micros() + self.sample);
        }
    }
}
