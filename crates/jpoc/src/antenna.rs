//! Uniform planar array (UPA) with a fixed beam codebook.
//!
//! Local panel frame: boresight along +x, horizontal axis y, vertical axis z. A direction
//! is (azimuth, elevation) in radians with az = 0, el = 0 at boresight. Gain of beam b in a
//! direction = element pattern (TR 38.901 Table 7.3-1) + array factor of the half-wavelength
//! UPA steered to the beam centre. Quasi-omni = one element's pattern (+ offset).

use crate::config::AntennaConfig;
use std::f64::consts::PI;

/// Wrap an angle into (−π, π].
pub fn wrap_angle(a: f64) -> f64 {
    let mut x = (a + PI).rem_euclid(2.0 * PI) - PI;
    if x <= -PI {
        x += 2.0 * PI;
    }
    x
}

#[derive(Debug, Clone)]
pub struct Upa {
    nh: usize,
    nv: usize,
    /// Steering (u0, v0) = (sin az0 · cos el0, sin el0) per beam.
    steer: Vec<(f64, f64)>,
    /// Beam centres (az, el) in radians, for reporting.
    centres: Vec<(f64, f64)>,
    element_gain_dbi: f64,
    quasi_omni_offset_db: f64,
}

impl Upa {
    pub fn new(cfg: &AntennaConfig) -> Self {
        let mut steer = Vec::with_capacity(cfg.beams());
        let mut centres = Vec::with_capacity(cfg.beams());
        // Beam centres at the middles of equal sub-spans: 120° over 6 beams →
        // −50°, −30°, −10°, 10°, 30°, 50° (20° apart, edges at ±60°).
        let az_step = cfg.coverage_az_deg / cfg.beams_az as f64;
        let el_step = cfg.coverage_el_deg / cfg.beams_el as f64;
        for ie in 0..cfg.beams_el {
            for ia in 0..cfg.beams_az {
                let az = (-cfg.coverage_az_deg / 2.0 + az_step * (ia as f64 + 0.5)).to_radians();
                let el = (-cfg.coverage_el_deg / 2.0 + el_step * (ie as f64 + 0.5)).to_radians();
                steer.push((az.sin() * el.cos(), el.sin()));
                centres.push((az, el));
            }
        }
        Self {
            nh: cfg.horizontal_elements,
            nv: cfg.vertical_elements,
            steer,
            centres,
            element_gain_dbi: cfg.element_gain_dbi,
            quasi_omni_offset_db: cfg.quasi_omni_offset_db,
        }
    }

    pub fn beams(&self) -> usize {
        self.steer.len()
    }

    pub fn elements(&self) -> usize {
        self.nh * self.nv
    }

    pub fn beam_centre(&self, beam: usize) -> (f64, f64) {
        self.centres[beam]
    }

    /// Peak array (beamforming) gain over one element: 10·log10(N) = 15.05 dB for 8×4.
    pub fn array_gain_db(&self) -> f64 {
        10.0 * (self.elements() as f64).log10()
    }

    /// TR 38.901 Table 7.3-1 element pattern, in dBi. θ3dB = φ3dB = 65°, SLA_V = A_m = 30 dB.
    pub fn element_gain_dbi(&self, az: f64, el: f64) -> f64 {
        let az_deg = wrap_angle(az).to_degrees();
        let el_deg = el.to_degrees();
        let a_v = -(12.0 * (el_deg / 65.0).powi(2)).min(30.0);
        let a_h = -(12.0 * (az_deg / 65.0).powi(2)).min(30.0);
        self.element_gain_dbi - (-(a_v + a_h)).min(30.0)
    }

    /// Array-factor power gain (linear, peak = N) of `beam` towards (az, el).
    /// Separable UPA: |D_nh(π Δu)|² · |D_nv(π Δv)|² / N, D_n(x) = Σ_k e^{j k x}.
    pub fn array_factor(&self, beam: usize, az: f64, el: f64) -> f64 {
        let (u0, v0) = self.steer[beam];
        let u = az.sin() * el.cos();
        let v = el.sin();
        let dh = dirichlet_sq(self.nh, PI * (u - u0));
        let dv = dirichlet_sq(self.nv, PI * (v - v0));
        dh * dv / self.elements() as f64
    }

    /// Gain of `beam` towards (az, el), dBi.
    pub fn beam_gain_dbi(&self, beam: usize, az: f64, el: f64) -> f64 {
        self.element_gain_dbi(az, el) + 10.0 * self.array_factor(beam, az, el).max(1e-30).log10()
    }

    /// Quasi-omni reception pattern, dBi.
    pub fn quasi_omni_dbi(&self, az: f64, el: f64) -> f64 {
        self.element_gain_dbi(az, el) + self.quasi_omni_offset_db
    }
}

/// |Σ_{k=0}^{n−1} e^{j k x}|² = sin²(n x/2) / sin²(x/2), with the limit n² at x → 0 (mod 2π).
fn dirichlet_sq(n: usize, x: f64) -> f64 {
    let half = x / 2.0;
    let s = half.sin();
    if s.abs() < 1e-9 {
        return (n * n) as f64;
    }
    let num = (n as f64 * half).sin();
    (num * num) / (s * s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upa() -> Upa {
        Upa::new(&AntennaConfig::default())
    }

    #[test]
    fn peak_gain_is_element_plus_array_gain() {
        let a = upa();
        assert_eq!(a.beams(), 36);
        // Beam steered to (−10°, −10°): its own centre sees AF = N.
        for b in 0..a.beams() {
            let (az, el) = a.beam_centre(b);
            assert!((a.array_factor(b, az, el) - 32.0).abs() < 1e-9);
        }
        let b = 14; // row 2, column 2: (−10°, −10°)
        let (az, el) = a.beam_centre(b);
        let g = a.beam_gain_dbi(b, az, el);
        let expect = a.element_gain_dbi(az, el) + 10.0 * 32f64.log10();
        assert!((g - expect).abs() < 1e-9);
    }

    #[test]
    fn element_pattern_front_back() {
        let a = upa();
        assert!((a.element_gain_dbi(0.0, 0.0) - 8.0).abs() < 1e-12);
        // 65° off boresight: −12 dB; behind: floor at 8 − 30 = −22 dBi.
        assert!((a.element_gain_dbi(65f64.to_radians(), 0.0) - (8.0 - 12.0)).abs() < 1e-9);
        assert!((a.element_gain_dbi(PI, 0.0) - (-22.0)).abs() < 1e-9);
    }

    #[test]
    fn other_beams_are_weaker_than_the_best() {
        let a = upa();
        let (az, el) = a.beam_centre(20);
        let best = a.beam_gain_dbi(20, az, el);
        for b in 0..a.beams() {
            assert!(a.beam_gain_dbi(b, az, el) <= best + 1e-9);
        }
    }

    #[test]
    fn wrap() {
        assert!((wrap_angle(3.0 * PI) - PI).abs() < 1e-12);
        assert!((wrap_angle(-PI / 2.0) + PI / 2.0).abs() < 1e-12);
    }
}
