//! JPOC open-loop client power control, thesis eq. 3.1–3.5.
//!
//! The AP announces RxP_max^AP (eq. 3.2) and its own term (G_T^AP(j) + P_T^AP − G_R^AP) in
//! every BTI SSW frame; the client measured RxP_max^CLT during the BTI and knows its own
//! array gain. Path loss cancels by reciprocity, so no explicit PL estimate is needed.

/// Eq. 3.1/3.2: RxP_max^AP = γ + NoisePower^AP (dBm).
pub fn rxp_max_ap_dbm(gamma_db: f64, ap_noise_dbm: f64) -> f64 {
    gamma_db + ap_noise_dbm
}

/// The AP's announced term (G_T^AP(j) + P_T^AP − G_R^AP), using its maximum array gain
/// reduced by the beam-edge roll-off (thesis footnote 3): the AP does not know j's exact
/// gain towards this client, only that it is the best sector.
pub fn ap_announced_term_db(ap_array_gain_db: f64, rolloff_db: f64, ap_tx_dbm: f64) -> f64 {
    ap_array_gain_db - rolloff_db + ap_tx_dbm
}

/// Eq. 3.5: P_T^CLT = RxP_max^AP − RxP_max^CLT + (G_R^CLT − G_T^CLT(i)) + (G_T^AP(j) + P_T^AP − G_R^AP).
/// `clt_gain_diff_db` is (G_T^CLT(i) − G_R^CLT), approximated by the client's array gain
/// minus the roll-off. Unclamped; see [`clamp_tx_power`].
pub fn client_tx_power_dbm(rxp_max_ap_dbm: f64, rxp_max_clt_dbm: f64, clt_gain_diff_db: f64, ap_term_db: f64) -> f64 {
    rxp_max_ap_dbm - rxp_max_clt_dbm - clt_gain_diff_db + ap_term_db
}

/// PC only ever lowers power (thesis: "if P_T^CLT is higher than the maximum possible Tx
/// power, the client simply uses the maximum"); an optional hardware floor.
pub fn clamp_tx_power(p_dbm: f64, max_dbm: f64, min_dbm: Option<f64>) -> f64 {
    let p = p_dbm.min(max_dbm);
    match min_dbm {
        Some(m) => p.max(m),
        None => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_3_5_hand_value() {
        // γ = 4 dB, noise −74 dBm → RxP_max^AP = −70 dBm. RxP_max^CLT = −50 dBm.
        // Client diff = 15.05 − 3 = 12.05 dB, AP term = 15.05 − 3 + 20 = 32.05 dB.
        // P_T = −70 + 50 − 12.05 + 32.05 = 0 dBm.
        let rx_ap = rxp_max_ap_dbm(4.0, -74.0);
        assert_eq!(rx_ap, -70.0);
        let ap_term = ap_announced_term_db(15.05, 3.0, 20.0);
        let p = client_tx_power_dbm(rx_ap, -50.0, 15.05 - 3.0, ap_term);
        assert!(p.abs() < 1e-12, "{p}");
    }

    #[test]
    fn eq_3_5_inverts_3_3_and_3_4_with_exact_gains() {
        // PL = 80 dB, G_T^AP(j) = 23, G_R^AP = 8, P_T^AP = 20, G_T^CLT(i) = 23, G_R^CLT = 8.
        let (pl, gt_ap, gr_ap, pt_ap, gt_c, gr_c) = (80.0, 23.0, 8.0, 20.0, 23.0, 8.0);
        let rx_clt = pt_ap + gt_ap + gr_c - pl; // eq. 3.4: −29 dBm
        let target = rxp_max_ap_dbm(4.0, -74.0);
        let p = client_tx_power_dbm(target, rx_clt, gt_c - gr_c, gt_ap + pt_ap - gr_ap);
        assert!((p - (-21.0)).abs() < 1e-12);
        // eq. 3.3 with that power lands exactly on the target.
        assert!((p + gt_c + gr_ap - pl - target).abs() < 1e-12);
    }

    #[test]
    fn clamp_never_exceeds_max() {
        assert_eq!(clamp_tx_power(30.0, 20.0, None), 20.0);
        assert_eq!(clamp_tx_power(-50.0, 20.0, None), -50.0);
        assert_eq!(clamp_tx_power(-50.0, 20.0, Some(-10.0)), -10.0);
    }
}
