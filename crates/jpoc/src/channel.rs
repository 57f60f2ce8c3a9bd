//! Geometry, TR 38.901 indoor path loss / LOS probability, and a reduced multipath model.
//!
//! We keep TR 38.901's large-scale parts exactly (path loss, shadowing σ, LOS probability,
//! LOS K-factor) and replace its 15–19-cluster small-scale model by a few discrete paths
//! (documented in docs/jpoc.md): one along the geometric AP–client direction plus
//! `scattered_paths` with random directions at both ends. Beam gains are summed in power
//! over paths (no phase: a wideband 2 GHz SSW frame averages small-scale fading).

use crate::antenna::{wrap_angle, Upa};
use crate::config::{CellConfig, IndoorScenario};
use rand::Rng;
use rand_distr::{Distribution, Exp1, StandardNormal};
use std::f64::consts::PI;

/// TR 38.901 Table 7.4.1-1, InH-Office LOS: PL = 32.4 + 17.3·log10(d3D) + 20·log10(fc[GHz]).
pub fn pathloss_los_db(d3d_m: f64, fc_ghz: f64) -> f64 {
    32.4 + 17.3 * d3d_m.max(1.0).log10() + 20.0 * fc_ghz.log10()
}

/// TR 38.901 Table 7.4.1-1, InH-Office NLOS: max(PL_LOS, 38.3·log10(d3D) + 17.30 + 24.9·log10(fc)).
pub fn pathloss_nlos_db(d3d_m: f64, fc_ghz: f64) -> f64 {
    let pl = 38.3 * d3d_m.max(1.0).log10() + 17.30 + 24.9 * fc_ghz.log10();
    pl.max(pathloss_los_db(d3d_m, fc_ghz))
}

/// Shadow-fading standard deviations (Table 7.4.1-1): LOS 3 dB, NLOS 8.03 dB.
pub const SHADOW_SIGMA_LOS_DB: f64 = 3.0;
pub const SHADOW_SIGMA_NLOS_DB: f64 = 8.03;

/// TR 38.901 Table 7.4.2-1 LOS probability for InH.
pub fn los_probability(d2d_m: f64, scenario: IndoorScenario) -> f64 {
    match scenario {
        IndoorScenario::MixedOffice => {
            if d2d_m <= 1.2 {
                1.0
            } else if d2d_m < 6.5 {
                (-(d2d_m - 1.2) / 4.7).exp()
            } else {
                (-(d2d_m - 6.5) / 32.6).exp() * 0.32
            }
        }
        IndoorScenario::OpenOffice => {
            if d2d_m <= 5.0 {
                1.0
            } else if d2d_m <= 49.0 {
                (-(d2d_m - 5.0) / 70.8).exp()
            } else {
                (-(d2d_m - 49.0) / 211.7).exp() * 0.54
            }
        }
    }
}

/// A client's place in the cell: AP at the origin.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Site {
    pub x: f64,
    pub y: f64,
    /// Azimuth of the client panel's boresight, global frame (radians).
    pub orientation: f64,
}

impl Site {
    pub fn d2d(&self) -> f64 {
        self.x.hypot(self.y)
    }
}

/// One propagation path. Directions are in the global frame; `gain_db` ≤ 0 is the path's
/// share of the large-scale gain (−PL − shadowing).
#[derive(Debug, Clone, Copy)]
pub struct PathRay {
    /// Departure at the AP towards the client (az, el).
    pub ap_az: f64,
    pub ap_el: f64,
    /// Arrival at the client from the AP (az, el).
    pub clt_az: f64,
    pub clt_el: f64,
    pub gain_db: f64,
}

#[derive(Debug, Clone)]
pub struct Channel {
    pub los: bool,
    pub paths: Vec<PathRay>,
}

/// Uniform position in the annulus [min_distance, radius] and uniform orientation.
pub fn draw_site<R: Rng>(cell: &CellConfig, rng: &mut R) -> Site {
    // Area-uniform radius: r² uniform between r_min² and R².
    let r2 = rng.gen_range(cell.min_distance_m.powi(2)..=cell.radius_m.powi(2));
    let r = r2.sqrt();
    let phi = rng.gen_range(-PI..PI);
    Site {
        x: r * phi.cos(),
        y: r * phi.sin(),
        orientation: rng.gen_range(-PI..PI),
    }
}

/// Draw a channel for `site`: LOS state, shadowing, path directions and power split.
/// `force_los` pins the LOS state (heatmap near client).
pub fn draw_channel<R: Rng>(
    cell: &CellConfig,
    fc_ghz: f64,
    site: &Site,
    force_los: Option<bool>,
    rng: &mut R,
) -> Channel {
    let d2d = site.d2d();
    let dz = cell.ap_height_m - cell.client_height_m;
    let d3d = d2d.hypot(dz);
    let los = force_los.unwrap_or_else(|| rng.gen::<f64>() < los_probability(d2d, cell.scenario));
    let (pl, sigma) = if los {
        (pathloss_los_db(d3d, fc_ghz), SHADOW_SIGMA_LOS_DB)
    } else {
        (pathloss_nlos_db(d3d, fc_ghz), SHADOW_SIGMA_NLOS_DB)
    };
    let z: f64 = StandardNormal.sample(rng);
    let large_scale_db = -pl - sigma * z;

    // Power split. LOS: direct path K/(K+1), scattered paths share 1/(K+1) with random
    // exponential weights. NLOS: every path, including the one along the geometric direction
    // (through/around the obstruction), gets an exponential weight. Weights sum to 1 so the
    // total received power matches TR 38.901's path loss.
    let n_sc = cell.scattered_paths;
    let mut weights: Vec<f64> = Vec::with_capacity(n_sc + 1);
    if los {
        let k = 10f64.powf(cell.los_k_factor_db / 10.0);
        let w: Vec<f64> = (0..n_sc).map(|_| Exp1.sample(rng)).collect();
        let sum: f64 = w.iter().sum();
        weights.push(if n_sc == 0 { 1.0 } else { k / (k + 1.0) });
        for wi in w {
            weights.push(wi / sum / (k + 1.0));
        }
    } else {
        let w: Vec<f64> = (0..=n_sc).map(|_| Exp1.sample(rng)).collect();
        let sum: f64 = w.iter().sum();
        weights.extend(w.into_iter().map(|wi| wi / sum));
    }

    let ap_az = site.y.atan2(site.x);
    let ap_el = (-dz).atan2(d2d);
    let mut paths = Vec::with_capacity(n_sc + 1);
    paths.push(PathRay {
        ap_az,
        ap_el,
        clt_az: wrap_angle(ap_az + PI),
        clt_el: -ap_el,
        gain_db: large_scale_db + 10.0 * weights[0].log10(),
    });
    let el_max = cell.scatter_elevation_deg.to_radians();
    for &w in &weights[1..] {
        // A scatterer anywhere in the room: independent directions at both ends
        // (single-bounce geometry is not tracked; see docs/jpoc.md).
        paths.push(PathRay {
            ap_az: rng.gen_range(-PI..PI),
            ap_el: if el_max > 0.0 {
                rng.gen_range(-el_max..=el_max)
            } else {
                0.0
            },
            clt_az: rng.gen_range(-PI..PI),
            clt_el: if el_max > 0.0 {
                rng.gen_range(-el_max..=el_max)
            } else {
                0.0
            },
            gain_db: large_scale_db + 10.0 * w.log10(),
        });
    }
    Channel { los, paths }
}

/// The AP: `panels` UPAs at the origin, panel p facing azimuth 2π·p/panels.
#[derive(Debug, Clone)]
pub struct Ap {
    pub upa: Upa,
    pub panel_az: Vec<f64>,
}

impl Ap {
    pub fn new(upa: Upa, panels: usize) -> Self {
        let panel_az = (0..panels).map(|p| 2.0 * PI * p as f64 / panels as f64).collect();
        Self { upa, panel_az }
    }

    /// Number of AP sectors swept in the BTI (36 per panel).
    pub fn sectors(&self) -> usize {
        self.upa.beams() * self.panel_az.len()
    }

    /// Gain of AP sector `s` (panel s / 36, beam s % 36) towards a global direction.
    pub fn sector_gain_dbi(&self, s: usize, az: f64, el: f64) -> f64 {
        let b = self.upa.beams();
        let p = s / b;
        self.upa.beam_gain_dbi(s % b, wrap_angle(az - self.panel_az[p]), el)
    }

    /// Quasi-omni reception: the AP listens on all panels; the best panel's pattern counts.
    pub fn quasi_omni_dbi(&self, az: f64, el: f64) -> f64 {
        self.panel_az
            .iter()
            .map(|p| self.upa.quasi_omni_dbi(wrap_angle(az - p), el))
            .fold(f64::NEG_INFINITY, f64::max)
    }
}

/// What one client's channel means for initial access, at maximum client power.
#[derive(Debug, Clone)]
pub struct LinkBudget {
    /// Received power at the AP (quasi-omni) per client beam, client at max power (dBm).
    pub abft_rx_dbm_at_max: Vec<f64>,
    /// RxP_max^CLT: the strongest AP sector at the client (quasi-omni) during BTI (dBm).
    pub bti_best_rx_dbm: f64,
    /// j: index of that AP sector.
    pub bti_best_sector: usize,
}

fn db_to_lin(db: f64) -> f64 {
    10f64.powf(db / 10.0)
}

fn lin_to_db(lin: f64) -> f64 {
    10.0 * lin.max(1e-300).log10()
}

/// Evaluate every beam on every path (powers add across paths).
pub fn link_budget(
    ap: &Ap,
    client: &Upa,
    site: &Site,
    channel: &Channel,
    ap_tx_dbm: f64,
    client_max_tx_dbm: f64,
) -> LinkBudget {
    // Client-local arrival directions and the AP quasi-omni gain per path are reused below.
    let local: Vec<(f64, f64, f64)> = channel
        .paths
        .iter()
        .map(|p| (wrap_angle(p.clt_az - site.orientation), p.clt_el, p.gain_db))
        .collect();
    let abft_rx_dbm_at_max = (0..client.beams())
        .map(|b| {
            let lin: f64 = channel
                .paths
                .iter()
                .zip(&local)
                .map(|(p, &(az, el, g))| {
                    db_to_lin(g + client.beam_gain_dbi(b, az, el) + ap.quasi_omni_dbi(p.ap_az, p.ap_el))
                })
                .sum();
            client_max_tx_dbm + lin_to_db(lin)
        })
        .collect();
    let mut best = (f64::NEG_INFINITY, 0);
    for s in 0..ap.sectors() {
        let lin: f64 = channel
            .paths
            .iter()
            .zip(&local)
            .map(|(p, &(az, el, g))| {
                db_to_lin(g + ap.sector_gain_dbi(s, p.ap_az, p.ap_el) + client.quasi_omni_dbi(az, el))
            })
            .sum();
        let rx = ap_tx_dbm + lin_to_db(lin);
        if rx > best.0 {
            best = (rx, s);
        }
    }
    LinkBudget {
        abft_rx_dbm_at_max,
        bti_best_rx_dbm: best.0,
        bti_best_sector: best.1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pathloss_hand_values() {
        // LOS at 10 m, 60 GHz: 32.4 + 17.3 + 20·1.77815 = 85.263 dB.
        assert!((pathloss_los_db(10.0, 60.0) - 85.263).abs() < 1e-3);
        // NLOS at 10 m: 38.3 + 17.3 + 24.9·1.77815 = 99.876 dB.
        assert!((pathloss_nlos_db(10.0, 60.0) - 99.876).abs() < 1e-3);
        // NLOS is never below LOS.
        assert!(pathloss_nlos_db(1.0, 60.0) >= pathloss_los_db(1.0, 60.0));
    }

    #[test]
    fn los_probability_hand_values() {
        assert_eq!(los_probability(1.0, IndoorScenario::MixedOffice), 1.0);
        assert!((los_probability(5.9, IndoorScenario::MixedOffice) - (-1.0f64).exp()).abs() < 1e-12);
        assert!((los_probability(6.5, IndoorScenario::MixedOffice) - 0.32).abs() < 1e-12);
        assert_eq!(los_probability(4.0, IndoorScenario::OpenOffice), 1.0);
    }

    #[test]
    fn channel_power_split_matches_pathloss() {
        use rand::SeedableRng;
        let cell = CellConfig::default();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let site = Site {
            x: 10.0,
            y: 0.0,
            orientation: 0.0,
        };
        let ch = draw_channel(&cell, 60.0, &site, Some(true), &mut rng);
        let total: f64 = ch.paths.iter().map(|p| db_to_lin(p.gain_db)).sum();
        let d3d = 10f64.hypot(2.0);
        // Total = −PL − shadowing; shadowing σ = 3 dB → within ±15 dB (5σ).
        assert!((lin_to_db(total) + pathloss_los_db(d3d, 60.0)).abs() < 15.0);
        assert_eq!(ch.paths.len(), cell.scattered_paths + 1);
    }
}
