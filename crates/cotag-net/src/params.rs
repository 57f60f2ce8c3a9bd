//! What COTAG runs with on the testbed: its parameters and the link's mode (COTAG or the
//! uncoded dual-rr), shared by the link and its two sides.

use cotag::{ApConfig, DeviceConfig, GatewayConfig};

/// The AP pacers' bucket, in full-size packets. The server loop's turns (reading the TUN
/// device, coding, the kernel's TCP work done in its syscalls) last up to a few ms on a
/// loaded host; a bucket of 3 packets lost the link's slots meanwhile, and an AP sent 4 of
/// the 7–8 Highs its window had room for (measured: 81–171 of 271–341 failed cohorts).
/// 8 packets (~1 ms at the scaled High rate) let the emulator's queue absorb the catch-up
/// burst; its rate stage still enforces the link's rate.
pub const PACE_BURST_PACKETS: f64 = 8.0;
/// The AP pacers' bucket also holds this many periods of the link's current rate: the 8
/// packets above are ~1 ms at scale 0.1 but 0.1 ms at 0.9, where the server loop's turns of
/// 0.25–4 ms (4,000–9,000 per 10 s) lost the links' slots and the APs flushed the Highs they
/// could not send (docs/cotag.md, "Round 4").
pub const PACE_BURST_PERIODS: f64 = 1.0;
/// The device's liveness timeout at least this long (µs): a Low link (30 Mbit/s at scale
/// 0.1) takes 3.2 ms to carry an 8-packet burst, and with 3 T = 3 ms (1.5 ms at T = 0.5)
/// the device gave cohorts up whose combinations were still queued in the emulator
/// (measured: 96–380 cohorts per 3 runs, every combination arriving late, none lost).
pub const DEVICE_LIVENESS_MIN_US: u64 = 10_000;

/// Packets per period the gateway leaves out of each cohort so the links' windows have room
/// for Low extras ("taking" is extras with the capacity left; with cohorts filling the
/// budget exactly there was none while the flows saturate). cotag-corr-zero / -pos, bursts,
/// 3 runs each: at PER 0.5 % a margin of 0 lost 572 / 585 cohorts to the path's loss
/// (104 / 110 Mbit/s, dual-rr 111 / 111), a margin of 1 lost 30 / 25 (118 / 122); at PER 0
/// the margin costs ~9 % (130 → 118 Mbit/s, dual-rr 107). docs/cotag.md, "Why cohorts fail".
pub const COHORT_MARGIN: usize = 1;

/// The shortest period [`CotagParams::period_for_capacity`] picks: 125 µs holds the largest
/// cohort up to ~11 Gbit/s, past what the testbed's links carry.
pub const MIN_AUTO_PERIOD_US: u64 = 125;

/// Full-size datagrams (1,400 bytes of payload) a period of `t_us` holds at `capacity_bps`.
fn packets_per_period(t_us: u64, capacity_bps: f64) -> usize {
    (capacity_bps * t_us as f64 / 1e6 / (8.0 * 1_400.0)).ceil() as usize
}

/// COTAG's parameters on the testbed.
#[derive(Debug, Clone)]
pub struct CotagParams {
    pub gateway: GatewayConfig,
    pub ap: ApConfig,
    pub device: DeviceConfig,
    /// Fraction of a path's scheduled rate its AP sends at.
    pub pace_factor: f64,
    /// Token-bucket depth of the AP pacer: `pace_burst_us` of the link's current rate, at
    /// least `pace_burst_bytes`.
    pub pace_burst_bytes: f64,
    pub pace_burst_us: f64,
    /// When the gateway closes no cohort at a period boundary, the APs release what they
    /// hold at once ([`cotag::Gateway::poll_idle`], [`cotag::Ap::handle_idle`]) instead of
    /// after their liveness timeout (3 T). One bulk flow at scale 0.9 (docs/cotag.md, "One
    /// bulk flow"): TCP is window-limited, goes quiet after each flight, and the last cohort
    /// of every flight was held 3 T — RTT p50 6.5 ms where dual-rr's was 2.9.
    pub idle_release: bool,
}

impl CotagParams {
    /// Period `t_us`, cohorts capped at what both paths carry in one period at their peak
    /// `capacity_bps` (the cap also sets the coefficient count, so the inner MTU). Each
    /// cohort is further bounded by the links' *current* rates (`CohortSize::Budget`, see
    /// [`CotagParams::new`]): a cohort larger than what the links carry in its forwarding
    /// window is flushed in part by the APs and lost whole — with the peak-sized cap alone
    /// that was 95 % of the failed cohorts on the testbed (docs/cotag.md, "Why cohorts
    /// fail").
    pub fn for_capacity(t_us: u64, capacity_bps: f64) -> CotagParams {
        CotagParams::new(t_us, packets_per_period(t_us, capacity_bps).clamp(4, cotag::gf::MAX_CAUCHY))
    }

    /// The default period for paths whose peak total is `capacity_bps`: 1 ms, halved (down
    /// to [`MIN_AUTO_PERIOD_US`]) while one period at the peak holds more packets than the
    /// largest cohort ([`cotag::gf::MAX_CAUCHY`]). A capped cohort leaves the rest of a good
    /// period's budget to Low extras, and its n coefficient bytes ride in every packet: at
    /// scale 0.9 on `cotag-corr-*` (peak 2.1 Gbit/s, 190 packets per ms) T = 1 ms capped
    /// every cohort at 128 with 21 % coding overhead where T = 0.5 ms (cohorts up to 95)
    /// had 11 % and 5–16 % more goodput (docs/cotag.md, "Round 6"). At the scales below
    /// ~0.6 this is the paper's 1 ms.
    pub fn period_for_capacity(capacity_bps: f64) -> u64 {
        let mut t_us = 1_000;
        while t_us > MIN_AUTO_PERIOD_US && packets_per_period(t_us, capacity_bps) > cotag::gf::MAX_CAUCHY {
            t_us /= 2;
        }
        t_us
    }

    /// Period `t_us`, cohorts of at most `max_cohort` packets and at most what both links
    /// carry in one period at their current scheduled rate less [`COHORT_MARGIN`], Highs
    /// split in proportion to those rates, Low extras only into the room the rates leave
    /// (docs/cotag.md, "Why cohorts fail"), each link's fraction of a packet carried to the
    /// next period (`budget_carry`), the APs told when the gateway falls idle
    /// (`idle_release`); AP liveness 3 T, device liveness 3 T but at least
    /// [`DEVICE_LIVENESS_MIN_US`]; the rest the core's defaults — including the gateway's
    /// Low extras (up to 1 × n_k per cohort, split like the Highs): an AP re-encodes only
    /// from what it holds, so only the gateway's full-span Lows let one AP make up for the
    /// other's shortfall.
    pub fn new(t_us: u64, max_cohort: usize) -> CotagParams {
        let liveness_us = 3 * t_us;
        CotagParams {
            gateway: GatewayConfig {
                period_us: t_us,
                max_cohort,
                queue_packets: (8 * max_cohort).max(1_024),
                cohort_size: cotag::CohortSize::Budget { margin: COHORT_MARGIN },
                high_split: cotag::HighSplit::Budget,
                // A link's fraction of a packet per period carried over: at scale 0.1 a Low
                // link carries 2.4 datagrams per period and the floors gave it 2 (docs/cotag.md,
                // "One bulk flow": +9 % bulk, +9 % bursts on cotag-corr-pos, 3 seeds each).
                budget_carry: true,
                ..GatewayConfig::default()
            },
            ap: ApConfig {
                liveness_us,
                ..ApConfig::default()
            },
            device: DeviceConfig {
                liveness_us: liveness_us.max(DEVICE_LIVENESS_MIN_US),
                ..DeviceConfig::default()
            },
            pace_factor: 0.97,
            pace_burst_bytes: PACE_BURST_PACKETS * 1500.0,
            pace_burst_us: t_us as f64 * PACE_BURST_PERIODS,
            idle_release: true,
        }
    }
}

#[derive(Debug, Clone)]
pub enum Mode {
    Cotag(Box<CotagParams>),
    /// Uncoded dual connectivity: packets alternate between the two paths.
    DualRr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn testbed_defaults_size_cohorts_to_the_links_carry_fractions_and_release_on_idle() {
        let p = CotagParams::for_capacity(1_000, 200e6);
        assert_eq!(p.gateway.max_cohort, 18, "200 Mbit/s x 1 ms / 1,400 B, rounded up");
        assert_eq!(p.gateway.cohort_size, cotag::CohortSize::Budget { margin: COHORT_MARGIN });
        assert_eq!(p.gateway.high_split, cotag::HighSplit::Budget);
        assert!(p.gateway.budget_carry && p.idle_release);
        assert_eq!(p.device.liveness_us, DEVICE_LIVENESS_MIN_US);
        assert_eq!(p.ap.liveness_us, 3_000);
    }

    #[test]
    fn the_default_period_halves_until_a_period_at_the_peak_fits_the_largest_cohort() {
        // Scale 0.1 of cotag-corr-*: 21 packets per ms, the paper's 1 ms.
        assert_eq!(CotagParams::period_for_capacity(236e6), 1_000);
        // Exactly the largest cohort per ms still fits.
        assert_eq!(CotagParams::period_for_capacity(128.0 * 8.0 * 1_400.0 * 1e3), 1_000);
        // Scale 0.9: 190 packets per ms -> 0.5 ms, 95 per period.
        let t = CotagParams::period_for_capacity(2.12e9);
        assert_eq!(t, 500);
        assert_eq!(CotagParams::for_capacity(t, 2.12e9).gateway.max_cohort, 95);
        // Far past the links: the floor, not a period of zero.
        assert_eq!(CotagParams::period_for_capacity(1e12), MIN_AUTO_PERIOD_US);
        assert_eq!(CotagParams::period_for_capacity(f64::INFINITY), MIN_AUTO_PERIOD_US);
        assert_eq!(CotagParams::period_for_capacity(0.0), 1_000);
    }
}
