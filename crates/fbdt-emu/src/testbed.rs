//! The testbed: client and server namespaces, N emulated paths between them, routing,
//! kernel MPTCP endpoints, a player for the schedule, and cleanup on every exit path.

use std::{
    net::Ipv4Addr,
    process::Command,
    sync::{atomic::AtomicU32, atomic::Ordering, mpsc, Arc, Mutex},
    time::{Duration, Instant},
};

use rattan_env::netns::NetNs;
use serde::Serialize;

use crate::{
    cleanup,
    emu::{Emulator, PacketStats, PairSpec, PathControl},
    error::{Error, Result},
    fidelity::{self, CpuSnapshot, Fidelity, Mark, PathInput, Tolerances},
    ns::{self, IfCounters},
    spec::{PathStep, TestbedSpec},
};

/// Common prefix of every namespace this crate creates: `fbdt-<pid>-<n>-{cli,emu,srv}`.
pub const NS_PREFIX: &str = "fbdt-";

/// Where each path's rate limit and queue live. Delay, loss, outages and the lateness
/// probes are in the user-space emulator (rattan-core) either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Datapath {
    /// Everything in rattan-core: rate → delay → loss cells per direction, its drop-tail
    /// queue in packets. The default: `kernel-rate` uses less emulator CPU but does not
    /// yet model scans (see docs/testbed.md, datapath).
    #[default]
    Rattan,
    /// The rate limit and its drop-tail queue in the kernel (HTB class + pfifo on the
    /// emulator's egress veth of each direction); rattan-core only delays and drops.
    KernelRate,
}

impl Datapath {
    pub fn name(self) -> &'static str {
        match self {
            Datapath::Rattan => "rattan",
            Datapath::KernelRate => "kernel-rate",
        }
    }
}

impl std::str::FromStr for Datapath {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "rattan" => Ok(Datapath::Rattan),
            "kernel-rate" => Ok(Datapath::KernelRate),
            _ => Err(format!("unknown datapath {s:?} (rattan or kernel-rate)")),
        }
    }
}

impl std::fmt::Display for Datapath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Knobs of a testbed that are not part of the scenario.
#[derive(Debug, Clone, Serialize)]
pub struct TestbedOptions {
    /// Where the rate limit runs (see [`Datapath`]).
    pub datapath: Datapath,
    /// Tokio worker threads of the emulator (rattan-core). 1 leaves a core to the endpoints
    /// on a 2-core machine.
    pub emu_threads: usize,
    /// Run the emulator's threads under SCHED_FIFO at this priority (1–99) so they are not
    /// queued behind the endpoints or other work on a shared host; `None` = normal
    /// scheduling. See docs/testbed.md (fidelity).
    pub emu_rt_priority: Option<i32>,
    /// Receive and send buffer of the emulator's AF_PACKET sockets, bytes; `None` keeps
    /// the kernel default (which drops bursts, see [`crate::emu::PACKET_SOCKET_BUFFER`]).
    pub packet_socket_buffer: Option<i32>,
    /// Drop packets in both directions (default: only server → client, the data direction
    /// of every scheme's download).
    pub loss_both_directions: bool,
    /// Configure kernel MPTCP endpoints and limits.
    pub mptcp: bool,
    /// MTU of every emulated link (1500 like the papers' testbeds; 9000 doubles the
    /// emulator's packet budget).
    pub mtu: u32,
    /// Largest TCP send/receive buffer the kernel may autotune to, bytes (third field of
    /// `net.ipv4.tcp_rmem`/`tcp_wmem` in both namespaces). The kernel's 6 MiB default caps a
    /// path at 6 MiB per RTT (48 Mbit/s at 1 s RTT); 64 MiB covers the scenarios' BDPs.
    /// `None` keeps the kernel default. Applies to every scheme alike.
    pub tcp_buffer_max: Option<u64>,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        Self {
            datapath: Datapath::default(),
            emu_threads: 1,
            emu_rt_priority: Some(10),
            packet_socket_buffer: Some(crate::emu::PACKET_SOCKET_BUFFER),
            loss_both_directions: false,
            mptcp: true,
            mtu: 1500,
            tcp_buffer_max: Some(64 << 20),
        }
    }
}

/// Which end of the testbed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Side {
    /// The multi-radio host: one interface per path.
    Client,
    /// The remote host: one interface per path too (one address per path).
    Server,
}

/// Addresses and names of one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathInfo {
    pub index: usize,
    pub name: String,
    /// The client's address on this path; a socket bound to it leaves by this path
    /// (policy routing: `from client_ip lookup table`).
    pub client_ip: Ipv4Addr,
    /// The server's address on this path.
    pub server_ip: Ipv4Addr,
    /// Interface names in the client and server namespaces.
    pub client_if: String,
    pub server_if: String,
    /// Client routing table of this path.
    pub table: u32,
}

/// Byte and packet counters of one path, from both ends' interfaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathCounters {
    pub name: String,
    /// Client interface: rx = what the path delivered to the client.
    pub client: IfCounters,
    /// Server interface: tx = what the server put on the path.
    pub server: IfCounters,
}

/// A step the player applied, with when it was applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppliedStep {
    pub path: String,
    /// Scheduled time, seconds since `play()`.
    pub t_s: f64,
    /// Time actually applied, seconds since `play()`.
    pub applied_s: f64,
    pub step: PathStep,
}

struct Player {
    stop_tx: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
    started: Instant,
}

/// A running testbed. Everything it created is removed when it is dropped (also while
/// unwinding from a panic) or on SIGINT/SIGTERM (see [`crate::install_signal_handler`]).
pub struct Testbed {
    spec: TestbedSpec,
    opts: TestbedOptions,
    client_ns: String,
    server_ns: String,
    emu_ns: String,
    paths: Vec<PathInfo>,
    netns: Vec<Arc<NetNs>>,
    emu: Option<Emulator>,
    controls: Arc<Vec<PathControl>>,
    player: Mutex<Option<Player>>,
    applied: Arc<Mutex<Vec<AppliedStep>>>,
    /// Where the fidelity monitors count from (the last `play()` or `reset_monitors()`).
    mark: Mutex<Option<Mark>>,
    stopped: bool,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// The emulator namespace's veth towards the client on path `n` (1-based).
fn emu_client_dev(n: usize) -> String {
    format!("ec{n}")
}

fn valid_ifname(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && s != "lo" && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn mac(tag: u8, k: u32, n: usize) -> [u8; 6] {
    // Locally administered unicast (02:…), distinct per role (tag) and path (n).
    [0x02, 0xfb, tag, (k & 0xff) as u8, 0x00, n as u8]
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

impl Testbed {
    /// Creates namespaces, links, emulator, routing and MPTCP configuration, and applies
    /// every path's first step. The schedule's later steps run after [`Testbed::play`].
    pub fn start(spec: &TestbedSpec, opts: &TestbedOptions) -> Result<Self> {
        ns::privileged().map_err(|reason| Error::NotPrivileged { reason })?;
        spec.validate()?;
        crate::install_signal_handler();
        let k = SEQ.fetch_add(1, Ordering::Relaxed);
        let base = format!("{NS_PREFIX}{}-{k}", std::process::id());
        let (client_ns, emu_ns, server_ns) = (format!("{base}-cli"), format!("{base}-emu"), format!("{base}-srv"));
        cleanup::register(&[&client_ns, &emu_ns, &server_ns]);
        let mut used = Vec::new();
        let paths = spec
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let n = i + 1;
                let ifname = if valid_ifname(&p.name) && !used.contains(&p.name) {
                    p.name.clone()
                } else {
                    format!("path{n}")
                };
                used.push(ifname.clone());
                PathInfo {
                    index: i,
                    name: p.name.clone(),
                    client_ip: Ipv4Addr::new(10, 200, n as u8, 1),
                    server_ip: Ipv4Addr::new(10, 200, n as u8, 2),
                    client_if: ifname.clone(),
                    server_if: ifname,
                    table: 100 + n as u32,
                }
            })
            .collect();
        let mut tb = Testbed {
            spec: spec.clone(),
            opts: opts.clone(),
            client_ns,
            server_ns,
            emu_ns,
            paths,
            netns: Vec::new(),
            emu: None,
            controls: Arc::new(Vec::new()),
            player: Mutex::new(None),
            applied: Arc::new(Mutex::new(Vec::new())),
            mark: Mutex::new(None),
            stopped: false,
        };
        // On error `tb` is dropped here, which removes whatever was created.
        tb.setup(k)?;
        tb.reset_monitors();
        Ok(tb)
    }

    fn setup(&mut self, k: u32) -> Result<()> {
        for name in [&self.client_ns, &self.emu_ns, &self.server_ns] {
            if ns::exists(name) {
                return Err(Error::NamespaceExists(name.clone()));
            }
            self.netns.push(NetNs::new(name).map_err(|e| Error::Netns {
                namespace: name.clone(),
                op: "create",
                detail: e.to_string(),
            })?);
        }
        for name in [&self.client_ns, &self.emu_ns, &self.server_ns] {
            ns::ip(Some(name), &["link", "set", "lo", "up"])?;
            ns::sysctl(name, "net.ipv6.conf.all.disable_ipv6", "1")?;
            ns::sysctl(name, "net.ipv6.conf.default.disable_ipv6", "1")?;
            ns::sysctl(name, "net.ipv4.conf.all.rp_filter", "0")?;
            ns::sysctl(name, "net.ipv4.conf.default.rp_filter", "0")?;
        }
        let pairs: Vec<PairSpec> = self
            .paths
            .iter()
            .zip(&self.spec.paths)
            .map(|(pi, pp)| {
                let n = pi.index + 1;
                PairSpec {
                    cli_tmp: format!("c{n}"),
                    emu_c: emu_client_dev(n),
                    emu_s: format!("es{n}"),
                    srv_tmp: format!("s{n}"),
                    cli_mac: mac(0x01, k, n),
                    emu_c_mac: mac(0x11, k, n),
                    emu_s_mac: mac(0x12, k, n),
                    srv_mac: mac(0x02, k, n),
                    cli_ip: pi.client_ip,
                    srv_ip: pi.server_ip,
                    prefix: 24,
                    emu_c_ip: Ipv4Addr::new(10, 201, n as u8, 1),
                    emu_s_ip: Ipv4Addr::new(10, 201, n as u8, 2),
                    queue_packets: pp.queue_packets,
                    initial: pp.steps[0],
                    seed: self.spec.seed.wrapping_add(pi.index as u64),
                }
            })
            .collect();
        let emu = Emulator::start(
            self.netns[0].clone(),
            self.netns[1].clone(),
            self.netns[2].clone(),
            &self.emu_ns,
            pairs.clone(),
            self.opts.emu_threads,
            self.opts.emu_rt_priority,
            self.opts.packet_socket_buffer,
            self.opts.loss_both_directions,
            self.opts.datapath,
            self.opts.mtu,
        )?;
        let controls = emu.take_paths(&mut self.emu);
        self.controls = Arc::new(controls);
        let mtu = self.opts.mtu.to_string();
        for (pi, pair) in self.paths.clone().iter().zip(&pairs) {
            for (nsn, tmp, name) in [
                (&self.client_ns, &pair.cli_tmp, &pi.client_if),
                (&self.server_ns, &pair.srv_tmp, &pi.server_if),
            ] {
                let nsn = Some(nsn.as_str());
                ns::ip(nsn, &["link", "set", "dev", tmp, "down"])?;
                if tmp != name {
                    ns::ip(nsn, &["link", "set", "dev", tmp, "name", name])?;
                }
                ns::ip(nsn, &["link", "set", "dev", name, "mtu", &mtu, "up"])?;
            }
            for dev in [&pair.emu_c, &pair.emu_s] {
                ns::ip(Some(&self.emu_ns), &["link", "set", "dev", dev, "mtu", &mtu])?;
            }
            // ARP cannot cross the emulator (it forwards unicast only): static neighbours.
            let (c, s) = (pi.client_ip.to_string(), pi.server_ip.to_string());
            ns::ip(
                Some(&self.client_ns),
                &[
                    "neigh",
                    "replace",
                    &s,
                    "lladdr",
                    &fmt_mac(&pair.srv_mac),
                    "dev",
                    &pi.client_if,
                    "nud",
                    "permanent",
                ],
            )?;
            ns::ip(
                Some(&self.server_ns),
                &[
                    "neigh",
                    "replace",
                    &c,
                    "lladdr",
                    &fmt_mac(&pair.cli_mac),
                    "dev",
                    &pi.server_if,
                    "nud",
                    "permanent",
                ],
            )?;
            // Source routing: traffic from this path's address uses this path's table, whose
            // default route leaves by this path's interface (kernel MPTCP selftests pattern).
            let table = pi.table.to_string();
            ns::ip(
                Some(&self.client_ns),
                &[
                    "route",
                    "add",
                    &format!("10.200.{}.0/24", pi.index + 1),
                    "dev",
                    &pi.client_if,
                    "scope",
                    "link",
                    "table",
                    &table,
                ],
            )?;
            ns::ip(
                Some(&self.client_ns),
                &[
                    "route",
                    "add",
                    "default",
                    "via",
                    &s,
                    "dev",
                    &pi.client_if,
                    "table",
                    &table,
                ],
            )?;
            ns::ip(
                Some(&self.client_ns),
                &[
                    "rule",
                    "add",
                    "from",
                    &c,
                    "table",
                    &table,
                    "pref",
                    &(1000 + pi.index + 1).to_string(),
                ],
            )?;
            // The server answers each client address by the path it belongs to (connected route);
            // a default route via path 1 covers anything else.
            for nsn in [&self.client_ns, &self.server_ns] {
                ns::sysctl(nsn, &format!("net.ipv4.conf.{}.rp_filter", pi.client_if), "0")?;
            }
        }
        let p0 = &self.paths[0];
        ns::ip(
            Some(&self.client_ns),
            &[
                "route",
                "add",
                "default",
                "via",
                &p0.server_ip.to_string(),
                "dev",
                &p0.client_if,
            ],
        )?;
        ns::ip(
            Some(&self.server_ns),
            &[
                "route",
                "add",
                "default",
                "via",
                &p0.client_ip.to_string(),
                "dev",
                &p0.server_if,
            ],
        )?;
        // Congestion control is per namespace; sockets inherit it at creation.
        let cc = &self.spec.congestion_control;
        for nsn in [&self.client_ns, &self.server_ns] {
            let avail = ns::sysctl_get(nsn, "net.ipv4.tcp_available_congestion_control")?;
            if !avail.split_whitespace().any(|a| a == cc) {
                return Err(Error::CongestionControl {
                    cc: cc.clone(),
                    available: avail,
                });
            }
            allow_congestion_control(cc)?;
            ns::sysctl(nsn, "net.ipv4.tcp_congestion_control", cc)?;
            // No cached ssthresh/RTT between runs and paths: every run starts cold.
            ns::sysctl(nsn, "net.ipv4.tcp_no_metrics_save", "1")?;
            if let Some(max) = self.opts.tcp_buffer_max {
                for key in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
                    let cur = ns::sysctl_get(nsn, key)?;
                    let f: Vec<&str> = cur.split_whitespace().collect();
                    if f.len() == 3 {
                        ns::sysctl(nsn, key, &format!("{} {} {max}", f[0], f[1]))?;
                    }
                }
            }
        }
        if self.opts.mptcp {
            let n = self.paths.len().to_string();
            for nsn in [&self.client_ns, &self.server_ns] {
                ns::sysctl(nsn, "net.mptcp.enabled", "1")?;
                ns::ip(
                    Some(nsn),
                    &["mptcp", "limits", "set", "subflow", &n, "add_addr_accepted", &n],
                )?;
            }
            for pi in &self.paths {
                ns::ip(
                    Some(&self.client_ns),
                    &[
                        "mptcp",
                        "endpoint",
                        "add",
                        &pi.client_ip.to_string(),
                        "dev",
                        &pi.client_if,
                        "subflow",
                    ],
                )?;
            }
        }
        tracing::info!(client = %self.client_ns, server = %self.server_ns, paths = self.paths.len(), "testbed up");
        Ok(())
    }

    /// The spec this testbed runs (rates at scale).
    pub fn spec(&self) -> &TestbedSpec {
        &self.spec
    }
    pub fn options(&self) -> &TestbedOptions {
        &self.opts
    }
    /// The scale factor every rate was multiplied by.
    pub fn scale(&self) -> f64 {
        self.spec.scale
    }
    pub fn paths(&self) -> &[PathInfo] {
        &self.paths
    }
    /// The path of that name.
    pub fn path(&self, name: &str) -> Option<&PathInfo> {
        self.paths.iter().find(|p| p.name == name)
    }
    /// Namespace name of a side (for `ip netns exec`).
    pub fn netns(&self, side: Side) -> &str {
        match side {
            Side::Client => &self.client_ns,
            Side::Server => &self.server_ns,
        }
    }
    /// The emulator's namespace (rattan runs there).
    pub fn emulator_netns(&self) -> &str {
        &self.emu_ns
    }
    /// Every namespace of this testbed.
    pub fn namespaces(&self) -> [&str; 3] {
        [&self.client_ns, &self.emu_ns, &self.server_ns]
    }

    /// Runs `f` on a thread inside the namespace of `side` and returns its result; a panic
    /// in `f` propagates to the caller (and this testbed is cleaned up while unwinding).
    pub fn run_in<R: Send>(&self, side: Side, f: impl FnOnce() -> R + Send) -> Result<R> {
        ns::run_in(self.netns(side), f)
    }

    /// Starts `f` on a new thread inside the namespace of `side`. Join it before the testbed
    /// is dropped; its sockets die with the namespace anyway.
    pub fn spawn_in<R: Send + 'static>(
        &self,
        side: Side,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<std::thread::JoinHandle<Result<R>>> {
        let name = self.netns(side).to_string();
        let thread = format!("ns:{name}");
        std::thread::Builder::new()
            .name(thread.clone())
            .spawn(move || {
                ns::enter(&name)?;
                Ok(f())
            })
            .map_err(|source| Error::Thread { name: thread, source })
    }

    /// A command that runs `program` inside the namespace of `side` (`ip netns exec`).
    /// Processes still running in the namespace are killed when the testbed stops.
    pub fn command(&self, side: Side, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", self.netns(side), program]);
        c
    }

    /// Applies `step` to path `index` now (outside the schedule).
    pub fn set_path(&self, index: usize, step: &PathStep) -> Result<()> {
        self.controls
            .get(index)
            .ok_or(Error::NoPath {
                index,
                count: self.controls.len(),
            })?
            .apply(step, self.opts.loss_both_directions)
    }

    fn mark_now(&self) -> Mark {
        Mark {
            at: Instant::now(),
            cpu: CpuSnapshot::now(),
            lateness: self
                .controls
                .iter()
                .map(|c| (c.lateness_down.snapshot(), c.lateness_up.snapshot()))
                .collect(),
            packets: self.emu.as_ref().map_or(PacketStats::default(), |e| e.packet_stats()),
            egress_ip_bytes: match self.opts.datapath {
                Datapath::Rattan => None,
                Datapath::KernelRate => self.egress_ip_bytes(),
            },
        }
    }

    /// Per path, IP-layer bytes the emulator's veth towards the client has sent (what the
    /// kernel's rate stage delivered); `None` if the counters cannot be read.
    fn egress_ip_bytes(&self) -> Option<Vec<u64>> {
        let all = ns::if_counters(&self.emu_ns).ok()?;
        Some(
            (1..=self.paths.len())
                .map(|n| {
                    let dev = emu_client_dev(n);
                    all.iter()
                        .find(|(k, _)| *k == dev)
                        .map_or(0, |(_, c)| c.tx_bytes.saturating_sub(14 * c.tx_packets))
                })
                .collect(),
        )
    }

    /// Monitors count from now ([`Testbed::play`] does this too).
    pub fn reset_monitors(&self) {
        let m = self.mark_now();
        *self.mark.lock().unwrap_or_else(|p| p.into_inner()) = Some(m);
    }

    /// What the fidelity monitors saw since the last [`Testbed::play`] or
    /// [`Testbed::reset_monitors`], judged with the default tolerances.
    pub fn fidelity(&self) -> Fidelity {
        self.fidelity_with(&Tolerances::default())
    }

    /// [`Testbed::fidelity`] with other tolerances.
    pub fn fidelity_with(&self, tol: &Tolerances) -> Fidelity {
        let b = self.mark_now();
        let a = self
            .mark
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| b.clone());
        // Interval in schedule time: relative to the player's start when playing, else
        // the first step holds throughout.
        let started = self
            .player
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|p| p.started);
        let rel = |t: Instant| started.map_or(0.0, |s| t.saturating_duration_since(s).as_secs_f64());
        let (from, to) = (rel(a.at), rel(b.at));
        let paths: Vec<PathInput> = self
            .spec
            .paths
            .iter()
            .map(|p| PathInput {
                name: p.name.clone(),
                // With the rate in the kernel the count is taken after the loss stage.
                configured_mbps: match self.opts.datapath {
                    Datapath::Rattan => p.delivered_rate_between(from, to),
                    Datapath::KernelRate => p.delivered_after_loss_between(from, to),
                },
            })
            .collect();
        let mut f = fidelity::assess(&a, &b, &paths, tol);
        f.datapath = self.opts.datapath.name().into();
        f
    }

    /// Starts the player: t = 0 is now; every path's steps are applied at their times
    /// (t = 0 state again, then each change). Calling it again restarts the schedule.
    pub fn play(&self) -> Result<()> {
        let mut slot = self.player.lock().unwrap();
        if let Some(p) = slot.take() {
            drop(p.stop_tx);
            let _ = p.thread.join();
        }
        let mut events: Vec<(f64, usize, PathStep)> = self
            .spec
            .paths
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.steps.iter().map(move |s| (s.t_s, i, *s)))
            .filter(|(t, _, _)| *t <= self.spec.duration_s || self.spec.duration_s <= 0.0)
            .collect();
        events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let controls = self.controls.clone();
        let applied = self.applied.clone();
        applied.lock().unwrap().clear();
        let names: Vec<String> = self.paths.iter().map(|p| p.name.clone()).collect();
        let loss_both = self.opts.loss_both_directions;
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("fbdt-emu-player".into())
            .spawn(move || {
                for (t, i, step) in events {
                    let at = started + Duration::from_secs_f64(t);
                    let now = Instant::now();
                    if at > now {
                        match stop_rx.recv_timeout(at - now) {
                            Err(mpsc::RecvTimeoutError::Timeout) => {}
                            _ => return,
                        }
                    }
                    if let Err(e) = controls[i].apply(&step, loss_both) {
                        tracing::warn!("player: path {}: {e}", names[i]);
                    }
                    applied.lock().unwrap().push(AppliedStep {
                        path: names[i].clone(),
                        t_s: t,
                        applied_s: started.elapsed().as_secs_f64(),
                        step,
                    });
                }
            })
            .map_err(|source| Error::Thread {
                name: "fbdt-emu-player".into(),
                source,
            })?;
        *slot = Some(Player {
            stop_tx,
            thread,
            started,
        });
        drop(slot);
        self.reset_monitors();
        Ok(())
    }

    /// Seconds since [`Testbed::play`], if playing.
    pub fn elapsed_s(&self) -> Option<f64> {
        self.player
            .lock()
            .unwrap()
            .as_ref()
            .map(|p| p.started.elapsed().as_secs_f64())
    }

    /// Steps the player has applied so far (for plots: shade outages and scans).
    pub fn applied_steps(&self) -> Vec<AppliedStep> {
        self.applied.lock().unwrap().clone()
    }

    /// Per-path interface counters (client and server ends), in path order.
    pub fn path_counters(&self) -> Result<Vec<PathCounters>> {
        let cli = ns::if_counters(&self.client_ns)?;
        let srv = ns::if_counters(&self.server_ns)?;
        let find =
            |v: &[(String, IfCounters)], n: &str| v.iter().find(|(k, _)| k == n).map(|(_, c)| *c).unwrap_or_default();
        Ok(self
            .paths
            .iter()
            .map(|p| PathCounters {
                name: p.name.clone(),
                client: find(&cli, &p.client_if),
                server: find(&srv, &p.server_if),
            })
            .collect())
    }

    /// Stops the player and the emulator, kills every process left in the namespaces and
    /// removes them. Idempotent; also done on drop.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        // Processes first, while the names still resolve.
        for n in [&self.client_ns, &self.server_ns, &self.emu_ns] {
            let me = std::process::id() as i32;
            for pid in ns::pids(n) {
                if pid != me {
                    // SAFETY: kill(2) on a pid the kernel listed in our namespace.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        if let Some(p) = self.player.lock().unwrap_or_else(|e| e.into_inner()).take() {
            drop(p.stop_tx);
            let _ = p.thread.join();
        }
        self.controls = Arc::new(Vec::new());
        if let Some(mut e) = self.emu.take() {
            e.stop();
        }
        // rattan's NetNs handles unmount and unlink their namespace when the last one goes.
        self.netns.clear();
        for n in [&self.client_ns, &self.emu_ns, &self.server_ns] {
            ns::destroy(n);
        }
        cleanup::unregister(&[&self.client_ns, &self.emu_ns, &self.server_ns]);
    }
}

/// Outside the initial namespace the kernel only accepts a default congestion control
/// listed in the host-wide `net.ipv4.tcp_allowed_congestion_control` (else EPERM). Adds `cc`
/// to that list if missing (additive; never removed, other testbeds may rely on it).
fn allow_congestion_control(cc: &str) -> Result<()> {
    const P: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    let cur = std::fs::read_to_string(P).map_err(Error::file(P))?;
    if cur.split_whitespace().any(|a| a == cc) {
        return Ok(());
    }
    let new = format!("{} {cc}", cur.trim());
    std::fs::write(P, new.as_bytes()).map_err(Error::file(P))?;
    tracing::info!("added {cc} to {P}");
    Ok(())
}

impl Emulator {
    /// Moves the path controls out and parks the emulator in `slot` (so the testbed can
    /// share the controls with the player thread).
    fn take_paths(mut self, slot: &mut Option<Emulator>) -> Vec<PathControl> {
        let v = std::mem::take(&mut self.paths);
        *slot = Some(self);
        v
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop();
    }
}
