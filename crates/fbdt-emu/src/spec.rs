//! What a testbed emulates: per path a piecewise-constant timeline of rate, delay and loss.
//!
//! This mirrors `fbdt_scenario::Schedule` (the contract: `PathTimeline { name, steps }`,
//! `Step { t_s, rate_mbps, delay_ms, loss, scan }`, rates already scaled) plus the few
//! scenario fields the testbed needs (queue size, congestion control, seed). Tests and tools
//! can also build it by hand.

use serde::Serialize;

use crate::error::{Error, Result};

/// One piecewise-constant segment of a path, from `t_s` until the next step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PathStep {
    /// Start of the segment, seconds from the start of the run.
    pub t_s: f64,
    /// Rate in Mbit/s at the emulated scale (already multiplied by `scale`); 0 = no delivery.
    pub rate_mbps: f64,
    /// One-way delay in ms, applied in each direction (RTT = 2 × delay).
    pub delay_ms: f64,
    /// Per-packet drop probability in the data direction (server → client), 0..1.
    pub loss: f64,
    /// A WiFi scan: the radio is off channel; packets are held (queued), not dropped.
    pub scan: bool,
    /// One direction of the path drops every packet (a radio that lost only its uplink or
    /// only its downlink); the other direction stays as the step says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_way_outage: Option<Direction>,
}

/// One direction of a path, seen from the client (the multi-radio host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client → server (a download's ACKs).
    Up,
    /// Server → client (a download's data).
    Down,
}

impl PathStep {
    pub fn constant(rate_mbps: f64, delay_ms: f64, loss: f64) -> Self {
        Self {
            t_s: 0.0,
            rate_mbps,
            delay_ms,
            loss,
            scan: false,
            one_way_outage: None,
        }
    }

    /// What the emulator does during this step.
    pub fn mode(&self) -> LinkMode {
        if self.scan {
            LinkMode::Hold
        } else if self.rate_mbps <= 0.0 {
            LinkMode::Outage
        } else {
            LinkMode::Up
        }
    }
}

/// How the emulator realises a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum LinkMode {
    /// Normal: rate, delay, loss as given.
    Up,
    /// Rate 0 (blockage): every packet in both directions is dropped until the next step.
    /// rattan-core panics on a 0 bit/s rate, so the rate cell keeps its last positive rate
    /// and a loss of 1.0 does the dropping (equivalent for TCP, and packets queued before the
    /// outage do not come out seconds later).
    Outage,
    /// Scan: the link transmits at [`HOLD_RATE_BPS`] in both directions, so packets wait in
    /// the path's queue (tail-dropped when it is full) and drain when the scan ends.
    Hold,
}

/// Rate used while a path holds packets (scan): 1 kbit/s — a 1500-byte packet needs 12 s,
/// longer than any scan, and rattan-core rescales the packet in flight when the rate
/// comes back, so it leaves promptly.
pub const HOLD_RATE_BPS: u64 = 1_000;

/// A step's rate as the emulator's cells take it, bit/s.
pub(crate) fn bps(rate_mbps: f64) -> u64 {
    // Never 0: rattan-core panics on a 0 bit/s rate (division when rescaling the packet in
    // flight). Positive rates below the hold rate are clamped up to it.
    ((rate_mbps * 1e6).round() as u64).max(HOLD_RATE_BPS)
}

/// One emulated path (one radio).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathPlan {
    /// Path name (e.g. `wifi`, `wigig`); also the client's and server's interface name when
    /// it is a valid interface name.
    pub name: String,
    /// Drop-tail queue of the rate limiter, packets (each direction).
    pub queue_packets: usize,
    /// Sorted, `steps[0].t_s == 0`, piecewise constant.
    pub steps: Vec<PathStep>,
    /// The radio dozes when idle (the scenario's `radio`); `None`: always awake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radio: Option<fbdt_scenario::RadioSleep>,
    /// The path delivers in bursts (the scenario's `bursts`); `None`: as it goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bursts: Option<fbdt_scenario::Bursts>,
}

impl PathPlan {
    pub fn constant(name: &str, rate_mbps: f64, delay_ms: f64, loss: f64) -> Self {
        Self {
            name: name.into(),
            queue_packets: 1000,
            steps: vec![PathStep::constant(rate_mbps, delay_ms, loss)],
            radio: None,
            bursts: None,
        }
    }

    /// The step in force at `t_s`.
    pub fn at(&self, t_s: f64) -> PathStep {
        let mut cur = self.steps[0];
        for s in &self.steps {
            if s.t_s <= t_s {
                cur = *s;
            } else {
                break;
            }
        }
        cur
    }

    /// Time-averaged rate over `[0, duration_s)`, Mbit/s (outages count as 0).
    pub fn mean_rate_mbps(&self, duration_s: f64) -> f64 {
        if duration_s <= 0.0 {
            return self.steps[0].rate_mbps;
        }
        let mut acc = 0.0;
        for (i, s) in self.steps.iter().enumerate() {
            let end = self.steps.get(i + 1).map_or(duration_s, |n| n.t_s).min(duration_s);
            if end > s.t_s {
                acc += s.rate_mbps * (end - s.t_s);
            }
        }
        acc / duration_s
    }

    /// Time-averaged rate the emulator delivers over `[from_s, to_s)`, Mbit/s: outages and
    /// scans (held packets) count as 0.
    pub fn delivered_rate_between(&self, from_s: f64, to_s: f64) -> f64 {
        self.up_average_between(from_s, to_s, |s| s.rate_mbps)
    }

    /// [`PathPlan::delivered_rate_between`] after the data direction's configured loss:
    /// the rate × (1 − loss) of each step, Mbit/s.
    pub fn delivered_after_loss_between(&self, from_s: f64, to_s: f64) -> f64 {
        self.up_average_between(from_s, to_s, |s| s.rate_mbps * (1.0 - s.loss))
    }

    /// Time average of `f(step)` over `[from_s, to_s)`, counting only steps in which the
    /// link is up (outages and scans count as 0).
    fn up_average_between(&self, from_s: f64, to_s: f64, f: impl Fn(&PathStep) -> f64) -> f64 {
        if to_s <= from_s {
            return f(&self.at(from_s));
        }
        let mut acc = 0.0;
        for (i, s) in self.steps.iter().enumerate() {
            let end = self.steps.get(i + 1).map_or(f64::INFINITY, |n| n.t_s).min(to_s);
            let start = s.t_s.max(from_s);
            if end > start && s.mode() == LinkMode::Up {
                acc += f(s) * (end - start);
            }
        }
        acc / (to_s - from_s)
    }

    /// Largest rate the path ever has, Mbit/s.
    pub fn peak_rate_mbps(&self) -> f64 {
        self.steps.iter().map(|s| s.rate_mbps).fold(0.0, f64::max)
    }

    /// Cuts direction `dir` in `[from_s, to_s)`: the steps are split at both ends and every
    /// step inside gets `one_way_outage = Some(dir)` (the rest of the step unchanged).
    pub fn cut_one_way(&mut self, dir: Direction, from_s: f64, to_s: f64) -> Result<()> {
        if !(from_s.is_finite() && to_s.is_finite() && from_s >= 0.0 && to_s > from_s) {
            return Err(Error::path(&self.name, format!("bad one-way outage [{from_s}, {to_s})")));
        }
        for t in [from_s, to_s] {
            if !self.steps.iter().any(|s| s.t_s == t) {
                let at = PathStep { t_s: t, ..self.at(t) };
                let i = self.steps.partition_point(|s| s.t_s < t);
                self.steps.insert(i, at);
            }
        }
        for s in &mut self.steps {
            if s.t_s >= from_s && s.t_s < to_s {
                s.one_way_outage = Some(dir);
            }
        }
        Ok(())
    }
}

/// Everything a [`crate::Testbed`] needs to know about a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TestbedSpec {
    /// Scenario name (for logs and results).
    pub name: String,
    /// Congestion control set in both namespaces (`net.ipv4.tcp_congestion_control`).
    pub congestion_control: String,
    /// Length of the schedule, seconds (the player stops applying steps after it).
    pub duration_s: f64,
    /// The factor every rate was multiplied by (reported; rates in `paths` already include it).
    pub scale: f64,
    /// Seed of the emulator's loss processes (path i uses `seed + i`).
    pub seed: u64,
    pub paths: Vec<PathPlan>,
    /// A link the data direction of some paths joins (`None`: every path is disjoint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bottleneck: Option<SharedPlan>,
}

/// A shared bottleneck: the data direction (server → client) of every path in `paths`
/// crosses one more link of `rate_mbps` with one drop-tail queue before its own stages, as
/// two radios behind one backhaul; `competing_tcp` single-path TCP flows cross it too, each
/// over a path of its own that no scheme uses ([`TestbedSpec::competitor_paths`];
/// docs/testbed.md, "Shared bottleneck").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SharedPlan {
    /// Indices into [`TestbedSpec::paths`].
    pub paths: Vec<usize>,
    /// At scale, Mbit/s, constant over the run.
    pub rate_mbps: f64,
    pub queue_packets: usize,
    pub competing_tcp: u32,
    pub competing_delay_ms: f64,
}

/// Competing flows a testbed carries at most (the scenario format's limit).
pub const MAX_COMPETING_TCP: u32 = fbdt_scenario::limits::MAX_COMPETING_TCP;

impl SharedPlan {
    fn validate(&self, paths: usize) -> Result<()> {
        let bad = |why: String| Err(Error::Spec(format!("shared bottleneck: {why}")));
        if self.paths.is_empty() {
            return bad("no path joins it".into());
        }
        for (i, &p) in self.paths.iter().enumerate() {
            if p >= paths {
                return bad(format!("path index {p} out of range ({paths} paths)"));
            }
            if self.paths[..i].contains(&p) {
                return bad(format!("path index {p} named twice"));
            }
        }
        if !(self.rate_mbps.is_finite() && self.rate_mbps > 0.0) {
            return bad(format!("rate {} Mbit/s must be positive", self.rate_mbps));
        }
        if self.queue_packets == 0 {
            return bad("queue_packets must be > 0".into());
        }
        if self.competing_tcp > MAX_COMPETING_TCP {
            return bad(format!(
                "{} competing flows; at most {MAX_COMPETING_TCP}",
                self.competing_tcp
            ));
        }
        if !(self.competing_delay_ms.is_finite() && self.competing_delay_ms >= 0.0) {
            return bad(format!("competing delay {} ms", self.competing_delay_ms));
        }
        Ok(())
    }
}

impl TestbedSpec {
    /// Checks what the emulator relies on; names the offending path.
    pub fn validate(&self) -> Result<()> {
        if self.paths.is_empty() {
            return Err(Error::Spec("no paths".into()));
        }
        if self.paths.len() > 8 {
            // kernel MPTCP allows at most 8 subflows (MPTCP_PM_ADDR_MAX limits).
            return Err(Error::Spec(format!(
                "{} paths; at most 8 are supported",
                self.paths.len()
            )));
        }
        for (i, p) in self.paths.iter().enumerate() {
            if self.paths[..i].iter().any(|q| q.name == p.name) {
                return Err(Error::path(&p.name, "duplicate path name"));
            }
            if p.steps.is_empty() || p.steps[0].t_s != 0.0 {
                return Err(Error::path(&p.name, "steps must start at t=0"));
            }
            if p.queue_packets == 0 {
                return Err(Error::path(&p.name, "queue_packets must be > 0"));
            }
            for w in p.steps.windows(2) {
                if w[1].t_s < w[0].t_s {
                    return Err(Error::path(&p.name, format!("steps not sorted at t={}", w[1].t_s)));
                }
            }
            for s in &p.steps {
                let ok = s.rate_mbps.is_finite()
                    && s.rate_mbps >= 0.0
                    && s.delay_ms.is_finite()
                    && s.delay_ms >= 0.0
                    && (0.0..=1.0).contains(&s.loss);
                if !ok {
                    return Err(Error::path(&p.name, format!("bad step {s:?}")));
                }
            }
        }
        if let Some(b) = &self.bottleneck {
            b.validate(self.paths.len())?;
        }
        if self.congestion_control.is_empty()
            || !self
                .congestion_control
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(Error::Spec(format!(
                "bad congestion control {:?}",
                self.congestion_control
            )));
        }
        Ok(())
    }

    /// A shared bottleneck's competing flows' own paths, named `tcp#1`, `tcp#2`, … (as the
    /// results name the flows): the competing delay one way, the shared queue's size, and as
    /// fast as the fastest path that joins the link (at least the link itself), so only the
    /// shared link limits them and their packets are serialised as the members' are.
    pub fn competitor_paths(&self) -> Vec<PathPlan> {
        let Some(b) = &self.bottleneck else {
            return Vec::new();
        };
        let fastest = b
            .paths
            .iter()
            .filter_map(|&i| self.paths.get(i))
            .map(PathPlan::peak_rate_mbps)
            .fold(b.rate_mbps, f64::max);
        (1..=b.competing_tcp)
            .map(|k| {
                let mut p = PathPlan::constant(&format!("tcp#{k}"), fastest, b.competing_delay_ms, 0.0);
                p.queue_packets = b.queue_packets;
                p
            })
            .collect()
    }

    /// Time-averaged sum of the path rates over the run, Mbit/s (at scale): the capacity.
    pub fn capacity_mbps(&self) -> f64 {
        self.paths.iter().map(|p| p.mean_rate_mbps(self.duration_s)).sum()
    }

    /// Largest instantaneous sum of the path rates, Mbit/s (at scale).
    pub fn peak_total_mbps(&self) -> f64 {
        let mut times: Vec<f64> = self.paths.iter().flat_map(|p| p.steps.iter().map(|s| s.t_s)).collect();
        times.sort_by(f64::total_cmp);
        times
            .iter()
            .map(|&t| self.paths.iter().map(|p| p.at(t).rate_mbps).sum::<f64>())
            .fold(0.0, f64::max)
    }

    /// The same spec with every rate multiplied by `factor` (and `scale` updated).
    pub fn rescaled(&self, factor: f64) -> Self {
        let mut s = self.clone();
        s.scale *= factor;
        for p in &mut s.paths {
            for st in &mut p.steps {
                st.rate_mbps *= factor;
            }
        }
        if let Some(b) = &mut s.bottleneck {
            b.rate_mbps *= factor;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_step() -> PathPlan {
        PathPlan {
            name: "a".into(),
            queue_packets: 100,
            radio: None,
            bursts: None,
            steps: vec![
                PathStep::constant(100.0, 5.0, 0.0),
                PathStep {
                    t_s: 1.0,
                    rate_mbps: 0.0,
                    delay_ms: 5.0,
                    loss: 0.0,
                    scan: false,
                    one_way_outage: None,
                },
                PathStep {
                    t_s: 2.0,
                    rate_mbps: 50.0,
                    delay_ms: 5.0,
                    loss: 0.0,
                    scan: true,
                    one_way_outage: None,
                },
            ],
        }
    }

    fn two_paths(bottleneck: Option<SharedPlan>) -> TestbedSpec {
        TestbedSpec {
            name: "t".into(),
            congestion_control: "cubic".into(),
            duration_s: 4.0,
            scale: 1.0,
            seed: 1,
            paths: vec![two_step(), PathPlan::constant("b", 10.0, 1.0, 0.0)],
            bottleneck,
        }
    }

    #[test]
    fn one_way_outage_splits_the_steps() {
        let mut p = two_step();
        p.cut_one_way(Direction::Up, 0.5, 1.5).unwrap();
        let times: Vec<f64> = p.steps.iter().map(|s| s.t_s).collect();
        assert_eq!(times, vec![0.0, 0.5, 1.0, 1.5, 2.0]);
        assert_eq!(p.at(0.2).one_way_outage, None);
        assert_eq!(p.at(0.7).one_way_outage, Some(Direction::Up));
        assert_eq!(p.at(0.7).rate_mbps, 100.0);
        assert_eq!(p.at(1.2).one_way_outage, Some(Direction::Up));
        assert_eq!(p.at(1.2).mode(), LinkMode::Outage);
        assert_eq!(p.at(1.7).one_way_outage, None);
        assert_eq!(p.at(1.7).rate_mbps, 0.0);
        assert!(p.cut_one_way(Direction::Down, 2.0, 1.0).is_err());
    }

    #[test]
    fn modes_and_means() {
        let p = two_step();
        assert_eq!(p.at(0.5).mode(), LinkMode::Up);
        assert_eq!(p.at(1.5).mode(), LinkMode::Outage);
        assert_eq!(p.at(2.5).mode(), LinkMode::Hold);
        assert!((p.mean_rate_mbps(4.0) - (100.0 + 0.0 + 2.0 * 50.0) / 4.0).abs() < 1e-9);
        assert_eq!(p.peak_rate_mbps(), 100.0);
    }

    #[test]
    fn validation_names_the_path() {
        let mut s = two_paths(None);
        s.validate().unwrap();
        assert_eq!(s.peak_total_mbps(), 110.0);
        s.paths[1].steps[0].loss = 2.0;
        assert!(s.validate().unwrap_err().to_string().contains("\"b\""));
        s.paths[1] = two_step();
        assert!(s.validate().unwrap_err().to_string().contains("duplicate"));
    }

    #[test]
    fn a_shared_bottleneck_is_checked_and_scaled() {
        let s = two_paths(Some(SharedPlan {
            paths: vec![0, 1],
            rate_mbps: 20.0,
            queue_packets: 100,
            competing_tcp: 2,
            competing_delay_ms: 3.0,
        }));
        s.validate().unwrap();
        let c = s.competitor_paths();
        assert_eq!(c.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["tcp#1", "tcp#2"]);
        // As fast as the fastest member (path "a" peaks at 100 Mbit/s).
        assert_eq!((c[1].steps[0].rate_mbps, c[1].steps[0].delay_ms, c[1].queue_packets), (100.0, 3.0, 100));
        assert_eq!(s.rescaled(0.5).bottleneck.unwrap().rate_mbps, 10.0);
        for (edit, words) in [
            (&(|b: &mut SharedPlan| b.paths = vec![0, 2]) as &dyn Fn(&mut SharedPlan), "out of range"),
            (&|b: &mut SharedPlan| b.paths = vec![1, 1], "twice"),
            (&|b: &mut SharedPlan| b.paths.clear(), "no path"),
            (&|b: &mut SharedPlan| b.rate_mbps = 0.0, "positive"),
            (&|b: &mut SharedPlan| b.competing_tcp = MAX_COMPETING_TCP + 1, "at most"),
        ] {
            let mut bad = s.clone();
            edit(bad.bottleneck.as_mut().unwrap());
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains("shared bottleneck") && e.contains(words), "{e}");
        }
    }
}
