//! The workloads section of `fbdt-lab paper` (issue 17): files, web pages, progressive 8K
//! video, adaptive video and 360° tiles (paper 001 sec. VI-C) over los, nlos, mobility and
//! blockage, every scheme beside the paper's numbers, each claim a check. They run in the
//! simulator unless `--workloads-backend emu` asks for the testbed (longer: every run is
//! real time, one at a time): then MPTCP is the kernel's, sizes and rates are scaled by the
//! host's calibrated scale (labelled by their nominal value), and a table with a run the
//! monitors flagged counts in no claim (UNFAITHFUL instead of PASS or MISS).

use std::time::Instant;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::check::{Check, Status};
use super::text::short;
use fbdt_harness::BackendKind;
use fbdt_workload::{self as workload, Browser, Kind, Setup, WorkloadArgs};

/// The paper's mobility-related scenarios the workloads run over.
pub const SCENARIOS: [&str; 4] = ["los", "nlos", "mobility", "blockage"];
/// What stands for MPTCP in the simulator (no kernel there); on the testbed, the kernel's.
const SIM_MPTCP: &str = "mp:minrtt";
const KERNEL_MPTCP: &str = "mptcp";
/// In the checks: whichever of the two a table has.
const MPTCP: &str = "MPTCP";
const WIFI: &str = "tcp:wifi";
const WIGIG: &str = "tcp:wigig";
/// Radio sleep/wake as `--radio defaults`: what makes WiGig slow to start a small file.
const RADIO: &str = "defaults";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadSection {
    pub backend: String,
    pub model: String,
    /// Seeds per scheme and point.
    pub repeat: u32,
    pub radio: String,
    /// Progressive / 360° / adaptive video length (s); `None`: each scenario's duration.
    pub video_s: Option<f64>,
    /// What loaded the web pages: `chromium` (real pages in headless Chromium, testbed) or
    /// absent (the synthetic page driver).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_browser: Option<String>,
    /// What played the adaptive video: `dash.js <version> (BOLA) in chromium` on the testbed
    /// when both are installed, else absent (the in-repo player).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dash_player: Option<String>,
    pub tables: Vec<Table>,
    /// Where FBDT is not the best scheme of a row, said plainly.
    pub fbdt_behind: Vec<String>,
    pub wall_s: f64,
}

/// One workload over one scenario: a row per point (file size, page, video rate…), a
/// column per scheme.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Table {
    pub kind: String,
    pub scenario: String,
    pub metric: String,
    pub schemes: Vec<String>,
    pub rows: Vec<Row>,
    /// Testbed: runs of this table the fidelity monitors flagged (its numbers then count
    /// in no claim).
    #[serde(default)]
    pub unfaithful_runs: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    pub label: String,
    pub values: Vec<Option<f64>>,
    /// The paper's numbers for this row, as text, when it gives them.
    pub paper: Option<String>,
}

impl Table {
    fn value(&self, label: &str, scheme: &str) -> Option<f64> {
        let scheme = match scheme {
            MPTCP if self.schemes.iter().any(|s| s == KERNEL_MPTCP) => KERNEL_MPTCP,
            MPTCP => SIM_MPTCP,
            s => s,
        };
        let col = self.schemes.iter().position(|s| s == scheme)?;
        self.rows.iter().find(|r| r.label == label)?.values[col]
    }
}

fn args(kind: Kind, scenario: &str, quick: bool, backend: BackendKind) -> WorkloadArgs {
    let emu = backend == BackendKind::Emu;
    // The testbed runs in real time: its quick section leaves out the largest files (1 GB at
    // los's scale is 17 MB over WiFi alone: ~17 s a run).
    let sizes: &[&str] = if emu && quick {
        &["100k", "1M", "10M"]
    } else {
        &["100k", "1M", "10M", "100M", "1G"]
    };
    WorkloadArgs {
        kind,
        scenario: scenario.into(),
        backend,
        model: fbdt_sim::PathModel::Pipe,
        schemes: Vec::new(),
        seed: None,
        repeat: if quick { 2 } else { 5 },
        scale: None,
        radio: RADIO.into(),
        max_duration: 120.0,
        jobs: None,
        json: None,
        sizes: sizes.iter().map(|s| s.to_string()).collect(),
        idle_gap: 1.0,
        rates: vec![425.0, 900.0, 1300.0, 1700.0],
        video_s: quick.then_some(10.0),
        buffer_gops: 3,
        vr_rate: 1000.0,
        pages: ["msn", "cnn", "amazon", "facebook", "median"]
            .map(String::from)
            .to_vec(),
        http: vec!["1.1".into(), "2".into()],
        page_loads: 3,
        browser: match kind {
            Kind::Web => (emu && chromium_available()).then_some(Browser::Chromium),
            Kind::Dash => (emu && chromium_available() && dashjs_available()).then_some(Browser::Chromium),
            _ => None,
        },
        abr: None,
        ping_ms: 20.0,
        plot: None,
    }
}

/// On the testbed the web rows come from real page loads in headless Chromium when it and
/// `mptcpize` (for kernel MPTCP) are installed; otherwise from the synthetic page driver.
fn chromium_available() -> bool {
    ["chromium", "python3", "mptcpize"]
        .iter()
        .all(|p| workload::browser::on_path(p))
}

/// dash.js, as `workload dash --browser chromium` finds it.
fn dashjs_available() -> bool {
    workload::dash_browser::dashjs_path().is_file()
}

/// The section of a campaign whose cases each ran [`run`] over some of the scenarios:
/// their tables in case order, the comparison across them made again; what ran them (backend,
/// model, seeds, players) is the first case's, `wall_s` the cases' added up.
pub fn merge(parts: Vec<WorkloadSection>, wall_s: f64) -> Option<WorkloadSection> {
    let mut parts = parts.into_iter();
    let mut merged = parts.next()?;
    for p in parts {
        merged.tables.extend(p.tables);
    }
    merged.fbdt_behind = fbdt_behind(&merged.tables);
    merged.wall_s = wall_s;
    Some(merged)
}

/// Runs every workload over `scenarios` (the paper's: [`SCENARIOS`]) on `backend`;
/// `progress` gets one line per step.
pub fn run(
    scenarios: &[String],
    quick: bool,
    backend: BackendKind,
    testbed: &fbdt_emu::TestbedOptions,
    progress: &dyn Fn(&str),
) -> Result<WorkloadSection> {
    let started = Instant::now();
    let kinds = [Kind::File, Kind::Web, Kind::Progressive, Kind::Dash, Kind::Vr];
    let mut tables = Vec::new();
    let steps = scenarios.len() * kinds.len();
    for (i, scenario) in scenarios.iter().enumerate() {
        for (j, &kind) in kinds.iter().enumerate() {
            progress(&format!(
                "[workloads {}/{steps}] {kind:?} over {scenario} ({}), elapsed {:.0} s",
                i * kinds.len() + j + 1,
                match backend {
                    BackendKind::Sim => "simulator",
                    BackendKind::Emu => "testbed",
                },
                started.elapsed().as_secs_f64()
            ));
            let a = args(kind, scenario, quick, backend);
            let setup = Setup::new(&a, testbed)?;
            tables.push(table(&setup, &a).with_context(|| format!("workload {kind:?} over {scenario}"))?);
        }
    }
    let probe = args(Kind::File, "los", quick, backend);
    let web_browser = args(Kind::Web, "los", quick, backend)
        .browser
        .map(|_| "chromium".to_string());
    let dash_player = args(Kind::Dash, "los", quick, backend)
        .browser
        .map(|_| format!("dash.js {} (BOLA) in chromium", workload::dash_browser::DASHJS_VERSION));
    Ok(WorkloadSection {
        backend: match backend {
            BackendKind::Sim => "sim".into(),
            BackendKind::Emu => "emu".into(),
        },
        model: match backend {
            BackendKind::Sim => probe.model.to_string(),
            BackendKind::Emu => "testbed".into(),
        },
        repeat: probe.repeat,
        radio: RADIO.into(),
        video_s: probe.video_s,
        web_browser,
        dash_player,
        fbdt_behind: fbdt_behind(&tables),
        tables,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// Whether a smaller value of this row is better (times, pauses, rebuffering).
fn lower_is_better(kind: &str, label: &str) -> bool {
    matches!(kind, "file" | "web") || label.ends_with("pauses %") || label == "rebuffer %"
}

/// Rows where another scheme beats FBDT by more than 2 % (or, for shares in %, by more
/// than one point), as "los 100 KB busy: fbdt 4.7 vs tcp:wigig 2.5 (completion ms)".
fn fbdt_behind(tables: &[Table]) -> Vec<String> {
    let mut out = Vec::new();
    for t in tables {
        let Some(f_col) = t.schemes.iter().position(|s| s == "fbdt") else {
            continue;
        };
        for r in &t.rows {
            let Some(f) = r.values[f_col] else { continue };
            let lower = lower_is_better(&t.kind, &r.label);
            let best = t
                .schemes
                .iter()
                .zip(&r.values)
                .filter(|(s, _)| s.as_str() != "fbdt")
                .filter_map(|(s, v)| v.map(|v| (s, v)))
                .min_by(|a, b| {
                    if lower {
                        a.1.total_cmp(&b.1)
                    } else {
                        b.1.total_cmp(&a.1)
                    }
                });
            let Some((who, v)) = best else { continue };
            let points = r.label.ends_with('%');
            let behind = match (lower, points) {
                (true, true) => f > v + 1.0,
                (false, true) => f < v - 1.0,
                (true, false) => f > v * 1.02,
                (false, false) => f < v - 0.02 * v.abs(),
            };
            if behind {
                out.push(format!(
                    "{} {} {}: fbdt {} vs {who} {}",
                    t.kind,
                    t.scenario,
                    r.label,
                    short(f),
                    short(v)
                ));
            }
        }
    }
    out
}

fn table(setup: &Setup, a: &WorkloadArgs) -> Result<Table> {
    let schemes = setup.schemes.clone();
    let col = |s: &str| schemes.iter().position(|x| x == s);
    let mut rows: Vec<Row> = Vec::new();
    let mut put = |label: String, scheme: &str, v: Option<f64>, paper: Option<String>| {
        let i = match rows.iter().position(|r| r.label == label) {
            Some(i) => i,
            None => {
                rows.push(Row {
                    label,
                    values: vec![None; schemes.len()],
                    paper: None,
                });
                rows.len() - 1
            }
        };
        if let Some(c) = col(scheme) {
            rows[i].values[c] = v.filter(|x| x.is_finite());
        }
        if paper.is_some() {
            rows[i].paper = paper;
        }
    };
    // Labels name the nominal size or rate (the paper's), whatever the scale.
    let nominal = |x: f64| x / setup.scale;
    let metric = match a.kind {
        Kind::File => {
            for r in workload::file::run(setup, a)? {
                let done = r.summary.incomplete == 0;
                put(
                    format!(
                        "{} {}",
                        size_label(nominal(r.size_bytes as f64).round() as u64),
                        r.start
                    ),
                    &r.scheme,
                    done.then_some(r.completion_s * 1e3),
                    None,
                );
            }
            "completion time, ms (median over seeds; empty: not finished)"
        }
        Kind::Web => match a.browser {
            Some(browser) => {
                for r in workload::browser::run(setup, a, browser)? {
                    put(
                        format!("{} HTTP/{}", r.page, r.http),
                        &r.scheme,
                        Some(r.page_load_ms),
                        None,
                    );
                }
                "page load time in headless Chromium (Navigation Timing loadEventEnd), ms (median over loads and seeds)"
            }
            None => {
                for r in workload::web::run(setup, a)? {
                    put(
                        format!("{} HTTP/{}", r.page, r.http),
                        &r.scheme,
                        Some(r.page_load_ms),
                        None,
                    );
                }
                "page load time, ms (median over loads and seeds)"
            }
        },
        Kind::Progressive => {
            for r in workload::progressive::run(setup, a)? {
                let rate = nominal(r.rate_mbps);
                let label = format!("{rate:.0} Mbit/s");
                let paper = (setup.scenario.name == "mobility").then(|| fig10_text(rate)).flatten();
                put(
                    format!("{label} pauses %"),
                    &r.scheme,
                    Some(r.pause_share * 100.0),
                    paper,
                );
                put(format!("{label} PSNR dB"), &r.scheme, Some(r.psnr_db), None);
            }
            "progressive 8K: share of viewing time paused (%) and PSNR (dB)"
        }
        Kind::Dash => {
            let (results, metric) = match a.browser {
                Some(browser) => (
                    workload::dash_browser::run(setup, a, browser)?
                        .into_iter()
                        .map(|r| r.summary)
                        .collect(),
                    "adaptive video, dash.js (BOLA) in headless Chromium: QoE_lin, rebuffering, mean bitrate",
                ),
                None => (
                    workload::dash::run(setup, a)?,
                    "adaptive video (throughput rule): QoE_lin, rebuffering, mean bitrate",
                ),
            };
            for r in results {
                put("QoE_lin".into(), &r.scheme, Some(r.qoe_lin), None);
                put("rebuffer %".into(), &r.scheme, Some(r.rebuffer_ratio * 100.0), None);
                put("bitrate Mbit/s".into(), &r.scheme, Some(r.bitrate_mbps), None);
            }
            metric
        }
        Kind::Vr => {
            for r in workload::vr::run(setup, a)? {
                let label = match r.allocation {
                    workload::vr::Allocation::Fix => "FIX",
                    workload::vr::Allocation::Optimised => "optimised",
                };
                put(label.into(), &r.scheme, Some(r.viewport_psnr_db), None);
            }
            "360° tiles: viewport PSNR, dB"
        }
        Kind::Rrul => anyhow::bail!("rrul is not part of the paper suite: run `fbdt-lab workload rrul`"),
    };
    let unfaithful_runs = setup.unfaithful_runs();
    Ok(Table {
        kind: format!("{:?}", a.kind).to_lowercase(),
        scenario: setup.scenario.name.clone(),
        metric: metric.into(),
        schemes,
        rows,
        unfaithful_runs,
    })
}

fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1_000_000_000 => format!("{} GB", b / 1_000_000_000),
        b if b >= 1_000_000 => format!("{} MB", b / 1_000_000),
        b => format!("{} KB", b / 1000),
    }
}

/// Fig. 10's row at `rate` as "WiFi 67 %/30 dB, …".
fn fig10_text(rate: f64) -> Option<String> {
    let (_, cols) = workload::progressive::PAPER_FIG10
        .iter()
        .find(|(r, _)| (r - rate).abs() < 0.5)?;
    let text: Vec<String> = workload::progressive::PAPER_COLUMNS
        .iter()
        .zip(cols)
        .map(|((name, _), (pause, psnr))| format!("{name} {:.0} %/{psnr} dB", pause * 100.0))
        .collect();
    Some(text.join(", "))
}

/// Every table of `kind`.
fn of<'a>(tables: &'a [&'a Table], kind: &'a str) -> impl Iterator<Item = &'a Table> + 'a {
    tables.iter().copied().filter(move |t| t.kind == kind)
}

/// The largest `other / fbdt` over every row of every `kind` table whose label passes
/// `rows` (a ratio > 1: FBDT is that many times faster), and where it was.
fn best_speedup(tables: &[&Table], kind: &str, other: &str, rows: impl Fn(&str) -> bool) -> Option<(f64, String)> {
    let mut best: Option<(f64, String)> = None;
    for t in tables.iter().filter(|t| t.kind == kind) {
        for r in t.rows.iter().filter(|r| rows(&r.label)) {
            if let (Some(f), Some(o)) = (t.value(&r.label, "fbdt"), t.value(&r.label, other)) {
                let x = o / f;
                if f > 0.0 && best.as_ref().is_none_or(|(b, _)| x > *b) {
                    best = Some((x, format!("{} {}", t.scenario, r.label)));
                }
            }
        }
    }
    best
}

fn check(target: String, found: Option<(f64, String)>, threshold: f64, paper: Option<f64>) -> Check {
    let (value, place) = found.map_or((None, String::new()), |(v, p)| (Some(v), p));
    Check {
        scenario: if place.is_empty() {
            "workloads".into()
        } else {
            format!("workloads: {place}")
        },
        target,
        value,
        threshold,
        paper_value: paper,
        status: match value {
            None => Status::NotMeasured,
            Some(v) if v >= threshold => Status::Pass,
            Some(_) => Status::Miss,
        },
        runs: Vec::new(),
    }
}

/// Paper 001's claims about applications, each as `value ≥ threshold`, judged on the
/// tables every run of which was faithful; a claim that has data only from flagged tables
/// is UNFAITHFUL, with that data.
pub fn checks(tables: &[Table]) -> Vec<Check> {
    let faithful: Vec<&Table> = tables.iter().filter(|t| t.unfaithful_runs == 0).collect();
    let all: Vec<&Table> = tables.iter().collect();
    let judged = claims(&faithful);
    claims(&all)
        .into_iter()
        .zip(judged)
        .map(|(everything, trusted)| match (trusted.status, everything.value) {
            (Status::NotMeasured, Some(_)) => Check {
                status: Status::Unfaithful,
                ..everything
            },
            _ => trusted,
        })
        .collect()
}

fn claims(tables: &[&Table]) -> Vec<Check> {
    let any = |_: &str| true;
    let mut v = vec![
        check(
            "files: FBDT up to 1.3× faster than WiGig".into(),
            best_speedup(tables, "file", WIGIG, any),
            1.3,
            Some(1.3),
        ),
        check(
            "files: FBDT up to 1.3× faster than MPTCP".into(),
            best_speedup(tables, "file", MPTCP, any),
            1.3,
            Some(1.3),
        ),
        check(
            "files: FBDT up to 3× faster than WiFi".into(),
            best_speedup(tables, "file", WIFI, any),
            3.0,
            Some(3.0),
        ),
    ];
    // WiGig slow to wake: at 100 KB from idle WiFi finishes first (WiGig ÷ WiFi ≥ 1) in
    // the scenario where it does so least clearly.
    let wake = of(tables, "file")
        .filter_map(|t| {
            let (wifi, wigig) = (t.value("100 KB idle", WIFI)?, t.value("100 KB idle", WIGIG)?);
            Some((wigig / wifi, format!("{} 100 KB idle", t.scenario)))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    v.push(check(
        "files: WiFi beats WiGig at 100 KB from idle".into(),
        wake,
        1.0,
        None,
    ));
    let http2 = |l: &str| l.ends_with("HTTP/2");
    v.push(check(
        "web (HTTP/2): FBDT up to 1.2× faster than WiGig".into(),
        best_speedup(tables, "web", WIGIG, http2),
        1.2,
        Some(1.2),
    ));
    v.push(check(
        "web (HTTP/2): FBDT up to 1.2× faster than MPTCP".into(),
        best_speedup(tables, "web", MPTCP, http2),
        1.2,
        Some(1.2),
    ));
    // Fig. 10 at 1700 Mbit/s under mobility: FBDT pauses 4 %, MPTCP 24 %.
    let mobility = of(tables, "progressive").find(|t| t.scenario == "mobility");
    let pauses = |s| mobility.and_then(|t| t.value("1700 Mbit/s pauses %", s));
    let fewer = match (pauses("fbdt"), pauses(MPTCP)) {
        (Some(f), Some(m)) => Some((m - f, "mobility 1700 Mbit/s".to_string())),
        _ => None,
    };
    v.push(check(
        "progressive 8K: MPTCP pauses − FBDT pauses ≥ 20 points (Fig. 10)".into(),
        fewer,
        20.0,
        Some(20.0),
    ));
    // 360°: the largest gain of FBDT with this allocation over MPTCP with FIX, over the
    // scenarios.
    let vr_gain = |fbdt_row: &str| {
        of(tables, "vr")
            .filter_map(|t| Some((t.value(fbdt_row, "fbdt")? - t.value("FIX", MPTCP)?, t.scenario.clone())))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    v.push(check(
        "360° FIX: FBDT ≥ MPTCP + 0.5 dB".into(),
        vr_gain("FIX"),
        0.5,
        Some(0.5),
    ));
    v.push(check(
        "360° optimiser on FBDT ≥ FIX on MPTCP + 13 dB".into(),
        vr_gain("optimised"),
        13.0,
        Some(13.0),
    ));
    v
}

#[cfg(test)]
mod tests;
