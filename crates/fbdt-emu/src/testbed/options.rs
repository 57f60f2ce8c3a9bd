//! What a testbed is built with, besides the spec.

use serde::Serialize;

/// How the emulator moves frames and where each path's rate limit and queue live. Every
/// datapath applies the same per-direction stages (radio, rate with a drop-tail queue in
/// packets, delay, loss) and feeds the same fidelity monitors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Datapath {
    /// Everything in rattan-core: rate → delay → loss cells per direction, one tokio task
    /// and channel per cell.
    Rattan,
    /// The rate limit and its drop-tail queue in the kernel (HTB class + pfifo on the
    /// emulator's egress veth of each direction); rattan-core only delays and drops.
    KernelRate,
    /// The default: radio, rate, delay, loss and the probes computed in one real-time thread
    /// without rattan-core's tasks and channels, frames read and written in batches
    /// (`recvmmsg`/`sendmmsg`); about 3× rattan's rate ceiling (docs/testbed.md, limits).
    #[default]
    Direct,
}

/// A GSO unit's longest airtime at its path's peak rate, µs, by default: a time grain four
/// times finer than the monitors' lateness tolerance (1 ms).
pub const DEFAULT_GSO_UNIT_AIRTIME_US: u32 = 250;

impl TestbedOptions {
    /// GSO units' airtime where they are in force: the `direct` datapath reading with
    /// `recvmmsg` (the receive ring reads MTU frames; rattan and kernel-rate cannot carry
    /// the segmentation header).
    pub fn gso_units(&self) -> Option<u32> {
        self.gso_unit_airtime_us
            .filter(|_| self.datapath == Datapath::Direct && !self.packet_rx_ring)
    }

    /// Whether receive steering is in force (asked for, the `direct` datapath, ≥ 2 CPUs).
    pub fn receive_steered(&self) -> bool {
        self.steer_receive && self.datapath == Datapath::Direct && crate::emu::host_io::endpoint_rps_mask().is_some()
    }
}

impl Datapath {
    pub fn name(self) -> &'static str {
        match self {
            Datapath::Rattan => "rattan",
            Datapath::KernelRate => "kernel-rate",
            Datapath::Direct => "direct",
        }
    }
}

impl std::str::FromStr for Datapath {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "rattan" => Ok(Datapath::Rattan),
            "kernel-rate" => Ok(Datapath::KernelRate),
            "direct" => Ok(Datapath::Direct),
            _ => Err(format!("unknown datapath {s:?} (rattan, kernel-rate or direct)")),
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
    /// Keep the endpoints' receive processing off the emulator's core (`direct` only, on ≥ 2
    /// CPUs): the emulator thread is pinned to the last CPU and the endpoints' veths steer
    /// received frames to the others with RPS. Without it the kernel runs the receiving TCP
    /// stack's softirq work in the context of whoever wrote the frame — the emulator — and
    /// the frames behind the batch wait (docs/testbed.md, limits).
    pub steer_receive: bool,
    /// `direct` only: receive through a TPACKET_V3 ring mapped into the emulator
    /// (`PACKET_RX_RING`, 1 ms block timeout) instead of `recvmmsg`; frames are timed by the
    /// kernel's receive stamp. Measured against `recvmmsg` in docs/testbed.md (limits).
    pub packet_rx_ring: bool,
    /// `direct` only: `PACKET_QDISC_BYPASS` on the emulator's sockets (written frames skip
    /// the veth's qdisc layer). Measured in docs/testbed.md (limits).
    pub qdisc_bypass: bool,
    /// `direct` only (and not with `packet_rx_ring`): the endpoints' TSO super-packets (GSO
    /// units) pass the emulator whole, each unit's payload at most this many µs long on its
    /// path at the path's peak rate (the endpoints' `gso_max_size`, up to 64 KB); queue, loss
    /// and lateness stay per packet. The default, [`DEFAULT_GSO_UNIT_AIRTIME_US`]: on a
    /// slow host of the 2-core class MTU frames left the endpoints short (FBDT/Σ 0.90 in
    /// `los` where units gave 0.97–0.98) at a third of the scale. `None`: every frame is one
    /// MTU packet. See `emu::offload` and docs/testbed.md (limits).
    pub gso_unit_airtime_us: Option<u32>,
}

impl Default for TestbedOptions {
    fn default() -> Self {
        Self {
            datapath: Datapath::default(),
            emu_threads: 1,
            emu_rt_priority: Some(10),
            packet_socket_buffer: Some(crate::emu::host_io::PACKET_SOCKET_BUFFER),
            loss_both_directions: false,
            mptcp: true,
            mtu: 1500,
            tcp_buffer_max: Some(64 << 20),
            steer_receive: true,
            packet_rx_ring: false,
            qdisc_bypass: false,
            gso_unit_airtime_us: Some(DEFAULT_GSO_UNIT_AIRTIME_US),
        }
    }
}
