//! Counters of both ends, serialisable for the results JSON.

use cotag::{ApStats, DeviceStats, GatewayStats, LINKS};
use serde::Serialize;

/// One end's runtime counters (which fields move depends on the end and the mode).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SideStats {
    /// IP packets read from the TUN device on the downlink (server end).
    pub tun_packets_in: u64,
    pub tun_bytes_in: u64,
    /// IP packets written into the TUN device (client end: delivered to TCP).
    pub tun_packets_out: u64,
    pub tun_bytes_out: u64,
    pub tun_write_errors: u64,
    /// Datagrams sent / received per path (server sends, client receives the downlink).
    pub packets_out: [u64; LINKS],
    pub bytes_out: [u64; LINKS],
    pub packets_in: [u64; LINKS],
    pub bytes_in: [u64; LINKS],
    /// Datagrams a full socket buffer refused.
    pub send_dropped: u64,
    /// Packets the gateway refused (longer than the coding allows).
    pub rejected: u64,
    /// Uplink packets forwarded (client: read from TUN; server: written to TUN).
    pub uplink_packets: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cotag_gateway: Option<GatewayStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cotag_aps: Option<[ApStats; LINKS]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cotag_device: Option<DeviceStats>,
}

/// Both ends' counters after a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LinkStats {
    pub server: SideStats,
    pub client: SideStats,
}

impl LinkStats {
    /// Coded bytes the device received per original byte it delivered, minus one (headers,
    /// padding, extras and failed cohorts); `None` without COTAG or before any delivery.
    pub fn coding_overhead(&self) -> Option<f64> {
        let d = self.client.cotag_device.as_ref()?;
        (d.bytes_delivered > 0).then(|| d.bytes_received as f64 / d.bytes_delivered as f64 - 1.0)
    }
}
