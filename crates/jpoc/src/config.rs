//! Simulation parameters. Every field has the thesis default (ch. 3.3.2) or, where the
//! thesis is silent, a documented choice (see docs/jpoc.md). Loadable from TOML; every
//! section and field is optional and unknown fields are rejected so typos fail loudly.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse config file {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid config: {field} = {value}: {reason}")]
    Invalid {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

/// TR 38.901 indoor-hotspot LOS-probability variant (Table 7.4.2-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndoorScenario {
    /// InH – mixed office (the thesis' indoor office; our default).
    MixedOffice,
    /// InH – open office (more LOS).
    OpenOffice,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CellConfig {
    /// Cell radius; AP at the centre (thesis: 25 m).
    pub radius_m: f64,
    /// Smallest client–AP horizontal distance (TR 38.901 InH is specified for d ≥ 1 m).
    pub min_distance_m: f64,
    /// AP mounting height (TR 38.901 InH: BS at 3 m, ceiling).
    pub ap_height_m: f64,
    /// Client height (TR 38.901 InH: UT at 1 m).
    pub client_height_m: f64,
    pub scenario: IndoorScenario,
    /// Number of scattered paths besides the (quasi-)direct one.
    pub scattered_paths: usize,
    /// Ricean K-factor of a LOS link (TR 38.901 Table 7.5-6, InH LOS: mean 7 dB).
    pub los_k_factor_db: f64,
    /// Scattered paths arrive/leave within ± this elevation (walls, floor, ceiling).
    pub scatter_elevation_deg: f64,
    /// Condition every client's channel on the AP decoding its best beam at maximum power:
    /// the cell is the AP's coverage area, so nobody is permanently out of reach.
    pub require_coverage: bool,
    /// Rejection-sampling budget for a covered channel before giving up.
    pub coverage_max_tries: usize,
}

impl Default for CellConfig {
    fn default() -> Self {
        Self {
            radius_m: 25.0,
            min_distance_m: 1.0,
            ap_height_m: 3.0,
            client_height_m: 1.0,
            scenario: IndoorScenario::MixedOffice,
            scattered_paths: 3,
            los_k_factor_db: 7.0,
            scatter_elevation_deg: 30.0,
            require_coverage: true,
            coverage_max_tries: 1000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RadioConfig {
    pub carrier_ghz: f64,
    pub bandwidth_hz: f64,
    pub noise_figure_db: f64,
    /// AP conducted transmit power (thesis sec. 3.2.3 assumes 20 dBm).
    pub ap_tx_power_dbm: f64,
    /// Client maximum transmit power (802.11ad baseline always uses it).
    pub client_max_tx_power_dbm: f64,
    /// Optional lowest client transmit power; the thesis assumes none.
    pub client_min_tx_power_dbm: Option<f64>,
    /// An SSW frame is decodable at SNR ≥ 1 dB (thesis sec. 3.2.1, lowest MCS).
    pub decode_snr_db: f64,
    /// Capture threshold at the lowest MCS (thesis footnote 1): 3 dB.
    pub capture_db: f64,
    /// Airtime of one SSW mini-slot: SSW frame at MCS0 (≈ 15.8 µs) + SBIFS (1 µs), rounded.
    pub minislot_us: f64,
}

impl Default for RadioConfig {
    fn default() -> Self {
        Self {
            carrier_ghz: 60.0,
            bandwidth_hz: 2.0e9,
            noise_figure_db: 7.0,
            ap_tx_power_dbm: 20.0,
            client_max_tx_power_dbm: 20.0,
            client_min_tx_power_dbm: None,
            decode_snr_db: 1.0,
            capture_db: 3.0,
            minislot_us: 17.0,
        }
    }
}

impl RadioConfig {
    /// Thermal noise power: −174 dBm/Hz + 10·log10(B) + NF. 2 GHz, 7 dB → −74.0 dBm.
    pub fn noise_dbm(&self) -> f64 {
        -174.0 + 10.0 * self.bandwidth_hz.log10() + self.noise_figure_db
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AntennaConfig {
    /// Elements along the horizontal axis (8×4 UPA: 8).
    pub horizontal_elements: usize,
    /// Elements along the vertical axis (8×4 UPA: 4).
    pub vertical_elements: usize,
    /// Beam grid: beams_az × beams_el = 36 beams.
    pub beams_az: usize,
    pub beams_el: usize,
    /// The beam grid covers ± half of these spans around boresight (120° × 120°).
    pub coverage_az_deg: f64,
    pub coverage_el_deg: f64,
    /// Peak element gain (TR 38.901 Table 7.3-1: 8 dBi).
    pub element_gain_dbi: f64,
    /// Quasi-omni gain relative to one element's pattern (0 = one element's pattern).
    pub quasi_omni_offset_db: f64,
    /// AP panels at the cell centre, evenly spread in azimuth. One 120° panel would leave
    /// two thirds of a centred cell uncovered, so we default to three.
    pub ap_panels: usize,
    /// Beam-edge roll-off removed from the client's (G_T^CLT(i) − G_R^CLT) in eq. 3.5
    /// (thesis footnote 3). Raises the client's power by this much.
    pub client_rolloff_db: f64,
    /// Beam-edge roll-off removed from the AP's announced (G_T^AP(j) − G_R^AP) (footnote 3).
    /// Lowers the client's power by this much: with both at 3 dB they cancel (docs/jpoc.md).
    pub ap_rolloff_db: f64,
}

impl Default for AntennaConfig {
    fn default() -> Self {
        Self {
            horizontal_elements: 8,
            vertical_elements: 4,
            beams_az: 6,
            beams_el: 6,
            coverage_az_deg: 120.0,
            coverage_el_deg: 120.0,
            element_gain_dbi: 8.0,
            quasi_omni_offset_db: 0.0,
            ap_panels: 3,
            client_rolloff_db: 3.0,
            ap_rolloff_db: 3.0,
        }
    }
}

impl AntennaConfig {
    pub fn beams(&self) -> usize {
        self.beams_az * self.beams_el
    }
}

/// 802.11ad/ay A-BFT baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Ieee80211adConfig {
    /// A-BFT slots (802.11ad maximum: 8).
    pub slots: usize,
    /// SSW frames per slot (36, so one client sweeps all its beams in one slot).
    pub minislots_per_slot: usize,
    /// A responder whose sweep got no SSW-Feedback re-attempts in a later slot of the same
    /// A-BFT (uniformly among the remaining slots) while FailedRSSAttempts ≤
    /// `rss_retry_limit` (IEEE 802.11-2016 10.38.5; thesis l. 280: "a different A-BFT slot in
    /// the same or next beacon interval").
    pub retry_within_abft: bool,
    /// dot11RSSRetryLimit (standard default 8): consecutive failed sweeps (counted over
    /// A-BFTs, reset only by an SSW-Feedback) after which the responder backs off.
    pub rss_retry_limit: u32,
    /// dot11RSSBackoff (standard default 8): once FailedRSSAttempts exceeds the limit, the
    /// responder skips a uniform [0, rss_backoff) number of A-BFTs. 0 = no back-off.
    pub rss_backoff: u32,
}

impl Default for Ieee80211adConfig {
    fn default() -> Self {
        Self {
            slots: 8,
            minislots_per_slot: 36,
            retry_within_abft: true,
            rss_retry_limit: 8,
            rss_backoff: 8,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JpocConfig {
    /// Desired SNR of the best beam at the AP, eq. 3.1. The thesis evaluates 4 and 10 dB
    /// and does not say which its simulation used; we default to 10 dB because the
    /// open-loop PC error in our channel (±3 dB, p10–p90) leaves 13% of clients with no
    /// decodable beam at γ = 4 (docs/jpoc.md).
    pub gamma_db: f64,
    /// Targeted per-client failure probability P0 (eq. 3.6).
    pub p0: f64,
    /// K, the number of good beams assumed per client in eq. 3.6–3.8. The thesis picks K
    /// from measured good-beam statistics; `jpoc beams` gives a mean of 2.8 at γ = 10 dB → 3.
    pub k_good_beams: u32,
    /// M before any round was observed (thesis: 64).
    pub initial_minislots: usize,
    /// Lower bound on M (thesis: 36 = B, so a client can pick B distinct mini-slots).
    pub min_minislots: usize,
    /// Upper bound on M (signalling: the thesis budgets 6 bits ≈ 128; we allow more so the
    /// controller is not silently clipped, and report M).
    pub max_minislots: usize,
    /// T in eq. 3.9: average over the last min(t, T) estimates.
    pub history: usize,
    /// Estimate used when no mini-slot was empty (eq. 3.8 diverges there).
    pub n_est_max: f64,
}

impl Default for JpocConfig {
    fn default() -> Self {
        Self {
            gamma_db: 10.0,
            p0: 0.1,
            k_good_beams: 3,
            initial_minislots: 64,
            min_minislots: 36,
            max_minislots: 1024,
            history: 5,
            n_est_max: 128.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamicsConfig {
    /// Probability that an associated client is blocked in a beacon interval; a blocked
    /// client loses that interval's data and re-contends in the next A-BFT.
    pub blockage_prob: f64,
    /// Redraw the client's channel (shadowing, LOS state, scatterers) after a blockage. Off
    /// by default: for a client that does not move these are set by its position (TR 38.901
    /// spatial consistency, 7.6.3); the blockage itself is the transient event (docs/jpoc.md).
    pub redraw_channel_on_blockage: bool,
    /// A connected static client re-trains once per this period (thesis: ~60 s). 0 = off.
    pub static_retrain_period_s: f64,
    /// Fraction of the clients that are mobile at an NLOS location.
    pub mobile_fraction: f64,
    /// Mobile clients re-train every 15–20 s (thesis Fig. 3.2a): mean 17.5 s.
    pub mobile_retrain_period_s: f64,
    /// Extra disconnected "chatty" clients: they contend, never take data.
    pub chatty_clients: usize,
    /// Chatty clients run A-BFT every ~10 s (thesis Fig. 3.2a).
    pub chatty_period_s: f64,
}

impl Default for DynamicsConfig {
    fn default() -> Self {
        Self {
            blockage_prob: 0.0,
            redraw_channel_on_blockage: false,
            static_retrain_period_s: 60.0,
            mobile_fraction: 0.0,
            mobile_retrain_period_s: 17.5,
            chatty_clients: 0,
            chatty_period_s: 10.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    pub clients: usize,
    /// Length of one realization (thesis: 10 s).
    pub duration_s: f64,
    /// Beacon interval (thesis: 100 ms).
    pub beacon_interval_ms: f64,
    /// ATI length (management exchange); the thesis gives none, we take 0.5 ms.
    pub ati_us: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            clients: 16,
            duration_s: 10.0,
            beacon_interval_ms: 100.0,
            ati_us: 500.0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub cell: CellConfig,
    pub radio: RadioConfig,
    pub antenna: AntennaConfig,
    pub ieee80211ad: Ieee80211adConfig,
    pub jpoc: JpocConfig,
    pub dynamics: DynamicsConfig,
    pub sim: SimConfig,
}

fn invalid(field: &'static str, value: impl ToString, reason: &'static str) -> ConfigError {
    ConfigError::Invalid {
        field,
        value: value.to_string(),
        reason,
    }
}

fn check(ok: bool, field: &'static str, value: impl ToString, reason: &'static str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(invalid(field, value, reason))
    }
}

fn finite_pos(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

fn prob(v: f64) -> bool {
    v.is_finite() && (0.0..=1.0).contains(&v)
}

impl Config {
    /// Parse TOML text; missing fields take their defaults. Validates.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|source| ConfigError::Parse {
            path: origin.to_string(),
            source,
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Number of beacon intervals in one realization.
    pub fn beacon_intervals(&self) -> usize {
        (self.sim.duration_s * 1000.0 / self.sim.beacon_interval_ms).round() as usize
    }

    /// Reject values the model cannot run with, naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let c = &self.cell;
        check(finite_pos(c.radius_m), "cell.radius_m", c.radius_m, "must be > 0")?;
        check(
            c.min_distance_m.is_finite() && c.min_distance_m >= 0.0 && c.min_distance_m < c.radius_m,
            "cell.min_distance_m",
            c.min_distance_m,
            "must be in [0, radius_m)",
        )?;
        check(
            finite_pos(c.ap_height_m),
            "cell.ap_height_m",
            c.ap_height_m,
            "must be > 0",
        )?;
        check(
            finite_pos(c.client_height_m),
            "cell.client_height_m",
            c.client_height_m,
            "must be > 0",
        )?;
        check(
            c.los_k_factor_db.is_finite(),
            "cell.los_k_factor_db",
            c.los_k_factor_db,
            "must be finite",
        )?;
        check(
            c.scatter_elevation_deg.is_finite() && (0.0..=90.0).contains(&c.scatter_elevation_deg),
            "cell.scatter_elevation_deg",
            c.scatter_elevation_deg,
            "must be in [0, 90]",
        )?;
        check(
            c.coverage_max_tries >= 1,
            "cell.coverage_max_tries",
            c.coverage_max_tries,
            "must be ≥ 1",
        )?;

        let r = &self.radio;
        check(
            finite_pos(r.carrier_ghz),
            "radio.carrier_ghz",
            r.carrier_ghz,
            "must be > 0",
        )?;
        check(
            finite_pos(r.bandwidth_hz),
            "radio.bandwidth_hz",
            r.bandwidth_hz,
            "must be > 0",
        )?;
        check(
            r.noise_figure_db.is_finite(),
            "radio.noise_figure_db",
            r.noise_figure_db,
            "must be finite",
        )?;
        check(
            r.ap_tx_power_dbm.is_finite(),
            "radio.ap_tx_power_dbm",
            r.ap_tx_power_dbm,
            "must be finite",
        )?;
        check(
            r.client_max_tx_power_dbm.is_finite(),
            "radio.client_max_tx_power_dbm",
            r.client_max_tx_power_dbm,
            "must be finite",
        )?;
        if let Some(min) = r.client_min_tx_power_dbm {
            check(
                min.is_finite() && min <= r.client_max_tx_power_dbm,
                "radio.client_min_tx_power_dbm",
                min,
                "must be finite and ≤ client_max_tx_power_dbm",
            )?;
        }
        check(
            r.decode_snr_db.is_finite(),
            "radio.decode_snr_db",
            r.decode_snr_db,
            "must be finite",
        )?;
        check(
            r.capture_db.is_finite() && r.capture_db >= 0.0,
            "radio.capture_db",
            r.capture_db,
            "must be ≥ 0",
        )?;
        check(
            finite_pos(r.minislot_us),
            "radio.minislot_us",
            r.minislot_us,
            "must be > 0",
        )?;

        let a = &self.antenna;
        check(
            a.horizontal_elements >= 1,
            "antenna.horizontal_elements",
            a.horizontal_elements,
            "must be ≥ 1",
        )?;
        check(
            a.vertical_elements >= 1,
            "antenna.vertical_elements",
            a.vertical_elements,
            "must be ≥ 1",
        )?;
        check(a.beams_az >= 1, "antenna.beams_az", a.beams_az, "must be ≥ 1")?;
        check(a.beams_el >= 1, "antenna.beams_el", a.beams_el, "must be ≥ 1")?;
        check(
            a.coverage_az_deg > 0.0 && a.coverage_az_deg <= 360.0,
            "antenna.coverage_az_deg",
            a.coverage_az_deg,
            "must be in (0, 360]",
        )?;
        check(
            a.coverage_el_deg > 0.0 && a.coverage_el_deg <= 180.0,
            "antenna.coverage_el_deg",
            a.coverage_el_deg,
            "must be in (0, 180]",
        )?;
        check(
            a.element_gain_dbi.is_finite(),
            "antenna.element_gain_dbi",
            a.element_gain_dbi,
            "must be finite",
        )?;
        check(
            a.quasi_omni_offset_db.is_finite(),
            "antenna.quasi_omni_offset_db",
            a.quasi_omni_offset_db,
            "must be finite",
        )?;
        check(a.ap_panels >= 1, "antenna.ap_panels", a.ap_panels, "must be ≥ 1")?;
        check(
            a.client_rolloff_db.is_finite(),
            "antenna.client_rolloff_db",
            a.client_rolloff_db,
            "must be finite",
        )?;
        check(
            a.ap_rolloff_db.is_finite(),
            "antenna.ap_rolloff_db",
            a.ap_rolloff_db,
            "must be finite",
        )?;

        let b = self.antenna.beams();
        let ad = &self.ieee80211ad;
        check(ad.slots >= 1, "ieee80211ad.slots", ad.slots, "must be ≥ 1")?;
        check(
            ad.minislots_per_slot >= b,
            "ieee80211ad.minislots_per_slot",
            ad.minislots_per_slot,
            "must be ≥ the number of client beams (a client sweeps all beams in one slot)",
        )?;

        let j = &self.jpoc;
        check(j.gamma_db.is_finite(), "jpoc.gamma_db", j.gamma_db, "must be finite")?;
        check(j.p0 > 0.0 && j.p0 < 1.0, "jpoc.p0", j.p0, "must be in (0, 1)")?;
        check(j.k_good_beams >= 1, "jpoc.k_good_beams", j.k_good_beams, "must be ≥ 1")?;
        check(
            j.min_minislots >= b,
            "jpoc.min_minislots",
            j.min_minislots,
            "must be ≥ the number of client beams B (each client picks B distinct mini-slots)",
        )?;
        check(
            (j.k_good_beams as usize) < j.min_minislots,
            "jpoc.k_good_beams",
            j.k_good_beams,
            "must be < min_minislots (eq. 3.8 takes log(1 − K/M))",
        )?;
        check(
            j.max_minislots >= j.min_minislots,
            "jpoc.max_minislots",
            j.max_minislots,
            "must be ≥ min_minislots",
        )?;
        check(
            (j.min_minislots..=j.max_minislots).contains(&j.initial_minislots),
            "jpoc.initial_minislots",
            j.initial_minislots,
            "must be within [min_minislots, max_minislots]",
        )?;
        check(j.history >= 1, "jpoc.history", j.history, "must be ≥ 1")?;
        check(finite_pos(j.n_est_max), "jpoc.n_est_max", j.n_est_max, "must be > 0")?;

        let d = &self.dynamics;
        check(
            prob(d.blockage_prob),
            "dynamics.blockage_prob",
            d.blockage_prob,
            "must be in [0, 1]",
        )?;
        check(
            d.static_retrain_period_s.is_finite() && d.static_retrain_period_s >= 0.0,
            "dynamics.static_retrain_period_s",
            d.static_retrain_period_s,
            "must be ≥ 0 (0 = off)",
        )?;
        check(
            prob(d.mobile_fraction),
            "dynamics.mobile_fraction",
            d.mobile_fraction,
            "must be in [0, 1]",
        )?;
        check(
            d.mobile_retrain_period_s.is_finite() && d.mobile_retrain_period_s >= 0.0,
            "dynamics.mobile_retrain_period_s",
            d.mobile_retrain_period_s,
            "must be ≥ 0 (0 = off)",
        )?;
        check(
            d.chatty_period_s.is_finite() && d.chatty_period_s >= 0.0,
            "dynamics.chatty_period_s",
            d.chatty_period_s,
            "must be ≥ 0 (0 = off)",
        )?;

        let s = &self.sim;
        check(s.clients >= 1, "sim.clients", s.clients, "must be ≥ 1")?;
        check(finite_pos(s.duration_s), "sim.duration_s", s.duration_s, "must be > 0")?;
        check(
            finite_pos(s.beacon_interval_ms),
            "sim.beacon_interval_ms",
            s.beacon_interval_ms,
            "must be > 0",
        )?;
        check(
            s.ati_us.is_finite() && s.ati_us >= 0.0,
            "sim.ati_us",
            s.ati_us,
            "must be ≥ 0",
        )?;
        check(
            self.beacon_intervals() >= 1,
            "sim.duration_s",
            s.duration_s,
            "must span at least one beacon interval",
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_noise_is_minus_74() {
        let c = Config::default();
        c.validate().unwrap();
        assert!((c.radio.noise_dbm() - (-73.99)).abs() < 0.01);
        assert_eq!(c.beacon_intervals(), 100);
        assert_eq!(c.antenna.beams(), 36);
    }

    #[test]
    fn toml_partial_override() {
        let c = Config::from_toml_str("[jpoc]\ngamma_db = 4.0\n[sim]\nclients = 4\n", "test").unwrap();
        assert_eq!(c.jpoc.gamma_db, 4.0);
        assert_eq!(c.sim.clients, 4);
        assert_eq!(c.cell.radius_m, 25.0);
    }

    #[test]
    fn unknown_field_and_bad_value_are_clear_errors() {
        let e = Config::from_toml_str("[jpoc]\ngama_db = 10.0\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("gama_db"), "{e}");
        let e = Config::from_toml_str("[jpoc]\np0 = 1.5\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("jpoc.p0"), "{e}");
        let e = Config::from_toml_str("[jpoc]\nmin_minislots = 20\n", "x.toml").unwrap_err();
        assert!(e.to_string().contains("jpoc.min_minislots"), "{e}");
    }
}
