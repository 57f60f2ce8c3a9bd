//! A-BFT contention: the capture rule and one round of each protocol.
//!
//! Input per contender: the received power at the AP (quasi-omni) of each of its beams at
//! the transmit power it uses this round. The AP listens; no carrier sensing.

use crate::config::RadioConfig;
use rand::seq::index::sample;
use rand::Rng;

/// One SSW frame as it arrives at the AP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// Index into the round's contender list.
    pub contender: usize,
    pub beam: usize,
    pub rx_dbm: f64,
}

/// The AP receiver's decision thresholds.
#[derive(Debug, Clone, Copy)]
pub struct Receiver {
    pub noise_dbm: f64,
    /// Decodable alone at SNR ≥ this (1 dB).
    pub decode_snr_db: f64,
    /// Captured over interference when ≥ this much stronger than the sum of the others (3 dB).
    pub capture_db: f64,
}

impl Receiver {
    pub fn new(radio: &RadioConfig) -> Self {
        Self {
            noise_dbm: radio.noise_dbm(),
            decode_snr_db: radio.decode_snr_db,
            capture_db: radio.capture_db,
        }
    }

    /// Whether a lone frame at this power would be decoded (a "good beam").
    pub fn decodable(&self, rx_dbm: f64) -> bool {
        rx_dbm - self.noise_dbm >= self.decode_snr_db
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MiniSlotResult {
    /// Total energy reached the detection threshold (SNR ≥ decode threshold). A mini-slot
    /// without it is "empty" for eq. 3.8.
    pub energy_detected: bool,
    /// The frame the AP decoded, if any, and its SNR.
    pub decoded: Option<(Arrival, f64)>,
}

fn mw(dbm: f64) -> f64 {
    10f64.powf(dbm / 10.0)
}

/// Capture rule: the strongest frame is decoded iff its SNR ≥ the decode threshold and it
/// is ≥ `capture_db` above the summed power of all other frames in the mini-slot (for two
/// frames this is the thesis' pairwise 3 dB rule). Everything else is lost.
pub fn resolve_minislot(arrivals: &[Arrival], rx: &Receiver) -> MiniSlotResult {
    let total: f64 = arrivals.iter().map(|a| mw(a.rx_dbm)).sum();
    let energy_detected = total > 0.0 && 10.0 * total.log10() - rx.noise_dbm >= rx.decode_snr_db;
    let Some(best) = arrivals.iter().copied().max_by(|a, b| a.rx_dbm.total_cmp(&b.rx_dbm)) else {
        return MiniSlotResult {
            energy_detected: false,
            decoded: None,
        };
    };
    let snr = best.rx_dbm - rx.noise_dbm;
    let interference = total - mw(best.rx_dbm);
    // Guard the subtraction's rounding: a lone frame has exactly no interference.
    let captured =
        arrivals.len() == 1 || interference <= 0.0 || best.rx_dbm - 10.0 * interference.log10() >= rx.capture_db;
    let decoded = (snr >= rx.decode_snr_db && captured).then_some((best, snr));
    MiniSlotResult {
        energy_detected,
        decoded,
    }
}

/// Outcome of one A-BFT round.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundOutcome {
    /// Per contender: did it get SSW feedback (i.e. is it beam-trained/associated)?
    pub success: Vec<bool>,
    /// Per contender: sector sweeps it made in this A-BFT without getting SSW feedback
    /// (802.11ad: one per failed slot; JPOC: 1 if it failed, else 0).
    pub failed_sweeps: Vec<u32>,
    /// Mini-slots allocated to the round.
    pub minislots: usize,
    /// Mini-slots with energy below the detection threshold.
    pub empty_minislots: usize,
}

/// 802.11ad/ay A-BFT: `slots` slots of `per_slot` SSW mini-slots. Each contender picks one
/// slot uniformly and sends beam b in mini-slot b of it. The AP sends one SSW-Feedback per
/// slot, to the responder whose frame it decoded with the highest SNR; others in the slot fail.
///
/// `retries[c]`: how many more slots contender c may try in this same A-BFT after a failed
/// one (the standard lets a responder whose RSS failed re-attempt in a later slot while its
/// FailedRSSAttempts ≤ dot11RSSRetryLimit; thesis l. 280: "a different A-BFT slot in the same
/// or next beacon interval"). A retry picks uniformly among the slots after the failed one;
/// none is left after the last slot. All zeros = one slot per BI.
pub fn ieee80211ad_round<R: Rng>(
    contenders: &[&[f64]],
    slots: usize,
    per_slot: usize,
    retries: &[u32],
    rx: &Receiver,
    rng: &mut R,
) -> RoundOutcome {
    assert_eq!(retries.len(), contenders.len());
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); slots];
    for c in 0..contenders.len() {
        members[rng.gen_range(0..slots)].push(c);
    }
    let mut left = retries.to_vec();
    let mut success = vec![false; contenders.len()];
    let mut failed_sweeps = vec![0u32; contenders.len()];
    let mut empty = 0;
    let mut arrivals = Vec::new();
    for s in 0..slots {
        let slot = std::mem::take(&mut members[s]);
        let mut winner: Option<(usize, f64)> = None;
        for b in 0..per_slot {
            arrivals.clear();
            arrivals.extend(slot.iter().filter_map(|&c| {
                contenders[c].get(b).map(|&rx_dbm| Arrival {
                    contender: c,
                    beam: b,
                    rx_dbm,
                })
            }));
            let r = resolve_minislot(&arrivals, rx);
            if !r.energy_detected {
                empty += 1;
            }
            if let Some((a, snr)) = r.decoded {
                if winner.is_none_or(|(_, s)| snr > s) {
                    winner = Some((a.contender, snr));
                }
            }
        }
        for &c in &slot {
            if winner.is_some_and(|(w, _)| w == c) {
                success[c] = true;
            } else {
                failed_sweeps[c] += 1;
                if left[c] > 0 && s + 1 < slots {
                    left[c] -= 1;
                    members[rng.gen_range(s + 1..slots)].push(c);
                }
            }
        }
    }
    RoundOutcome {
        success,
        failed_sweeps,
        minislots: slots * per_slot,
        empty_minislots: empty,
    }
}

/// JPOC A-BFT: M mini-slots, no slots. Each contender picks B = (its beam count) distinct
/// mini-slots uniformly and sends one beam in each. Every decoded frame's sender is
/// acknowledged (the AP can acknowledge many clients in the ATI, thesis Fig. 3.4).
pub fn jpoc_round<R: Rng>(contenders: &[&[f64]], m: usize, rx: &Receiver, rng: &mut R) -> RoundOutcome {
    let mut per_slot: Vec<Vec<Arrival>> = vec![Vec::new(); m];
    for (c, beams) in contenders.iter().enumerate() {
        let b = beams.len().min(m);
        // `sample` returns the picks in random order, so beam k goes to a random mini-slot.
        for (beam, slot) in sample(rng, m, b).into_iter().enumerate() {
            per_slot[slot].push(Arrival {
                contender: c,
                beam,
                rx_dbm: beams[beam],
            });
        }
    }
    let mut success = vec![false; contenders.len()];
    let mut empty = 0;
    for arrivals in &per_slot {
        let r = resolve_minislot(arrivals, rx);
        if !r.energy_detected {
            empty += 1;
        }
        if let Some((a, _)) = r.decoded {
            success[a.contender] = true;
        }
    }
    let failed_sweeps = success.iter().map(|&ok| u32::from(!ok)).collect();
    RoundOutcome {
        success,
        failed_sweeps,
        minislots: m,
        empty_minislots: empty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rx() -> Receiver {
        Receiver {
            noise_dbm: -74.0,
            decode_snr_db: 1.0,
            capture_db: 3.0,
        }
    }

    fn a(c: usize, dbm: f64) -> Arrival {
        Arrival {
            contender: c,
            beam: 0,
            rx_dbm: dbm,
        }
    }

    #[test]
    fn capture_rule() {
        let r = rx();
        // Empty mini-slot.
        let e = resolve_minislot(&[], &r);
        assert!(!e.energy_detected && e.decoded.is_none());
        // Lone frame: decoded iff SNR ≥ 1 dB.
        assert_eq!(
            resolve_minislot(&[a(0, -73.0)], &r).decoded.map(|d| d.0.contender),
            Some(0)
        );
        assert!(resolve_minislot(&[a(0, -73.5)], &r).decoded.is_none());
        // Two frames ≥ 3 dB apart: stronger captured; 2.9 dB apart: both lost.
        assert_eq!(
            resolve_minislot(&[a(0, -60.0), a(1, -56.99)], &r)
                .decoded
                .map(|d| d.0.contender),
            Some(1)
        );
        assert!(resolve_minislot(&[a(0, -60.0), a(1, -57.1)], &r).decoded.is_none());
        // Interference adds up: −57 vs two at −63.1 (sum −60.09) is 3.09 dB → captured;
        // vs three at −63 (sum −58.23) → lost.
        assert!(resolve_minislot(&[a(1, -57.0), a(0, -63.1), a(2, -63.1)], &r)
            .decoded
            .is_some());
        assert!(
            resolve_minislot(&[a(1, -57.0), a(0, -63.0), a(2, -63.0), a(3, -63.0)], &r)
                .decoded
                .is_none()
        );
        // Two undecodable frames whose sum reaches the threshold: energy but no frame.
        let s = resolve_minislot(&[a(0, -73.5), a(1, -73.5)], &r);
        assert!(s.energy_detected && s.decoded.is_none());
    }

    #[test]
    fn ieee80211ad_one_feedback_per_slot() {
        let r = rx();
        let near = vec![-40.0; 36];
        let far = vec![-60.0; 36];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // One slot: the near client always wins, the far one always fails.
        let out = ieee80211ad_round(&[&near, &far], 1, 36, &[0, 0], &r, &mut rng);
        assert_eq!(out.success, vec![true, false]);
        assert_eq!(out.minislots, 36);
        // Equal powers in one slot: every frame collides, nobody succeeds.
        let out = ieee80211ad_round(&[&far, &far], 1, 36, &[0, 0], &r, &mut rng);
        assert_eq!(out.success, vec![false, false]);
        // Plenty of slots: both almost always alone.
        let mut both = 0;
        for _ in 0..100 {
            let out = ieee80211ad_round(&[&near, &far], 64, 36, &[0, 0], &r, &mut rng);
            both += (out.success == vec![true, true]) as usize;
        }
        assert!(both > 90);
    }

    #[test]
    fn ieee80211ad_retry_in_a_later_slot_of_the_same_abft() {
        let r = rx();
        let near = vec![-40.0; 36];
        let far = vec![-60.0; 36];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        // Two slots: when both pick slot 0 the far client loses it; with a retry it moves to
        // slot 1 and wins there, so with retries it succeeds every time.
        let (mut lost_without, mut two_sweeps) = (0, 0);
        for _ in 0..200 {
            let out = ieee80211ad_round(&[&near, &far], 2, 36, &[0, 0], &r, &mut rng);
            lost_without += usize::from(!out.success[1]);
            assert!(out.failed_sweeps.iter().all(|&f| f <= 1));
            let out = ieee80211ad_round(&[&near, &far], 2, 36, &[7, 7], &r, &mut rng);
            assert!(out.success[0]);
            assert_eq!(out.failed_sweeps[0], 0);
            // Lost slot 1 to the near client: no later slot, so it fails with one sweep.
            // Lost slot 0: retried in slot 1 alone and won.
            two_sweeps += usize::from(out.success[1] && out.failed_sweeps[1] == 1);
            assert!(out.failed_sweeps[1] <= 1);
        }
        assert!(lost_without > 50, "{lost_without}");
        assert!(two_sweeps > 20, "{two_sweeps}");
        // A retry budget is a cap: one slot leaves no later slot to retry in.
        let out = ieee80211ad_round(&[&near, &far], 1, 36, &[5, 5], &r, &mut rng);
        assert_eq!(out.success, vec![true, false]);
        assert_eq!(out.failed_sweeps, vec![0, 1]);
    }

    #[test]
    fn jpoc_round_counts_empty_and_acks_all() {
        let r = rx();
        // Two clients, each with one good beam (−70 dBm), the rest inaudible.
        let mut c = vec![-120.0; 36];
        c[0] = -70.0;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let out = jpoc_round(&[&c, &c], 36, &r, &mut rng);
        assert_eq!(out.minislots, 36);
        // With M = B = 36 both good beams land somewhere; 1/36 chance they share one.
        let energy = 36 - out.empty_minislots;
        assert!(energy == 1 || energy == 2);
        if energy == 2 {
            assert_eq!(out.success, vec![true, true]);
        }
    }
}
