//! The COTAG section of `fbdt-lab paper` (testbed only): paper 003's burst traffic over a
//! small grid of `fbdt_harness::cotag_grid`, its qualitative claims judged on faithful
//! points, FBDT in the same table, one figure. Kept in `cotag.json` so `--render-only` reads
//! it back.
//!
//! The claims are the COTAG paper's about a baseline, not FBDT's targets: they get their
//! own table and do not enter the suite's target checks (whose verdict is FBDT's).

use std::fmt::Write as _;

use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use super::plot::Figure;
use super::text::escape;
use fbdt_font::FAMILY as FONT;
use fbdt_harness::cotag_grid::{Grid, GridReport, Point};
use fbdt_harness::traffic::Traffic;

/// Where the section is kept between `paper` and `paper --render-only`.
pub const JSON: &str = "cotag.json";

/// What the section ran, and the results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CotagSection {
    pub quick: bool,
    pub wall_s: f64,
    pub report: GridReport,
}

/// The points. Quick (about 16 runs of 5 s, ~2 minutes): PER 0; the three correlations
/// at 1 ms (the correlation claim) and positive correlation at 5 ms too (the latency
/// claim); COTAG at T = 1 ms, dual-rr, kernel MPTCP and FBDT, one run each. Full: the whole
/// grid of `sweep --cotag` with single-path TCP on each AP added, three runs each.
pub fn plan(quick: bool, scale: Option<f64>) -> Vec<Grid> {
    let scale = scale.unwrap_or(0.1);
    let base = |corr: &[&str], lat: &[f64]| Grid {
        correlations: corr.iter().map(|s| s.to_string()).collect(),
        per: vec![0.0],
        latency_ms: lat.to_vec(),
        periods_ms: vec![1.0],
        baselines: ["dual-rr", "mptcp", "fbdt"].iter().map(|s| s.to_string()).collect(),
        duration_s: 5.0,
        scale,
        traffic: Traffic::Bursts,
        repeat: 1,
    };
    if quick {
        vec![base(&["neg", "zero", "pos"], &[1.0]), base(&["pos"], &[5.0])]
    } else {
        vec![Grid {
            correlations: fbdt_harness::cotag_grid::CORRELATIONS.iter().map(|s| s.to_string()).collect(),
            per: vec![0.0, 0.005],
            latency_ms: vec![0.0, 1.0, 5.0],
            periods_ms: vec![0.5, 1.0],
            baselines: crate::sweep::COTAG_BASELINES.iter().map(|s| s.to_string()).collect(),
            duration_s: 8.0,
            scale,
            traffic: Traffic::Bursts,
            repeat: 3,
        }]
    }
}

/// The section of `grids`' `points` (every grid's, in order): one grid that spans them
/// all, the claims judged over every point (one campaign case per point).
pub fn section(quick: bool, grids: &[Grid], points: Vec<Point>, wall_s: f64) -> CotagSection {
    let mut grid = grids[0].clone();
    for g in &grids[1..] {
        for c in &g.correlations {
            if !grid.correlations.contains(c) {
                grid.correlations.push(c.clone());
            }
        }
        for l in &g.latency_ms {
            if !grid.latency_ms.contains(l) {
                grid.latency_ms.push(*l);
            }
        }
    }
    CotagSection {
        quick,
        wall_s,
        report: GridReport::of(grid, points),
    }
}

fn label(p: &Point) -> String {
    format!("{} {}% {}ms", p.correlation, p.per * 100.0, p.latency_ms)
}

/// The section's HTML.
pub fn html(h: &mut String, s: &CotagSection) {
    let r = &s.report;
    let g = &r.grid;
    let _ = writeln!(
        h,
        "<h2 id=\"cotag\">COTAG (paper 003) on the testbed</h2>\n<p>{} ten TCP Cubic flows in {} s \
         bursts with 1 s gaps (docs/cotag.md), {:.0} s per scheme, scale {}, {}; the \
         <code>cotag-corr-*</code> Markov scenarios with the paths' delay set to the server→gateway \
         latency. Cells: mean burst throughput (Mbit/s); <span class=\"UNF\">*</span> = the emulator's \
         fidelity monitors flagged the run (it counts for no claim){}. {:.0} s of wall time.</p>",
        if s.quick { "Quick run:" } else { "Full grid:" },
        fbdt_harness::traffic::BURST_S,
        g.duration_s,
        g.scale,
        if g.repeat > 1 {
            format!("{} runs per scheme and point", g.repeat)
        } else {
            "one run per point".to_string()
        },
        if g.repeat > 1 {
            " — with repetitions a cell is the mean of its faithful runs and is flagged when most \
             of its runs were"
        } else {
            ""
        },
        s.wall_s
    );
    let schemes = g.schemes();
    h.push_str("<table><tr><th class=\"l\">correlation, PER, latency</th><th>load</th>");
    for sc in &schemes {
        let _ = write!(h, "<th>{}</th>", escape(sc));
    }
    h.push_str("<th>COTAG failed cohorts / overhead</th></tr>\n");
    for p in &r.points {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td>",
            escape(&label(p)),
            p.load_avg.map_or("-".into(), |l| format!("{l:.1}"))
        );
        for sc in &schemes {
            match p.schemes.iter().find(|x| &x.scheme == sc) {
                Some(x) if x.faithful => {
                    let _ = write!(h, "<td>{:.1}</td>", x.mbps());
                }
                Some(x) => {
                    let _ = write!(
                        h,
                        "<td class=\"UNF\" title=\"{}\">{:.1}*</td>",
                        escape(&x.unfaithful_reasons.join("; ")),
                        x.mbps()
                    );
                }
                None => h.push_str("<td>-</td>"),
            }
        }
        let c: Vec<String> = p
            .schemes
            .iter()
            .filter(|x| x.scheme.starts_with("cotag"))
            .map(|x| {
                format!(
                    "{} / {}",
                    x.cohorts_failed.map_or("-".into(), |n| n.to_string()),
                    x.coding_overhead.map_or("-".into(), |o| format!("{:.0}%", o * 100.0))
                )
            })
            .collect();
        let _ = writeln!(h, "<td>{}</td></tr>", escape(&c.join(", ")));
    }
    h.push_str(
        "</table>\n<table><tr><th class=\"l\">paper 003's claim</th><th>verdict</th><th class=\"l\">data</th></tr>\n",
    );
    for c in &r.claims {
        let class = match c.verdict {
            fbdt_harness::cotag_grid::Verdict::Pass => "PASS",
            fbdt_harness::cotag_grid::Verdict::Miss => "MISS",
            fbdt_harness::cotag_grid::Verdict::Unfaithful => "UNF",
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"{class}\">{}</td><td class=\"l\">{} ({} judged, {} left out as unfaithful)</td></tr>",
            escape(&c.claim),
            c.verdict.label(),
            escape(&c.detail),
            c.judged,
            c.unfaithful
        );
    }
    h.push_str("</table>\n");
}

/// Grouped bars: one group per point, one bar per scheme; unfaithful runs pale.
pub struct Bars<'a> {
    pub section: &'a CotagSection,
}

const COLORS: [RGBColor; 8] = [
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

impl Figure for Bars<'_> {
    fn size(&self) -> (u32, u32) {
        (1100, 520)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = &self.section.report;
        let schemes = r.grid.schemes();
        let pe = |e: plotters::drawing::DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("plotting failed: {e:?}");
        let (plot, side) = root.split_horizontally(root.dim_in_pixel().0.saturating_sub(210));
        let text = TextStyle::from((FONT, 14).into_font()).color(&BLACK);
        for (i, s) in schemes.iter().enumerate() {
            let y = 50 + 22 * i as i32;
            let c = COLORS[i % COLORS.len()];
            side.draw(&Rectangle::new([(4, y - 7), (26, y + 7)], c.filled()))
                .map_err(pe)?;
            side.draw(&Text::new(s.clone(), (34, y - 8), text.clone()))
                .map_err(pe)?;
        }
        let y = 50 + 22 * schemes.len() as i32;
        side.draw(&Text::new("pale = unfaithful".to_string(), (4, y - 8), text.clone()))
            .map_err(pe)?;
        let n = r.points.len().max(1) as f64;
        let ymax = r
            .points
            .iter()
            .flat_map(|p| p.schemes.iter().map(|s| s.mbps()))
            .fold(1.0, f64::max)
            * 1.05;
        let names: Vec<String> = r.points.iter().map(label).collect();
        let mut chart = ChartBuilder::on(&plot)
            .caption("COTAG (paper 003): mean burst throughput, ten Cubic flows", (FONT, 19))
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d((0.0..n).step(0.5), 0.0..ymax)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_labels(2 * r.points.len() + 1)
            .x_label_formatter(&|x| {
                let centre = (x.fract() - 0.5).abs() < 1e-6;
                names
                    .get(x.floor() as usize)
                    .filter(|_| centre)
                    .cloned()
                    .unwrap_or_default()
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc(format!("burst throughput (Mbit/s at scale {})", r.grid.scale))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(pe)?;
        let w = 0.84 / schemes.len().max(1) as f64;
        for (k, s) in schemes.iter().enumerate() {
            let c = COLORS[k % COLORS.len()];
            let bars: Vec<(f64, f64, bool)> = r
                .points
                .iter()
                .enumerate()
                .filter_map(|(i, p)| {
                    let x = p.schemes.iter().find(|x| &x.scheme == s)?;
                    Some((i as f64 + 0.08 + k as f64 * w, x.mbps(), x.faithful))
                })
                .collect();
            chart
                .draw_series(bars.iter().map(|b| {
                    let style = if b.2 { c.filled() } else { c.mix(0.3).filled() };
                    Rectangle::new([(b.0, 0.0), (b.0 + w * 0.92, b.1)], style)
                }))
                .map_err(|e| anyhow::anyhow!("plotting failed: {e:?}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_can_judge_every_claim_and_stays_small() {
        let grids = plan(true, None);
        let runs: usize = grids
            .iter()
            .map(|g| g.correlations.len() * g.per.len() * g.latency_ms.len() * g.schemes().len())
            .sum();
        assert!(runs <= 16, "{runs} runs");
        let corr: std::collections::BTreeSet<&String> = grids.iter().flat_map(|g| &g.correlations).collect();
        assert_eq!(corr.len(), 3, "the correlation claim needs all three");
        let lat: std::collections::BTreeSet<u64> = grids
            .iter()
            .flat_map(|g| g.latency_ms.iter().map(|l| l.to_bits()))
            .collect();
        assert!(lat.len() >= 2, "the latency claim needs two latencies");
        for g in &grids {
            for s in ["dual-rr", "mptcp", "fbdt"] {
                assert!(g.schemes().iter().any(|x| x == s), "{s}");
            }
        }
    }
}
