//! Beacon-interval simulation of one realization: BTI → A-BFT → ATI → data interval
//! (static TDMA among associated clients), with blockage and re-contention.
//!
//! Pure: configuration and seeds in, a [`RunResult`] out. No clock, no I/O.

use crate::abft::{ieee80211ad_round, jpoc_round, Receiver};
use crate::antenna::Upa;
use crate::channel::{draw_channel, draw_site, link_budget, Ap, LinkBudget, Site};
use crate::config::Config;
use crate::jpoc::MiniSlotController;
use crate::metrics::jain_index;
use crate::power::{ap_announced_term_db, clamp_tx_power, client_tx_power_dbm, rxp_max_ap_dbm};
use crate::rng::{stream, Purpose};
use rand::Rng;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "no client position within {tries} draws is covered by the AP (best beam at max power below \
         {decode_snr_db} dB SNR); raise radio.client_max_tx_power_dbm, shrink cell.radius_m or set \
         cell.require_coverage = false"
    )]
    NoCoverage { tries: usize, decode_snr_db: f64 },
}

/// Which A-BFT the AP runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// 802.11ad/ay: max power, `ieee80211ad.slots` × 36 mini-slots, random slot.
    Ieee80211ad,
    /// JPOC: power control + adaptive mini-slots.
    Jpoc,
}

/// Radio model derived from a config: antennas, receiver thresholds, PC constants.
#[derive(Debug, Clone)]
pub struct Model {
    pub cfg: Config,
    pub ap: Ap,
    pub client: Upa,
    pub rx: Receiver,
}

/// A client's transmit power for A-BFT.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TxPolicy {
    /// No power control: maximum power (802.11ad, "W/O PC").
    Max,
    /// JPOC power control targeting SNR γ (dB) for the best beam.
    PowerControl { gamma_db: f64 },
}

impl Model {
    pub fn new(cfg: &Config) -> Self {
        let upa = Upa::new(&cfg.antenna);
        Self {
            ap: Ap::new(upa.clone(), cfg.antenna.ap_panels),
            client: upa,
            rx: Receiver::new(&cfg.radio),
            cfg: cfg.clone(),
        }
    }

    pub fn link(&self, site: &Site, force_los: Option<bool>, rng: &mut impl Rng) -> LinkBudget {
        let ch = draw_channel(&self.cfg.cell, self.cfg.radio.carrier_ghz, site, force_los, rng);
        link_budget(
            &self.ap,
            &self.client,
            site,
            &ch,
            self.cfg.radio.ap_tx_power_dbm,
            self.cfg.radio.client_max_tx_power_dbm,
        )
    }

    /// Coverage: the AP decodes the client's best beam at maximum power.
    pub fn covered(&self, link: &LinkBudget) -> bool {
        link.abft_rx_dbm_at_max.iter().any(|&p| self.rx.decodable(p))
    }

    /// A new client somewhere in the cell (conditioned on coverage if configured).
    pub fn draw_client(&self, rng: &mut impl Rng) -> Result<(Site, LinkBudget), SimError> {
        let tries = self.cfg.cell.coverage_max_tries;
        for _ in 0..tries {
            let site = draw_site(&self.cfg.cell, rng);
            let link = self.link(&site, None, rng);
            if !self.cfg.cell.require_coverage || self.covered(&link) {
                return Ok((site, link));
            }
        }
        Err(SimError::NoCoverage {
            tries,
            decode_snr_db: self.cfg.radio.decode_snr_db,
        })
    }

    /// A new channel at the same place (after blockage or movement). Conditioned on coverage
    /// when configured; if no covered draw is found the last one is kept: that client then
    /// simply keeps failing A-BFT, which is what would happen.
    pub fn redraw_link(&self, site: &Site, rng: &mut impl Rng) -> LinkBudget {
        let mut link = self.link(site, None, rng);
        if self.cfg.cell.require_coverage {
            for _ in 1..self.cfg.cell.coverage_max_tries {
                if self.covered(&link) {
                    break;
                }
                link = self.link(site, None, rng);
            }
        }
        link
    }

    /// Eq. 3.5 at the client, with the gains it can know: its own array gain and the AP's
    /// announced term, both reduced by the beam-edge roll-off (thesis footnote 3).
    pub fn tx_power_dbm(&self, link: &LinkBudget, policy: TxPolicy) -> f64 {
        let r = &self.cfg.radio;
        match policy {
            TxPolicy::Max => r.client_max_tx_power_dbm,
            TxPolicy::PowerControl { gamma_db } => {
                let a = &self.cfg.antenna;
                // (G_T − G_R) of a device = AF peak minus the quasi-omni offset.
                let clt_diff = self.client.array_gain_db() - a.quasi_omni_offset_db - a.client_rolloff_db;
                let ap_term = ap_announced_term_db(
                    self.ap.upa.array_gain_db() - a.quasi_omni_offset_db,
                    a.ap_rolloff_db,
                    r.ap_tx_power_dbm,
                );
                let target = rxp_max_ap_dbm(gamma_db, r.noise_dbm());
                let p = client_tx_power_dbm(target, link.bti_best_rx_dbm, clt_diff, ap_term);
                clamp_tx_power(p, r.client_max_tx_power_dbm, r.client_min_tx_power_dbm)
            }
        }
    }

    /// Received power at the AP per client beam under `policy` (dBm).
    pub fn abft_rx_dbm(&self, link: &LinkBudget, policy: TxPolicy) -> Vec<f64> {
        let backoff = self.cfg.radio.client_max_tx_power_dbm - self.tx_power_dbm(link, policy);
        link.abft_rx_dbm_at_max.iter().map(|p| p - backoff).collect()
    }

    /// Number of beams the AP could decode alone ("good beams").
    pub fn good_beams(&self, abft_rx_dbm: &[f64]) -> usize {
        abft_rx_dbm.iter().filter(|&&p| self.rx.decodable(p)).count()
    }

    pub fn policy(&self, protocol: Protocol) -> TxPolicy {
        match protocol {
            Protocol::Ieee80211ad => TxPolicy::Max,
            Protocol::Jpoc => TxPolicy::PowerControl {
                gamma_db: self.cfg.jpoc.gamma_db,
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Wants data; re-trains every `static_retrain_period_s`.
    Static,
    /// Wants data; moves, re-trains every `mobile_retrain_period_s` with a new channel.
    Mobile,
    /// Disconnected; runs A-BFT every `chatty_period_s`, never takes data.
    Chatty,
}

#[derive(Debug, Clone)]
struct Client {
    kind: Kind,
    site: Site,
    link: LinkBudget,
    abft_rx: Vec<f64>,
    associated: bool,
    airtime_s: f64,
    /// 802.11ad FailedRSSAttempts: consecutive sweeps without SSW-Feedback.
    failed_rss: u32,
    /// 802.11ad RSS back-off: A-BFTs still to skip.
    rss_backoff_left: u32,
}

/// Per-realization outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    pub protocol: Protocol,
    /// Data airtime per data client (static then mobile), seconds.
    pub airtime_s: Vec<f64>,
    pub jain: f64,
    /// A-BFT participations (all contenders, including chatty ones) and how many failed.
    pub attempts: u64,
    pub failures: u64,
    /// Mini-slots allocated to A-BFT, averaged over beacon intervals.
    pub minislots_per_bi: f64,
    /// Contenders per A-BFT round, averaged.
    pub contenders_per_bi: f64,
    /// Data clients never associated during the whole realization.
    pub never_associated: usize,
    /// Horizontal AP distance of each data client (same order as `airtime_s`).
    pub distance_m: Vec<f64>,
    /// A-BFTs skipped by clients in 802.11ad RSS back-off (summed over clients).
    pub backoff_skips: u64,
}

impl RunResult {
    /// Mean airtime of the farthest quarter of the data clients over that of the nearest
    /// quarter (at least one client each): how much the near–far effect costs far clients.
    pub fn far_near_airtime_ratio(&self) -> f64 {
        let n = self.airtime_s.len();
        if n < 2 {
            return 1.0;
        }
        let q = (n / 4).max(1);
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| self.distance_m[a].total_cmp(&self.distance_m[b]));
        let avg = |ix: &[usize]| ix.iter().map(|&i| self.airtime_s[i]).sum::<f64>() / ix.len() as f64;
        let near = avg(&order[..q]);
        let far = avg(&order[n - q..]);
        if near > 0.0 {
            far / near
        } else if far > 0.0 {
            f64::INFINITY
        } else {
            1.0
        }
    }
}

impl RunResult {
    pub fn failure_probability(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.failures as f64 / self.attempts as f64
        }
    }
}

fn per_bi_probability(period_s: f64, bi_s: f64) -> f64 {
    // A Poisson-like re-training process with the given mean period, sampled per BI.
    if period_s <= 0.0 {
        0.0
    } else {
        (bi_s / period_s).min(1.0)
    }
}

/// Deploy the clients of realization `rep` (same for both protocols).
fn deploy(model: &Model, seed: u64, rep: u64) -> Result<Vec<(Kind, Site, LinkBudget)>, SimError> {
    let cfg = &model.cfg;
    let mut rng = stream(seed, Purpose::Deployment, rep);
    let n_mobile = (cfg.sim.clients as f64 * cfg.dynamics.mobile_fraction).round() as usize;
    let mut out = Vec::with_capacity(cfg.sim.clients + cfg.dynamics.chatty_clients);
    for i in 0..cfg.sim.clients + cfg.dynamics.chatty_clients {
        let kind = if i >= cfg.sim.clients {
            Kind::Chatty
        } else if i >= cfg.sim.clients - n_mobile {
            Kind::Mobile
        } else {
            Kind::Static
        };
        let (site, link) = model.draw_client(&mut rng)?;
        out.push((kind, site, link));
    }
    Ok(out)
}

/// Run one realization of `protocol`. `rep` selects the deployment and dynamics streams.
pub fn simulate(model: &Model, protocol: Protocol, seed: u64, rep: u64) -> Result<RunResult, SimError> {
    let cfg = &model.cfg;
    let policy = model.policy(protocol);
    let mut clients: Vec<Client> = deploy(model, seed, rep)?
        .into_iter()
        .map(|(kind, site, link)| Client {
            kind,
            site,
            abft_rx: model.abft_rx_dbm(&link, policy),
            link,
            associated: false,
            airtime_s: 0.0,
            failed_rss: 0,
            rss_backoff_left: 0,
        })
        .collect();
    let purpose = match protocol {
        Protocol::Ieee80211ad => Purpose::DynamicsIeee80211ad,
        Protocol::Jpoc => Purpose::DynamicsJpoc,
    };
    let mut rng = stream(seed, purpose, rep);
    let bi_s = cfg.sim.beacon_interval_ms / 1000.0;
    let p_static = per_bi_probability(cfg.dynamics.static_retrain_period_s, bi_s);
    let p_mobile = per_bi_probability(cfg.dynamics.mobile_retrain_period_s, bi_s);
    let p_chatty = per_bi_probability(cfg.dynamics.chatty_period_s, bi_s);
    let mut controller = MiniSlotController::new(&cfg.jpoc);
    let mut ever_associated = vec![false; clients.len()];
    let (mut attempts, mut failures, mut minislots_sum, mut contenders_sum) = (0u64, 0u64, 0u64, 0u64);
    let n_bi = cfg.beacon_intervals();
    let bti_s = model.ap.sectors() as f64 * cfg.radio.minislot_us * 1e-6;
    let mut idx: Vec<usize> = Vec::with_capacity(clients.len());
    let mut retries: Vec<u32> = Vec::with_capacity(clients.len());
    let mut backoff_skips = 0u64;
    let ad = &cfg.ieee80211ad;

    for _bi in 0..n_bi {
        // Who contends in this A-BFT. Draw order is fixed (client index order) so runs repeat.
        idx.clear();
        for (i, c) in clients.iter_mut().enumerate() {
            let contend = match c.kind {
                Kind::Chatty => rng.gen::<f64>() < p_chatty,
                Kind::Static => !c.associated || rng.gen::<f64>() < p_static,
                Kind::Mobile => {
                    let due = rng.gen::<f64>() < p_mobile;
                    if due {
                        // It moved: new channel at (roughly) the same place.
                        c.link = model.redraw_link(&c.site, &mut rng);
                        c.abft_rx = model.abft_rx_dbm(&c.link, policy);
                    }
                    !c.associated || due
                }
            };
            // 802.11ad RSS back-off: a responder in back-off sits this A-BFT out (the count
            // drops at the end of every A-BFT, so "0" means it may sweep now).
            if protocol == Protocol::Ieee80211ad && c.rss_backoff_left > 0 {
                c.rss_backoff_left -= 1;
                if contend {
                    backoff_skips += 1;
                    continue;
                }
            }
            if contend {
                idx.push(i);
            }
        }
        let rx_lists: Vec<&[f64]> = idx.iter().map(|&i| clients[i].abft_rx.as_slice()).collect();
        let out = match protocol {
            Protocol::Ieee80211ad => {
                // Retry in a later slot of this A-BFT while FailedRSSAttempts stays ≤ the limit.
                retries.clear();
                retries.extend(idx.iter().map(|&i| {
                    if ad.retry_within_abft {
                        ad.rss_retry_limit.saturating_sub(clients[i].failed_rss)
                    } else {
                        0
                    }
                }));
                ieee80211ad_round(
                    &rx_lists,
                    ad.slots,
                    ad.minislots_per_slot,
                    &retries,
                    &model.rx,
                    &mut rng,
                )
            }
            Protocol::Jpoc => {
                let m = controller.minislots();
                let out = jpoc_round(&rx_lists, m, &model.rx, &mut rng);
                controller.observe(out.empty_minislots, m);
                out
            }
        };
        minislots_sum += out.minislots as u64;
        contenders_sum += idx.len() as u64;
        for (k, &i) in idx.iter().enumerate() {
            attempts += 1;
            if protocol == Protocol::Ieee80211ad {
                let c = &mut clients[i];
                if out.success[k] {
                    c.failed_rss = 0;
                } else {
                    c.failed_rss += out.failed_sweeps[k];
                    if c.failed_rss > ad.rss_retry_limit && ad.rss_backoff > 0 {
                        c.rss_backoff_left = rng.gen_range(0..ad.rss_backoff);
                    }
                }
            }
            if out.success[k] {
                // A re-training client that fails keeps its old beams (stays associated).
                if clients[i].kind != Kind::Chatty {
                    clients[i].associated = true;
                    ever_associated[i] = true;
                }
            } else {
                failures += 1;
            }
        }

        // Data interval: what is left of the BI after BTI, A-BFT and ATI, split equally
        // (static TDMA) among the clients associated at the ATI.
        let bhi_s = bti_s + out.minislots as f64 * cfg.radio.minislot_us * 1e-6 + cfg.sim.ati_us * 1e-6;
        let dti_s = (bi_s - bhi_s).max(0.0);
        let n_assoc = clients.iter().filter(|c| c.associated).count();
        if n_assoc == 0 {
            continue;
        }
        let share = dti_s / n_assoc as f64;
        for c in clients.iter_mut().filter(|c| c.associated) {
            if rng.gen::<f64>() < cfg.dynamics.blockage_prob {
                // Blocked during this BI: its data is lost, the link is gone, and it must
                // re-contend in the next A-BFT over whatever path is left.
                c.associated = false;
                if cfg.dynamics.redraw_channel_on_blockage {
                    c.link = model.redraw_link(&c.site, &mut rng);
                    c.abft_rx = model.abft_rx_dbm(&c.link, policy);
                }
            } else {
                c.airtime_s += share;
            }
        }
    }

    let data: Vec<&Client> = clients.iter().filter(|c| c.kind != Kind::Chatty).collect();
    let airtime_s: Vec<f64> = data.iter().map(|c| c.airtime_s).collect();
    let distance_m: Vec<f64> = data.iter().map(|c| c.site.d2d()).collect();
    let never_associated = clients
        .iter()
        .zip(&ever_associated)
        .filter(|(c, e)| c.kind != Kind::Chatty && !**e)
        .count();
    Ok(RunResult {
        protocol,
        jain: jain_index(&airtime_s),
        airtime_s,
        attempts,
        failures,
        minislots_per_bi: minislots_sum as f64 / n_bi as f64,
        contenders_per_bi: contenders_sum as f64 / n_bi as f64,
        never_associated,
        distance_m,
        backoff_skips,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        let mut c = Config::default();
        c.sim.clients = 6;
        c.sim.duration_s = 1.0;
        c
    }

    #[test]
    fn same_seed_same_result() {
        let mut cfg = small();
        cfg.dynamics.blockage_prob = 0.3;
        cfg.dynamics.chatty_clients = 2;
        cfg.dynamics.mobile_fraction = 0.5;
        let m = Model::new(&cfg);
        for p in [Protocol::Jpoc, Protocol::Ieee80211ad] {
            let a = simulate(&m, p, 42, 3).unwrap();
            let b = simulate(&m, p, 42, 3).unwrap();
            assert_eq!(a, b);
            let c = simulate(&m, p, 43, 3).unwrap();
            assert_ne!(a.airtime_s, c.airtime_s);
        }
    }

    #[test]
    fn participation_chatty_and_mobile_add_contenders_deterministically() {
        // Thesis participation (Fig. 3.2a): chatty clients sweep every ~10 s and never take
        // data; mobile clients re-train every 15–20 s. Use short periods so a 1 s run shows it.
        let mut cfg = small();
        cfg.dynamics.chatty_period_s = 0.2;
        cfg.dynamics.mobile_retrain_period_s = 0.2;
        let base = simulate(&Model::new(&cfg), Protocol::Ieee80211ad, 7, 0).unwrap();
        cfg.dynamics.chatty_clients = 4;
        cfg.dynamics.mobile_fraction = 0.5;
        let m = Model::new(&cfg);
        for p in [Protocol::Jpoc, Protocol::Ieee80211ad] {
            let r = simulate(&m, p, 7, 0).unwrap();
            // Chatty clients get no airtime entry; data clients keep theirs.
            assert_eq!(r.airtime_s.len(), 6);
            assert_eq!(r.distance_m.len(), 6);
            // 4 chatty × 0.5 per BI + 3 mobile × 0.5 per BI ≈ 3.5 extra contenders per BI.
            assert!(
                r.contenders_per_bi > base.contenders_per_bi + 2.0,
                "{p:?}: {} vs {}",
                r.contenders_per_bi,
                base.contenders_per_bi
            );
            assert_eq!(r, simulate(&m, p, 7, 0).unwrap());
        }
    }

    #[test]
    fn rss_backoff_only_in_80211ad_and_only_when_failing() {
        // One slot and many contenders at high blockage: far clients keep failing, exceed
        // dot11RSSRetryLimit and back off. JPOC has no such rule.
        let mut cfg = small();
        cfg.sim.clients = 12;
        cfg.sim.duration_s = 3.0;
        cfg.dynamics.blockage_prob = 0.5;
        cfg.ieee80211ad.slots = 1;
        let m = Model::new(&cfg);
        let ad = simulate(&m, Protocol::Ieee80211ad, 3, 0).unwrap();
        assert!(ad.backoff_skips > 0);
        assert_eq!(simulate(&m, Protocol::Jpoc, 3, 0).unwrap().backoff_skips, 0);
        cfg.ieee80211ad.rss_backoff = 0;
        assert_eq!(
            simulate(&Model::new(&cfg), Protocol::Ieee80211ad, 3, 0)
                .unwrap()
                .backoff_skips,
            0
        );
        // No blockage, plenty of slots: nobody reaches the retry limit.
        let mut easy = small();
        easy.ieee80211ad.slots = 8;
        assert_eq!(
            simulate(&Model::new(&easy), Protocol::Ieee80211ad, 3, 0)
                .unwrap()
                .backoff_skips,
            0
        );
    }

    #[test]
    fn far_near_ratio_orders_by_distance() {
        let r = RunResult {
            protocol: Protocol::Ieee80211ad,
            airtime_s: vec![4.0, 1.0, 2.0, 3.0],
            jain: 0.0,
            attempts: 0,
            failures: 0,
            minislots_per_bi: 0.0,
            contenders_per_bi: 0.0,
            never_associated: 0,
            distance_m: vec![1.0, 20.0, 10.0, 5.0],
            backoff_skips: 0,
        };
        // Nearest (1 m) has 4 s, farthest (20 m) 1 s.
        assert!((r.far_near_airtime_ratio() - 0.25).abs() < 1e-12);
    }

    #[test]
    fn no_blockage_everyone_gets_in_and_airtime_adds_up() {
        let cfg = small();
        let m = Model::new(&cfg);
        for p in [Protocol::Jpoc, Protocol::Ieee80211ad] {
            let r = simulate(&m, p, 1, 0).unwrap();
            assert_eq!(r.airtime_s.len(), 6);
            let total: f64 = r.airtime_s.iter().sum();
            // Never more than the realization; BHI overhead is a few ms per 100 ms BI.
            assert!(
                total <= cfg.sim.duration_s + 1e-9 && total > 0.8 * cfg.sim.duration_s,
                "{p:?}: {total}"
            );
            assert!(r.jain > 0.5 && r.jain <= 1.0 + 1e-12);
        }
    }

    #[test]
    fn power_control_puts_best_beam_near_gamma() {
        // With PC the best beam should land near γ (the roll-off margins make it a bit
        // higher); never above what max power gives.
        let cfg = Config::default();
        let m = Model::new(&cfg);
        let mut rng = stream(5, Purpose::Beams, 0);
        let noise = cfg.radio.noise_dbm();
        let mut near_gamma = 0;
        for _ in 0..200 {
            let (_, link) = m.draw_client(&mut rng).unwrap();
            let pc = m.abft_rx_dbm(&link, TxPolicy::PowerControl { gamma_db: 4.0 });
            let max = m.abft_rx_dbm(&link, TxPolicy::Max);
            let best_pc = pc.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - noise;
            let best_max = max.iter().cloned().fold(f64::NEG_INFINITY, f64::max) - noise;
            assert!(best_pc <= best_max + 1e-9);
            if (best_pc - 4.0).abs() < 8.0 || best_pc < 4.0 && (best_pc - best_max).abs() < 1e-9 {
                near_gamma += 1;
            }
            assert!(m.good_beams(&pc) <= m.good_beams(&max));
        }
        assert!(near_gamma > 180, "{near_gamma}");
    }
}
