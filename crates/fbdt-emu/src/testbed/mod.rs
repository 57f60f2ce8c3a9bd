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
    ns::{self, IfCounters, NS_PREFIX},
    spec::{PathPlan, PathStep, TestbedSpec},
};

mod monitor;
mod names;
pub(crate) mod options;
mod setup;

use names::{emu_client_dev, valid_ifname};
pub use options::{Datapath, TestbedOptions, DEFAULT_GSO_UNIT_AIRTIME_US};

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
    /// Wake-ups of a dozing radio (the scenario's `radio`) since the start: data direction
    /// (server → client), ACK direction. Zero when the radio never sleeps.
    pub radio_wakeups: [u64; 2],
}

/// What has crossed a shared bottleneck ([`Testbed::bottleneck_bytes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BottleneckBytes {
    /// Every scheme path that joins the link, together.
    pub scheme: u64,
    /// Each competing flow's path.
    pub competing: Vec<u64>,
}

impl BottleneckBytes {
    /// What crossed between `earlier` and this reading.
    pub fn since(&self, earlier: &BottleneckBytes) -> BottleneckBytes {
        BottleneckBytes {
            scheme: self.scheme.saturating_sub(earlier.scheme),
            competing: self
                .competing
                .iter()
                .enumerate()
                .map(|(k, b)| b.saturating_sub(earlier.competing.get(k).copied().unwrap_or(0)))
                .collect(),
        }
    }
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
    /// The competing flows' paths of a shared bottleneck (after `paths` in the emulator,
    /// numbered on from them), with their plans.
    competitors: Vec<(PathInfo, PathPlan)>,
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

impl Testbed {
    /// Creates namespaces, links, emulator, routing and MPTCP configuration, and applies
    /// every path's first step. The schedule's later steps run after [`Testbed::play`].
    pub fn start(spec: &TestbedSpec, opts: &TestbedOptions) -> Result<Self> {
        ns::privileged()?;
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
            .collect::<Vec<_>>();
        let competitors = spec
            .competitor_paths()
            .into_iter()
            .enumerate()
            .map(|(k, plan)| {
                let (i, n) = (paths.len() + k, paths.len() + k + 1);
                let own = format!("comp{}", k + 1);
                let ifname = if used.contains(&own) { format!("path{n}") } else { own };
                used.push(ifname.clone());
                let info = PathInfo {
                    index: i,
                    name: plan.name.clone(),
                    client_ip: Ipv4Addr::new(10, 200, n as u8, 1),
                    server_ip: Ipv4Addr::new(10, 200, n as u8, 2),
                    client_if: ifname.clone(),
                    server_if: ifname,
                    table: 100 + n as u32,
                };
                (info, plan)
            })
            .collect();
        let mut tb = Testbed {
            spec: spec.clone(),
            opts: opts.clone(),
            client_ns,
            server_ns,
            emu_ns,
            paths,
            competitors,
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
    /// The paths of a shared bottleneck's competing flows (`tcp#1`, …; none without one):
    /// no scheme's path, no MPTCP endpoint; [`crate::perf::download_over`] runs a flow.
    pub fn competitors(&self) -> Vec<&PathInfo> {
        self.competitors.iter().map(|(p, _)| p).collect()
    }

    /// Bytes that have crossed the shared bottleneck since the start (IP bytes, headers and
    /// retransmissions included): the scheme's paths together, then each competing flow's.
    /// `None` without a bottleneck.
    pub fn bottleneck_bytes(&self) -> Option<BottleneckBytes> {
        let b = self.spec.bottleneck.as_ref()?;
        let crossed = |i: usize| {
            self.controls
                .get(i)
                .map_or(0, |c| c.crossed_bottleneck.load(Ordering::Relaxed))
        };
        Some(BottleneckBytes {
            scheme: b.paths.iter().map(|&i| crossed(i)).sum(),
            competing: self.competitors.iter().map(|(p, _)| crossed(p.index)).collect(),
        })
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

    /// Prepares a reset of every TCP connection on path `index` at both ends, as when the
    /// radio's interface dies; [`ArmedReset::fire`] does it. In the client and the server
    /// namespace a shell waits on its stdin to `exec ss -K` (SOCK_DESTROY) on every connected
    /// socket whose local address is the path's there (listeners stay, so the path can be
    /// joined again); firing writes one line to both, so only the `ss` start and its netlink
    /// round trips lie between the call and the sockets' end. Each end's sockets fail with
    /// ECONNABORTED; nothing is sent to the peer.
    pub fn arm_reset(&self, index: usize) -> Result<ArmedReset> {
        let p = self.paths.get(index).ok_or(Error::NoPath {
            index,
            count: self.paths.len(),
        })?;
        let mut armed = ArmedReset { children: Vec::new() };
        for (netns, ip) in [(&self.client_ns, p.client_ip), (&self.server_ns, p.server_ip)] {
            let script = format!("read _ && exec ss -K -t -n state connected src {ip} >/dev/null");
            let mut c = Command::new("ip");
            c.args(["netns", "exec", netns.as_str(), "sh", "-c", &script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            let child = c.spawn().map_err(|e| Error::Command {
                command: format!("{c:?}"),
                status: format!("did not start: {e}"),
                stderr: String::new(),
            })?;
            armed.children.push(child);
        }
        Ok(armed)
    }

    /// Starts the player: t = 0 is now;    /// Starts the player: t = 0 is now; every path's steps are applied at their times
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
            .enumerate()
            .map(|(i, p)| PathCounters {
                name: p.name.clone(),
                client: find(&cli, &p.client_if),
                server: find(&srv, &p.server_if),
                radio_wakeups: self
                    .controls
                    .get(i)
                    .map(|c| {
                        c.radio_wakeups
                            .each_ref()
                            .map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
                    })
                    .unwrap_or_default(),
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

/// A reset waiting to be fired ([`Testbed::arm_reset`]); dropped unfired, its shells are
/// killed.
pub struct ArmedReset {
    children: Vec<std::process::Child>,
}

impl ArmedReset {
    /// Resets the path's connections at both ends now; returns when both are done.
    pub fn fire(mut self) -> Result<()> {
        use std::io::Write;
        for c in &mut self.children {
            if let Some(mut stdin) = c.stdin.take() {
                // A shell that died already shows in its exit status below.
                let _ = stdin.write_all(b"go\n");
            }
        }
        let mut first_err = None;
        for c in std::mem::take(&mut self.children) {
            let out = c.wait_with_output();
            let err = match out {
                Ok(o) if o.status.success() => None,
                Ok(o) => Some(Error::Command {
                    command: "ss -K".into(),
                    status: o.status.to_string(),
                    stderr: String::from_utf8_lossy(&o.stderr).trim().to_string(),
                }),
                Err(e) => Some(Error::Command {
                    command: "ss -K".into(),
                    status: format!("could not be waited for: {e}"),
                    stderr: String::new(),
                }),
            };
            first_err = first_err.or(err);
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for ArmedReset {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop();
    }
}
