//! The path emulator: one rattan-core instance in the emulator namespace, per path a veth
//! pair to the client, one to the server, and in each direction rate → delay → loss cells
//! (or, with [`Datapath::KernelRate`], delay → loss cells and an HTB rate limit on the egress veth).
//!
//! We drive `rattan_core::core::RattanCore` directly instead of `RattanRadix` because the
//! radix creates its own namespaces (`ns-left-<random>`, …) and addresses; we need names
//! under our prefix (for cleanup of crashed runs) and N paths between one client and one
//! server namespace with our own addressing.

use std::{
    net::{IpAddr, Ipv4Addr},
    sync::{
        atomic::{AtomicU64, Ordering},
        mpsc, Arc, Mutex,
    },
    time::Duration,
};

use rand010::{rngs::StdRng, SeedableRng};
use rattan_core::{
    cells::{
        bandwidth::{
            queue::{DropTailQueue, DropTailQueueConfig},
            BwCellConfig, BwType,
        },
        delay::DelayCellConfig,
        external::{VirtualEthernet, VirtualEthernetId},
        loss::LossCell,
        StdPacket,
    },
    core::RattanCore,
    metal::io::af_packet::AfPacketDriver,
    netem_trace::Bandwidth,
};
use rattan_env::{
    netns::NetNs,
    veth::{MacAddr, VethCell, VethPair, VethPairBuilder},
};
use tokio_util::sync::CancellationToken;

use crate::{
    error::{Error, Result},
    probe::{Lateness, ProbeCell},
    radio::{Doze, RadioCell},
    spec::{bps, PathStep},
    testbed::options::{Datapath, TestbedOptions},
};

mod direct;
pub(crate) mod host_io;
pub mod offload;
mod path_control;
mod ring;

pub use host_io::{allowed_cpus, emulator_cpu, endpoint_cpus, endpoint_rps_mask, PacketStats, PACKET_SOCKET_BUFFER};
use host_io::{close_fds, grow_socket_buffers, packet_socket_fds, pin_to_emulator_cpu, set_realtime};
pub(crate) use path_control::PathControl;
use path_control::{emu_err, KernelRate, RateStage, Stages};

/// Name prefix of the emulator's runtime threads (the fidelity monitors find them by it).
pub(crate) const EMU_THREAD: &str = "fbdt-emu-rt";

/// Addresses and names of one path's two veth pairs.
#[derive(Debug, Clone)]
pub(crate) struct PairSpec {
    /// Temporary names while the pairs are created inside the emulator namespace.
    pub cli_tmp: String,
    pub emu_c: String,
    pub emu_s: String,
    pub srv_tmp: String,
    pub cli_mac: [u8; 6],
    pub emu_c_mac: [u8; 6],
    pub emu_s_mac: [u8; 6],
    pub srv_mac: [u8; 6],
    pub cli_ip: Ipv4Addr,
    pub srv_ip: Ipv4Addr,
    pub prefix: u8,
    pub emu_c_ip: Ipv4Addr,
    pub emu_s_ip: Ipv4Addr,
    pub queue_packets: usize,
    /// Both directions doze when idle (see [`crate::radio`]).
    pub radio: Option<Doze>,
    /// Both directions deliver in bursts (the direct datapath only).
    pub bursts: Option<fbdt_scenario::Bursts>,
    pub initial: PathStep,
    pub seed: u64,
}

/// A link the data direction of some pairs crosses before their own stages (a shared
/// bottleneck); only the `direct` datapath builds one.
#[derive(Debug, Clone)]
pub(crate) struct SharedLink {
    /// Indices into the emulator's pairs.
    pub members: Vec<usize>,
    pub rate_bps: u64,
    pub queue_packets: usize,
}

/// A running emulator. Dropping it stops rattan, closes its sockets and deletes the veths.
pub(crate) struct Emulator {
    pub paths: Vec<PathControl>,
    /// The emulator's AF_PACKET sockets, for their drop counters.
    packet_fds: Vec<i32>,
    /// Drops read so far (reading PACKET_STATISTICS resets the kernel's counters).
    drops: Mutex<PacketStats>,
    stop_tx: Option<mpsc::Sender<()>>,
    /// The direct datapath's stop switch (`None` with rattan).
    direct: Option<direct::Running>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the emulator thread hands back once it runs.
struct Started {
    controls: Vec<PathControl>,
    packet_fds: Vec<i32>,
    direct: Option<direct::Running>,
}

/// One emulator is built at a time per process, so the AF_PACKET sockets it opens can be
/// told apart from others (see [`packet_socket_fds`]).
static BUILD_LOCK: Mutex<()> = Mutex::new(());

impl Emulator {
    /// Creates the veth pairs (client↔emu, emu↔server per path) and starts rattan inside
    /// namespace `emu_ns`.
    pub fn start(
        cli: Arc<NetNs>,
        emu: Arc<NetNs>,
        srv: Arc<NetNs>,
        emu_name: &str,
        pairs: Vec<PairSpec>,
        shared: Option<SharedLink>,
        opts: &TestbedOptions,
    ) -> Result<Self> {
        if shared.is_some() && opts.datapath != Datapath::Direct {
            return Err(Error::Emulator(format!(
                "a shared bottleneck needs the direct datapath (this testbed runs {})",
                opts.datapath.name()
            )));
        }
        if pairs.iter().any(|p| p.bursts.is_some()) && opts.datapath != Datapath::Direct {
            return Err(Error::Emulator(format!(
                "a path that delivers in bursts needs the direct datapath (this testbed runs {})",
                opts.datapath.name()
            )));
        }
        let opts = opts.clone();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Started>>();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let emu_name = emu_name.to_string();
        let thread_name = match opts.datapath {
            // The direct datapath's loop runs in this thread: named so the monitors count it.
            Datapath::Direct => EMU_THREAD,
            _ => "fbdt-emu",
        };
        let thread = std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || {
                if let Err(e) = crate::ns::enter(&emu_name) {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
                if opts.datapath == Datapath::Direct {
                    run_direct(&cli, &emu, &srv, &pairs, shared.as_ref(), &opts, ready_tx);
                    return;
                }
                let guard = BUILD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
                let before = packet_socket_fds();
                let built = build(&cli, &emu, &srv, &emu_name, &pairs, &opts);
                let ours: Vec<i32> = packet_socket_fds().difference(&before).copied().collect();
                drop(guard);
                if let Some(bytes) = opts.packet_socket_buffer {
                    for fd in &ours {
                        grow_socket_buffers(*fd, bytes);
                    }
                }
                let (core, rt, veths, controls) = match built {
                    Ok(b) => b,
                    Err((e, veths)) => {
                        close_fds(&ours);
                        drop(veths);
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                for (c, p) in controls.iter().zip(&pairs) {
                    if let Err(e) = c.apply(&p.initial, opts.loss_both_directions) {
                        let _ = ready_tx.send(Err(e));
                    }
                }
                let _ = ready_tx.send(Ok(Started {
                    controls,
                    packet_fds: ours.clone(),
                    direct: None,
                }));
                // Run until told to stop (or the testbed is gone).
                let _ = stop_rx.recv();
                drop(core);
                if let Ok(rt) = Arc::try_unwrap(rt) {
                    rt.shutdown_timeout(Duration::from_secs(2));
                }
                // rattan-core 0.1.1 never closes its AF_PACKET sockets; a long-lived process
                // (the lab runs many testbeds) would run out of fds and keep the namespace alive.
                close_fds(&ours);
                drop(veths);
            })
            .map_err(|source| Error::Thread {
                name: thread_name.into(),
                source,
            })?;
        let started = match ready_rx.recv() {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(Error::Emulator("emulator thread died while starting".into()));
            }
        };
        Ok(Self {
            paths: started.controls,
            packet_fds: started.packet_fds,
            drops: Mutex::new(PacketStats::default()),
            stop_tx: Some(stop_tx),
            direct: started.direct,
            thread: Some(thread),
        })
    }

    /// Packets the kernel handed to the emulator's sockets and packets it dropped because
    /// the emulator did not read them in time (receive buffer full), since the start.
    pub fn packet_stats(&self) -> PacketStats {
        let mut acc = self.drops.lock().unwrap_or_else(|p| p.into_inner());
        if self.stop_tx.is_some() {
            for fd in &self.packet_fds {
                let mut st = libc::tpacket_stats {
                    tp_packets: 0,
                    tp_drops: 0,
                };
                let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
                // SAFETY: getsockopt into a correctly sized struct on an fd this emulator
                // owns and keeps open while it runs (stop_tx is Some).
                let rc = unsafe {
                    libc::getsockopt(
                        *fd,
                        libc::SOL_PACKET,
                        libc::PACKET_STATISTICS,
                        &mut st as *mut _ as *mut libc::c_void,
                        &mut len,
                    )
                };
                if rc == 0 {
                    // The kernel counts drops in tp_packets too.
                    acc.received += u64::from(st.tp_packets);
                    acc.dropped += u64::from(st.tp_drops);
                }
            }
        }
        let mut stats = *acc;
        if let Some(d) = &self.direct {
            // A running total, not reset by reading.
            stats.dropped += d.send_drops.load(Ordering::Relaxed);
        }
        stats
    }

    pub fn stop(&mut self) {
        self.stop_tx.take();
        if let Some(d) = &self.direct {
            d.stop();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.stop();
    }
}

type Built = (
    RattanCore<AfPacketDriver>,
    Arc<tokio::runtime::Runtime>,
    Vec<Arc<VethPair>>,
    Vec<PathControl>,
);

fn build(
    cli: &Arc<NetNs>,
    emu: &Arc<NetNs>,
    srv: &Arc<NetNs>,
    emu_name: &str,
    pairs: &[PairSpec],
    opts: &TestbedOptions,
) -> std::result::Result<Built, (Error, Vec<Arc<VethPair>>)> {
    let (threads, rt_priority, datapath, mtu) = (opts.emu_threads, opts.emu_rt_priority, opts.datapath, opts.mtu);
    let mut veths: Vec<Arc<VethPair>> = Vec::new();
    macro_rules! tri {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => return Err((emu_err(e), veths)),
            }
        };
    }
    macro_rules! tri_own {
        ($e:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) => return Err((e, veths)),
            }
        };
    }
    let ve = match make_veths(cli, emu, srv, pairs, &mut veths) {
        Ok(v) => v,
        Err(e) => return Err((e, veths)),
    };
    let rt = tri!(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name(EMU_THREAD)
        .on_thread_start(move || {
            if let Some(p) = rt_priority {
                set_realtime(p)
            }
        })
        .enable_all()
        .build())
    .into();
    let rt: Arc<tokio::runtime::Runtime> = rt;
    let mut core = RattanCore::<AfPacketDriver>::new(rt.clone(), CancellationToken::new(), CancellationToken::new());
    let mut controls = Vec::new();
    for (i, (p, (emu_c, emu_s))) in pairs.iter().zip(ve).enumerate() {
        let n = i + 1;
        let mut id_c = VirtualEthernetId::new();
        id_c.set_ns_id(1);
        id_c.set_veth_id(n as u8);
        let mut id_s = VirtualEthernetId::new();
        id_s.set_ns_id(2);
        id_s.set_veth_id(n as u8);
        tri!(core.build_cell(format!("c{n}"), move |h: &tokio::runtime::Handle| {
            let _g = h.enter();
            VirtualEthernet::<AfPacketDriver>::new(emu_c, id_c)
        }));
        tri!(core.build_cell(format!("s{n}"), move |h: &tokio::runtime::Handle| {
            let _g = h.enter();
            VirtualEthernet::<AfPacketDriver>::new(emu_s, id_s)
        }));
        let init = p.initial;
        let rate = match datapath {
            // Never built here (see `run_direct`); rattan's cells stand in if it were.
            Datapath::Rattan | Datapath::Direct => {
                let q = DropTailQueueConfig::new(p.queue_packets, None, BwType::NetworkLayer);
                let mk_bw = |q: DropTailQueueConfig| {
                    BwCellConfig::<StdPacket, DropTailQueue<StdPacket>>::new(
                        Bandwidth::from_bps(bps(init.rate_mbps)),
                        q,
                        BwType::NetworkLayer,
                    )
                    .into_factory()
                };
                let down = tri!(core.build_cell(format!("bwd{n}"), mk_bw(q.clone())));
                let up = tri!(core.build_cell(format!("bwu{n}"), mk_bw(q)));
                RateStage::Cells { down, up }
            }
            Datapath::KernelRate => {
                let k = KernelRate {
                    netns: emu_name.to_string(),
                    down_dev: p.emu_c.clone(),
                    up_dev: p.emu_s.clone(),
                    // One MTU frame with its Ethernet header (one class: only its granularity).
                    quantum: mtu + 14,
                    now_bps: Mutex::new([0; 2]),
                    probe_bps: [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))],
                };
                tri_own!(k.install(bps(init.rate_mbps), p.queue_packets));
                RateStage::Kernel(k)
            }
        };
        let d = Duration::from_secs_f64(init.delay_ms / 1e3);
        let delay_down = tri!(core.build_cell(format!("dld{n}"), DelayCellConfig::new(d).into_factory::<StdPacket>()));
        let delay_up = tri!(core.build_cell(format!("dlu{n}"), DelayCellConfig::new(d).into_factory::<StdPacket>()));
        let (seed_d, seed_u) = (p.seed, p.seed ^ 0x5eed_0000_0000_0001);
        let loss_down = tri!(core.build_cell(format!("lsd{n}"), move |h: &tokio::runtime::Handle| {
            let _g = h.enter();
            LossCell::<StdPacket, StdRng>::new(vec![0.0], StdRng::seed_from_u64(seed_d))
        }));
        let loss_up = tri!(core.build_cell(format!("lsu{n}"), move |h: &tokio::runtime::Handle| {
            let _g = h.enter();
            LossCell::<StdPacket, StdRng>::new(vec![0.0], StdRng::seed_from_u64(seed_u))
        }));
        let (lateness_down, lateness_up) = (Arc::new(Lateness::default()), Arc::new(Lateness::default()));
        let link_rate = |i: usize| match &rate {
            RateStage::Cells { .. } => None,
            RateStage::Kernel(k) => Some(k.probe_bps[i].clone()),
        };
        for (id, l, link) in [
            (format!("prd{n}"), &lateness_down, link_rate(0)),
            (format!("pru{n}"), &lateness_up, link_rate(1)),
        ] {
            let l = l.clone();
            tri!(core.build_cell(id, move |h: &tokio::runtime::Handle| {
                let _g = h.enter();
                Ok::<_, rattan_core::error::Error>(ProbeCell::<StdPacket>::new(l, link))
            }));
        }
        let radio_rate_bps = Arc::new(AtomicU64::new(bps(init.rate_mbps)));
        let radio_wakeups = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        if let Some(doze) = p.radio {
            for (id, wakeups) in [
                (format!("rdd{n}"), &radio_wakeups[0]),
                (format!("rdu{n}"), &radio_wakeups[1]),
            ] {
                let (rate, wakeups) = (radio_rate_bps.clone(), wakeups.clone());
                tri!(core.build_cell(id, move |h: &tokio::runtime::Handle| {
                    let _g = h.enter();
                    Ok::<_, rattan_core::error::Error>(RadioCell::<StdPacket>::new(doze, rate, wakeups))
                }));
            }
        }
        // Data direction (server → client): s → [radio →] rate → delay → probe → loss → c.
        // ACK direction the same stages reversed; its loss is 0 unless loss_both. With the
        // rate in the kernel the chain has no rate cell and the rate follows on c's egress.
        let chain = |from: &str, radio: &str, rate: &str, delay: &str, probe: &str, loss: &str, to: &str| {
            let mut v = vec![format!("{from}{n}")];
            if p.radio.is_some() {
                v.push(format!("{radio}{n}"));
            }
            if matches!(datapath, Datapath::Rattan) {
                v.push(format!("{rate}{n}"));
            }
            v.extend([delay, probe, loss, to].map(|c| format!("{c}{n}")));
            v
        };
        for c in [
            chain("s", "rdd", "bwd", "dld", "prd", "lsd", "c"),
            chain("c", "rdu", "bwu", "dlu", "pru", "lsu", "s"),
        ] {
            for w in c.windows(2) {
                core.link_cell(w[0].clone(), w[1].clone());
            }
        }
        controls.push(PathControl {
            stages: Stages::Rattan {
                rate,
                delay_down,
                delay_up,
                loss_down,
                loss_up,
            },
            last_rate_bps: Mutex::new(bps(init.rate_mbps)),
            lateness_down,
            lateness_up,
            radio_rate_bps,
            radio_wakeups,
            crossed_bottleneck: Arc::default(),
        });
    }
    tri!(core.spawn_rattan());
    tri!(core.start_rattan());
    Ok((core, rt, veths, controls))
}

/// Creates each path's two veth pairs (client↔emulator, emulator↔server) and returns the
/// emulator-side ends (towards the client, towards the server). Every pair made is pushed to
/// `veths` at once, so a failure part-way still deletes them.
fn make_veths(
    cli: &Arc<NetNs>,
    emu: &Arc<NetNs>,
    srv: &Arc<NetNs>,
    pairs: &[PairSpec],
    veths: &mut Vec<Arc<VethPair>>,
) -> Result<Vec<(Arc<VethCell>, Arc<VethCell>)>> {
    let mut ve = Vec::new();
    for p in pairs {
        let v4 = |ip: Ipv4Addr, pfx: u8| (IpAddr::V4(ip), pfx);
        // Created inside the emulator namespace (the builder's thread inherits it), so the
        // temporary names only have to be unique there.
        let c = VethPairBuilder::new()
            .name(p.cli_tmp.clone(), p.emu_c.clone())
            .mac_addr(MacAddr::new(p.cli_mac), MacAddr::new(p.emu_c_mac))
            .ip_addr(v4(p.cli_ip, p.prefix), v4(p.emu_c_ip, 32))
            .namespace(Some(cli.clone()), Some(emu.clone()))
            .build(0)
            .map_err(emu_err)?;
        veths.push(c.clone());
        let s = VethPairBuilder::new()
            .name(p.emu_s.clone(), p.srv_tmp.clone())
            .mac_addr(MacAddr::new(p.emu_s_mac), MacAddr::new(p.srv_mac))
            .ip_addr(v4(p.emu_s_ip, 32), v4(p.srv_ip, p.prefix))
            .namespace(Some(emu.clone()), Some(srv.clone()))
            .build(0)
            .map_err(emu_err)?;
        veths.push(s.clone());
        ve.push((c.right.clone(), s.left.clone()));
    }
    Ok(ve)
}

/// The emulator thread with the direct datapath: builds the veths and sockets, reports
/// ready, runs the loop until stopped, then deletes the veths.
fn run_direct(
    cli: &Arc<NetNs>,
    emu: &Arc<NetNs>,
    srv: &Arc<NetNs>,
    pairs: &[PairSpec],
    shared: Option<&SharedLink>,
    opts: &TestbedOptions,
    ready_tx: mpsc::Sender<Result<Started>>,
) {
    let mut veths = Vec::new();
    let prepared = (|| {
        let ve = make_veths(cli, emu, srv, pairs, &mut veths)?;
        let wake = direct::wake_fd()?;
        let mut controls = Vec::new();
        let mut setups = Vec::new();
        for p in pairs {
            let knobs = direct::knobs(&p.initial, &wake);
            let control = PathControl::new(Stages::Direct(knobs.clone()), p.initial);
            setups.push(direct::PathSetup {
                knobs,
                queue_packets: p.queue_packets,
                radio: p.radio,
                bursts: p.bursts,
                lateness: [control.lateness_down.clone(), control.lateness_up.clone()],
                radio_rate_bps: control.radio_rate_bps.clone(),
                radio_wakeups: control.radio_wakeups.clone(),
                seeds: [p.seed, p.seed ^ 0x5eed_0000_0000_0001],
            });
            control.apply(&p.initial, opts.loss_both_directions)?;
            controls.push(control);
        }
        let mode = direct::PortMode {
            // The largest frame: the MTU, its Ethernet header and a VLAN tag to spare.
            ring_frame: opts.packet_rx_ring.then_some(opts.mtu as usize + 18),
            qdisc_bypass: opts.qdisc_bypass,
            vnet_hdr: opts.gso_units().is_some(),
        };
        let shared = shared.map(|s| direct::SharedSetup {
            members: s.members.clone(),
            rate_bps: s.rate_bps,
            queue_packets: s.queue_packets,
            crossed: s
                .members
                .iter()
                .filter_map(|&i| controls.get(i).map(|c: &PathControl| c.crossed_bottleneck.clone()))
                .collect(),
        });
        let (lp, running) = direct::prepare(&ve, setups, shared, opts.mtu, opts.packet_socket_buffer, mode, wake)?;
        Ok::<_, Error>((lp, running, controls))
    })();
    let (lp, running, controls) = match prepared {
        Ok(p) => p,
        Err(e) => {
            drop(veths);
            let _ = ready_tx.send(Err(e));
            return;
        }
    };
    if let Some(p) = opts.emu_rt_priority {
        set_realtime(p);
    }
    if opts.receive_steered() {
        pin_to_emulator_cpu();
    }
    let _ = ready_tx.send(Ok(Started {
        controls,
        packet_fds: running.packet_fds.clone(),
        direct: Some(running),
    }));
    if let Err(e) = lp.run() {
        tracing::error!("direct datapath stopped: {e}");
    }
    drop(veths);
}
