//! Putting the two ends on a testbed: a TUN device in the client and the server namespace,
//! addresses and MTU, and one loop thread in each.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Instant as WallClock;

use cotag::LINKS;
use fbdt_emu::{Side, Testbed};

use crate::device_side::DeviceSide;
use crate::gateway_side::GatewaySide;
use crate::io::Clock;
pub use crate::params::{CotagParams, Mode, COHORT_MARGIN, DEVICE_LIVENESS_MIN_US, PACE_BURST_PACKETS};
use crate::stats::{LinkStats, SideStats};
use crate::tun::Tun;
use crate::{Ends, Error, SideSetup, IP_UDP_HEADER};

/// The TUN device's name in both namespaces.
pub const TUN_NAME: &str = "cotag0";
/// TUN addresses: a /24 of its own, apart from the paths' 10.200.i.0/24.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 1);
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 2);
const DOWN_PORT: u16 = 47_100;
const UP_PORT: u16 = 47_200;

/// The largest inner IP packet whose coded datagram fits an outer MTU: the outer IP + UDP
/// headers, COTAG's fixed header, one coefficient per cohort member and the 2-byte length
/// (cohorts of one size: no padding). 1500 and 128: 1334; 1500 and 64: 1398.
pub fn inner_mtu(outer_mtu: usize, max_cohort: usize) -> usize {
    outer_mtu.saturating_sub(IP_UDP_HEADER + cotag::wire::CodedPacket::header_len(max_cohort) + cotag::wire::LEN_PREFIX)
}

/// COTAG (or `dual-rr`) running between a testbed's client and server namespaces. TCP
/// between [`CLIENT_ADDR`] and [`SERVER_ADDR`] goes through it.
pub struct CotagLink {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<fbdt_emu::Result<Result<SideStats, Error>>>>,
}

impl CotagLink {
    /// Sets up both TUN devices and starts both loops. `schedule_start` is when the testbed's
    /// player started (`Testbed::play`): the APs' pacers read the path rates from there.
    pub fn start(tb: &Testbed, mode: Mode, schedule_start: WallClock) -> Result<CotagLink, Error> {
        let paths = tb.paths();
        if paths.len() != LINKS {
            return Err(Error::Setup(format!(
                "COTAG needs a testbed of exactly {LINKS} paths, this one has {}",
                paths.len()
            )));
        }
        let outer = tb.options().mtu as usize;
        let mtu = match &mode {
            Mode::Cotag(p) => inner_mtu(outer, p.gateway.max_cohort),
            Mode::DualRr => outer - IP_UDP_HEADER,
        };
        let ends = |i: usize, port: u16| Ends {
            server: SocketAddr::from((paths[i].server_ip, port)),
            client: SocketAddr::from((paths[i].client_ip, port)),
        };
        let rates = [0, 1].map(|i| {
            tb.spec().paths[i]
                .steps
                .iter()
                .map(|s| (s.t_s, if s.scan { 0.0 } else { s.rate_mbps * 1e6 }))
                .collect()
        });
        let setup = SideSetup {
            mode,
            down: [ends(0, DOWN_PORT), ends(1, DOWN_PORT)],
            up: ends(0, UP_PORT),
            rates,
            outer_mtu: outer,
            clock: Clock::starting_at(schedule_start),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let mut link = CotagLink {
            stop: stop.clone(),
            threads: Vec::new(),
        };
        for (side, addr) in [(Side::Server, SERVER_ADDR), (Side::Client, CLIENT_ADDR)] {
            // Both devices carry vnet headers: the server's hands over TCP's super-packets,
            // the client's takes merged segments (crate::gso).
            let open = |side| {
                let tun = Tun::open(TUN_NAME)?;
                if side == Side::Server {
                    tun.offload_tso()?;
                }
                Ok::<_, std::io::Error>(tun)
            };
            let tun = tb
                .run_in(side, || open(side))?
                .map_err(|e| Error::Io("creating the TUN device", e))?;
            configure(tb, side, addr, mtu)?;
            let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
            let (setup, stop) = (setup.clone(), stop.clone());
            let thread = tb.spawn_in(side, move || {
                // Best effort: without it the loop still works, only later under load.
                let _ = crate::io::make_realtime(crate::io::LOOP_RT_PRIORITY);
                let built = match side {
                    Side::Server => GatewaySide::new(&setup, tun).map(|g| Box::new(move || g.run(stop)) as Runner),
                    Side::Client => DeviceSide::new(&setup, tun).map(|d| Box::new(move || d.run(stop)) as Runner),
                };
                match built {
                    Ok(run) => {
                        let _ = ready_tx.send(Ok(()));
                        run()
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        Err(e)
                    }
                }
            })?;
            link.threads.push(thread);
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(Error::Setup(format!("{side:?} end: {e}"))),
                Err(_) => return Err(Error::Setup(format!("{side:?} end ended before it was ready"))),
            }
        }
        Ok(link)
    }

    /// Stops both loops and returns their counters.
    pub fn stop(mut self) -> Result<LinkStats, Error> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::new();
        for t in self.threads.drain(..) {
            let r = t.join().map_err(|_| Error::Setup("a COTAG loop panicked".into()))?;
            out.push(r??);
        }
        let client = out.pop().unwrap_or_default();
        let server = out.pop().unwrap_or_default();
        Ok(LinkStats { server, client })
    }
}

impl Drop for CotagLink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

type Runner = Box<dyn FnOnce() -> Result<SideStats, Error> + Send>;

/// Address, MTU and up: `ip` in the namespace.
fn configure(tb: &Testbed, side: Side, addr: Ipv4Addr, mtu: usize) -> Result<(), Error> {
    let steps: [Vec<String>; 2] = [
        vec![
            "addr".into(),
            "add".into(),
            format!("{addr}/24"),
            "dev".into(),
            TUN_NAME.into(),
        ],
        vec![
            "link".into(),
            "set".into(),
            TUN_NAME.into(),
            "mtu".into(),
            mtu.to_string(),
            "up".into(),
        ],
    ];
    for args in steps {
        let out = tb
            .command(side, "ip")
            .args(&args)
            .output()
            .map_err(|e| Error::Io("running ip", e))?;
        if !out.status.success() {
            return Err(Error::Setup(format!(
                "ip {} in the {side:?} namespace: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}
