//! One path's live controls: where its rate limit lives (rattan cells or the kernel's HTB)
//! and how a schedule step is applied to its cells.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use rattan_core::{
    cells::{
        bandwidth::{queue::DropTailQueue, BwCellConfig, BwCellControlInterface},
        delay::{DelayCellConfig, DelayCellControlInterface},
        loss::{LossCellConfig, LossCellControlInterface},
        ControlInterface, StdPacket,
    },
    netem_trace::Bandwidth,
};

use crate::{
    error::{Error, Result},
    probe::Lateness,
    spec::{bps, Direction, LinkMode, PathStep, HOLD_RATE_BPS},
};

/// A rate cell's control (rattan-core's, with a drop-tail queue).
pub(super) type Bw = BwCellControlInterface<StdPacket, DropTailQueue<StdPacket>>;

/// Where a path's rate limit lives (see [`Datapath`]).
pub(super) enum RateStage {
    /// rattan-core's rate cells, data direction and ACK direction.
    Cells { down: Arc<Bw>, up: Arc<Bw> },
    /// HTB on the emulator's egress veths: `down` towards the client, `up` towards the server.
    Kernel(KernelRate),
}

/// A rate limit in the kernel: on each egress veth of the emulator namespace, an HTB root
/// with one class (rate = ceil = the path's rate) whose leaf is a pfifo of the path's
/// queue size in packets — the same drop-tail queue rattan's rate cell has, in the kernel.
/// The emulator writes each packet to the veth after its delay and loss stages, so the
/// order is delay → loss → rate; for a FIFO link of constant delay the order does not change
/// when a packet arrives.
pub(super) struct KernelRate {
    pub(super) netns: String,
    pub(super) down_dev: String,
    pub(super) up_dev: String,
    pub(super) quantum: u32,
    /// The rates in the kernel now (down, up), bit/s: a step that changes only the delay
    /// does not touch the qdiscs.
    pub(super) now_bps: Mutex<[u64; 2]>,
    /// The same rates (down, up) for the lateness probes before the qdiscs.
    pub(super) probe_bps: [Arc<AtomicU64>; 2],
}

impl KernelRate {
    fn tc(&self, args: &[&str]) -> Result<()> {
        let mut c = std::process::Command::new("tc");
        c.args(["-n", &self.netns]).args(args);
        crate::ns::run(&mut c).map(|_| ())
    }

    fn class_args(&self, verb: &'static str, dev: &str, rate_bps: u64) -> Vec<String> {
        // HTB counts whole frames, the scenario's rate is IP bytes (as rattan's cells): a
        // full-size frame carries 14 bytes of Ethernet header more than its IP packet.
        let frame = f64::from(self.quantum);
        let r = format!("{}bit", (rate_bps as f64 * frame / (frame - 14.0)).round() as u64);
        [
            "class", verb, "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", &r, "ceil", &r, "quantum",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([self.quantum.to_string()])
        .collect()
    }

    pub(super) fn install(&self, rate_bps: u64, queue_packets: usize) -> Result<()> {
        let limit = queue_packets.max(1).to_string();
        for dev in [&self.down_dev, &self.up_dev] {
            self.tc(&[
                "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1",
            ])?;
            let a = self.class_args("add", dev, rate_bps);
            self.tc(&a.iter().map(String::as_str).collect::<Vec<_>>())?;
            self.tc(&[
                "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "pfifo", "limit", &limit,
            ])?;
        }
        *self.now_bps.lock().unwrap_or_else(|p| p.into_inner()) = [rate_bps; 2];
        for r in &self.probe_bps {
            r.store(rate_bps, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Sets the rate towards the client (`down`) and towards the server (`up`), bit/s.
    fn set_rate(&self, down: u64, up: u64) -> Result<()> {
        let mut now = self.now_bps.lock().unwrap_or_else(|p| p.into_inner());
        for (i, (dev, r)) in [(&self.down_dev, down), (&self.up_dev, up)].into_iter().enumerate() {
            if now[i] != r {
                let a = self.class_args("change", dev, r);
                self.tc(&a.iter().map(String::as_str).collect::<Vec<_>>())?;
                now[i] = r;
                self.probe_bps[i].store(r, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// Where a path's stages live.
pub(super) enum Stages {
    /// rattan-core cells (the rate possibly in the kernel).
    Rattan {
        rate: RateStage,
        delay_down: Arc<DelayCellControlInterface>,
        delay_up: Arc<DelayCellControlInterface>,
        loss_down: Arc<LossCellControlInterface>,
        loss_up: Arc<LossCellControlInterface>,
    },
    /// The direct datapath's loop ([`super::direct`]).
    Direct(Arc<super::direct::Knobs>),
}

/// Live control of one path's cells.
pub(crate) struct PathControl {
    pub(super) stages: Stages,
    /// Last positive rate (bit/s), kept by the rate cell during an outage.
    pub(super) last_rate_bps: Mutex<u64>,
    /// Release lateness after the delay cell: data direction (server → client), ACKs.
    pub lateness_down: Arc<Lateness>,
    pub lateness_up: Arc<Lateness>,
    /// The rate in force for the radio cells' idle judgement, bit/s.
    pub(super) radio_rate_bps: Arc<AtomicU64>,
    /// Wake-ups of the radio (data direction, ACK direction); 0 without radio sleep.
    pub radio_wakeups: [Arc<AtomicU64>; 2],
    /// IP bytes of the data direction that crossed the shared bottleneck (0 for a path
    /// that does not join one).
    pub crossed_bottleneck: Arc<AtomicU64>,
}

/// `rate_bps` × (1 − `loss`), never below the hold rate.
pub(super) fn after_loss(rate_bps: u64, loss: f64) -> u64 {
    ((rate_bps as f64 * (1.0 - loss.clamp(0.0, 1.0))).round() as u64).max(HOLD_RATE_BPS)
}

pub(super) fn emu_err(e: impl std::fmt::Display) -> Error {
    Error::Emulator(e.to_string())
}

impl PathControl {
    /// A control with fresh counters, at the rate of `initial`.
    pub(super) fn new(stages: Stages, initial: PathStep) -> Self {
        Self {
            stages,
            last_rate_bps: Mutex::new(bps(initial.rate_mbps)),
            lateness_down: Arc::new(Lateness::default()),
            lateness_up: Arc::new(Lateness::default()),
            radio_rate_bps: Arc::new(AtomicU64::new(bps(initial.rate_mbps))),
            radio_wakeups: [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))],
            crossed_bottleneck: Arc::default(),
        }
    }

    /// Applies one step. `loss_both` also drops on the client → server direction.
    pub fn apply(&self, s: &PathStep, loss_both: bool) -> Result<()> {
        let delay = Duration::from_secs_f64(s.delay_ms / 1e3);
        let (rate, loss_down, loss_up) = match s.mode() {
            LinkMode::Up => {
                let r = bps(s.rate_mbps);
                *self.last_rate_bps.lock().unwrap() = r;
                (r, s.loss, if loss_both { s.loss } else { 0.0 })
            }
            LinkMode::Outage => (*self.last_rate_bps.lock().unwrap(), 1.0, 1.0),
            LinkMode::Hold => (HOLD_RATE_BPS, s.loss, if loss_both { s.loss } else { 0.0 }),
        };
        // A one-way outage drops every packet of that direction at the loss stage (after
        // the delay line, so packets already in flight are dropped too: the cut is exact
        // at the path's exit). The kernel's rate stage keeps the step's own rate.
        let (kernel_down, kernel_up) = (loss_down, loss_up);
        let (loss_down, loss_up) = match s.one_way_outage {
            Some(Direction::Down) => (1.0, loss_up),
            Some(Direction::Up) => (loss_down, 1.0),
            None => (loss_down, loss_up),
        };
        // The radio judges idleness at the link's real rate: during a scan (Hold) the link
        // sends nothing, and the hold rate would keep the radio "busy" long after it.
        let link_rate = *self.last_rate_bps.lock().unwrap_or_else(|p| p.into_inner());
        self.radio_rate_bps.store(link_rate, Ordering::Relaxed);
        let (rate_stage, delay_down, delay_up, loss_cell_down, loss_cell_up) = match &self.stages {
            Stages::Direct(knobs) => {
                knobs.set([rate; 2], delay, [loss_down, loss_up]);
                return Ok(());
            }
            Stages::Rattan {
                rate,
                delay_down,
                delay_up,
                loss_down,
                loss_up,
            } => (rate, delay_down, delay_up, loss_down, loss_up),
        };
        match rate_stage {
            RateStage::Cells { down, up } => {
                let bw = Bandwidth::from_bps(rate);
                down.set_config(BwCellConfig::new(bw, None, None)).map_err(emu_err)?;
                up.set_config(BwCellConfig::new(bw, None, None)).map_err(emu_err)?;
            }
            // The loss stage is before the kernel's rate stage, so lost packets would not use
            // the link's capacity: the survivors get rate × (1 − loss), as on a lossy link
            // where every packet, lost or not, takes its time on the wire. (In an outage
            // the loss is 1 and the rate stays: nothing arrives anyway.)
            RateStage::Kernel(k) => match s.mode() {
                LinkMode::Outage => {}
                _ => k.set_rate(after_loss(rate, kernel_down), after_loss(rate, kernel_up))?,
            },
        }
        delay_down.set_config(DelayCellConfig::new(delay)).map_err(emu_err)?;
        delay_up.set_config(DelayCellConfig::new(delay)).map_err(emu_err)?;
        loss_cell_down
            .set_config(LossCellConfig::new(vec![loss_down]))
            .map_err(emu_err)?;
        loss_cell_up
            .set_config(LossCellConfig::new(vec![loss_up]))
            .map_err(emu_err)?;
        Ok(())
    }
}
