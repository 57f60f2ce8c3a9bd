//! The report's figures, each drawn once per backend into `<stem>.png` and `<stem>.svg`:
//! grouped bars per paper figure (Fig. 3b, 8c, 12), CDFs of one-second goodput (Fig. 8d–f),
//! and per-scenario time series with the path events shaded. Text comes from jpoc's font
//! registration (ab_glyph + a DejaVu file read at run time).

use std::path::Path;

use anyhow::{anyhow, Result};
use fbdt_font::FAMILY as FONT;
use fbdt_scenario::Schedule;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::text::short;
use fbdt_harness::results::{RunReport, Sample};

/// plotters' errors are generic over the backend; flatten them to text.
fn pe<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting failed: {e:?}")
}

/// tab10: distinct on screen and in print. Colours follow the order of [`scheme_order`],
/// which starts with fbdt and the MPTCP baseline, so those two look the same in every figure.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Every scheme of the suite, first occurrence first: the key for colours.
pub fn scheme_order(reports: &[RunReport]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in reports.iter().flat_map(|r| &r.results) {
        if !v.contains(&s.scheme) {
            v.push(s.scheme.clone());
        }
    }
    v
}

/// The schemes of `order` that ran in any of `reports`, in that order.
fn present<'a>(order: &'a [String], reports: &[&RunReport]) -> Vec<&'a String> {
    order
        .iter()
        .filter(|s| reports.iter().any(|r| r.results.iter().any(|x| &x.scheme == *s)))
        .collect()
}

fn color(order: &[String], scheme: &str) -> RGBColor {
    PALETTE[order.iter().position(|s| s == scheme).unwrap_or(0) % PALETTE.len()]
}

/// A figure that can draw itself on any plotters backend.
pub trait Figure {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>;
}

/// Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
pub fn save(dir: &Path, stem: &str, fig: &impl Figure) -> Result<()> {
    fbdt_font::ensure()?;
    let png = dir.join(format!("{stem}.png"));
    let root = BitMapBackend::new(&png, fig.size()).into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    fig.draw(&root)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e:?}", png.display()))?;
    let svg = dir.join(format!("{stem}.svg"));
    let root = SVGBackend::new(&svg, fig.size()).into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    fig.draw(&root)?;
    root.present().map_err(|e| anyhow!("writing {}: {e:?}", svg.display()))
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
pub enum Mark {
    Fill(RGBColor),
    Line(RGBColor),
    Dashed(RGBColor),
}

/// Width of the legend column at the right of every figure: a legend inside the plot hides
/// data (the peaks of a time series, the tall bars of Fig. 12).
const LEGEND_W: u32 = 210;

/// Splits off the legend column, draws `entries` in it and returns the area left for the plot.
fn with_legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    entries: &[(String, Mark)],
) -> Result<DrawingArea<DB, Shift>> {
    let w = root.dim_in_pixel().0;
    let (plot, side) = root.split_horizontally(w.saturating_sub(LEGEND_W));
    let text = TextStyle::from((FONT, 14).into_font()).color(&BLACK);
    for (i, (label, mark)) in entries.iter().enumerate() {
        let y = 50 + 22 * i as i32;
        match *mark {
            Mark::Fill(c) => side.draw(&Rectangle::new([(4, y - 7), (26, y + 7)], c.filled())),
            Mark::Line(c) => side.draw(&PathElement::new(vec![(4, y), (26, y)], c.stroke_width(3))),
            Mark::Dashed(c) => side
                .draw(&PathElement::new(vec![(4, y), (11, y)], c.stroke_width(2)))
                .and_then(|_| side.draw(&PathElement::new(vec![(19, y), (26, y)], c.stroke_width(2)))),
        }
        .map_err(pe)?;
        side.draw(&Text::new(label.clone(), (34, y - 8), text.clone()))
            .map_err(pe)?;
    }
    Ok(plot)
}

/// Mean goodput per scheme per scenario, error bars p10–p90 of the one-second samples
/// (the paper's Fig. 8c / Fig. 12 layout).
pub struct Bars<'a> {
    pub title: String,
    pub reports: Vec<&'a RunReport>,
    pub order: &'a [String],
}

impl Figure for Bars<'_> {
    fn size(&self) -> (u32, u32) {
        (1100, 520)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let schemes = present(self.order, &self.reports);
        let entries: Vec<(String, Mark)> = schemes
            .iter()
            .map(|s| (s.to_string(), Mark::Fill(color(self.order, s))))
            .chain(std::iter::once(("p10–p90".to_string(), Mark::Line(BLACK))))
            .collect();
        let plot = with_legend(root, &entries)?;
        let n = self.reports.len() as f64;
        let ymax = self
            .reports
            .iter()
            .flat_map(|r| r.results.iter().map(|x| x.goodput_p90_mbps.max(x.goodput_mbps)))
            .fold(1.0, f64::max)
            * 1.05;
        let names: Vec<String> = self.reports.iter().map(|r| r.scenario.clone()).collect();
        let mut chart = ChartBuilder::on(&plot)
            .caption(&self.title, (FONT, 19))
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(70)
            // Ticks every half unit; only the centres (i + 0.5) carry a scenario's name.
            .build_cartesian_2d((0.0..n).step(0.5), 0.0..ymax)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_labels(2 * self.reports.len() + 1)
            .x_label_formatter(&|x| {
                let centre = (x.fract() - 0.5).abs() < 1e-6;
                let name = names.get(x.floor() as usize).filter(|_| centre);
                name.cloned().unwrap_or_default()
            })
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc(format!("goodput (Mbit/s at scale {})", scales(&self.reports)))
            .label_style((FONT, 15))
            .axis_desc_style((FONT, 16))
            .draw()
            .map_err(pe)?;
        let w = 0.84 / schemes.len().max(1) as f64;
        for (k, scheme) in schemes.iter().enumerate() {
            let c = color(self.order, scheme);
            let bars: Vec<(f64, f64, f64, f64)> = self
                .reports
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let x = r.results.iter().find(|x| &x.scheme == *scheme)?;
                    let left = i as f64 + 0.08 + k as f64 * w;
                    Some((left, x.goodput_mbps, x.goodput_p10_mbps, x.goodput_p90_mbps))
                })
                .collect();
            chart
                .draw_series(
                    bars.iter()
                        .map(|b| Rectangle::new([(b.0, 0.0), (b.0 + w * 0.92, b.1)], c.filled())),
                )
                .map_err(pe)?;
            chart
                .draw_series(bars.iter().map(|b| {
                    let x = b.0 + w * 0.46;
                    PathElement::new(vec![(x, b.2), (x, b.3)], BLACK.stroke_width(1))
                }))
                .map_err(pe)?;
        }
        Ok(())
    }
}

fn scales(reports: &[&RunReport]) -> String {
    let mut v: Vec<String> = reports.iter().map(|r| short(r.scale)).collect();
    v.dedup();
    v.join("/")
}

/// CDFs of one-second goodput per scheme, one panel per scenario (Fig. 8d–f).
pub struct Cdfs<'a> {
    pub reports: Vec<&'a RunReport>,
    pub order: &'a [String],
}

impl Figure for Cdfs<'_> {
    fn size(&self) -> (u32, u32) {
        let rows = self.reports.len().div_ceil(2) as u32;
        (1100, 380 * rows.max(1))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let schemes = present(self.order, &self.reports);
        let entries: Vec<(String, Mark)> = schemes
            .iter()
            .map(|s| (s.to_string(), Mark::Line(color(self.order, s))))
            .collect();
        let plot = with_legend(root, &entries)?;
        let rows = self.reports.len().div_ceil(2).max(1);
        let panels = plot.split_evenly((rows, 2));
        for (r, area) in self.reports.iter().zip(panels.iter()) {
            let curves: Vec<(&str, Vec<f64>)> = r
                .results
                .iter()
                .map(|x| {
                    let mut s = per_second(&x.series, r.duration_s);
                    s.sort_by(f64::total_cmp);
                    (x.scheme.as_str(), s)
                })
                .collect();
            let xmax = curves.iter().flat_map(|c| c.1.last()).fold(1.0, |a: f64, b| a.max(*b)) * 1.05;
            let mut chart = ChartBuilder::on(area)
                .caption(format!("{} ({:.0} s)", r.scenario, r.duration_s), (FONT, 17))
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(46)
                .build_cartesian_2d(0.0..xmax, 0.0..1.0)
                .map_err(pe)?;
            chart
                .configure_mesh()
                .light_line_style(TRANSPARENT)
                .bold_line_style(BLACK.mix(0.12))
                .x_label_formatter(&|x| format!("{x:.0}"))
                .x_desc(format!("one-second goodput, Mbit/s (scale {})", short(r.scale)))
                .y_desc("CDF")
                .label_style((FONT, 13))
                .axis_desc_style((FONT, 14))
                .draw()
                .map_err(pe)?;
            for (scheme, s) in &curves {
                let c = color(self.order, scheme);
                chart
                    .draw_series(LineSeries::new(cdf_steps(s), c.stroke_width(2)))
                    .map_err(pe)?;
            }
        }
        Ok(())
    }
}

/// The fault campaign's figure (docs/faults.md): the CDF of each run's longest in-order
/// delivery gap, one curve per scheme, with the bound drawn in (dashed).
pub struct GapCdf {
    pub title: String,
    /// Per scheme (in legend order), the runs' longest gaps in ms, sorted.
    pub curves: Vec<(String, Vec<f64>)>,
    pub bound_ms: f64,
}

impl Figure for GapCdf {
    fn size(&self) -> (u32, u32) {
        (900, 480)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let order: Vec<String> = self.curves.iter().map(|c| c.0.clone()).collect();
        let mut entries: Vec<(String, Mark)> = order.iter().map(|s| (s.clone(), Mark::Line(color(&order, s)))).collect();
        entries.push((format!("bound ({} ms)", short(self.bound_ms)), Mark::Dashed(BLACK)));
        let plot = with_legend(root, &entries)?;
        let largest = self.curves.iter().flat_map(|c| c.1.last()).fold(self.bound_ms, |a, b| a.max(*b));
        // A log axis: single TCP's gaps run to seconds, FBDT's stay near the bound.
        let (lo, hi) = (1.0, (largest * 1.3).max(10.0));
        let mut chart = ChartBuilder::on(&plot)
            .caption(&self.title, (FONT, 17))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(46)
            .build_cartesian_2d((lo..hi).log_scale(), 0.0..1.0)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("longest in-order delivery gap per run, ms")
            .y_desc("CDF of runs")
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .draw()
            .map_err(pe)?;
        for (scheme, gaps) in &self.curves {
            let steps: Vec<(f64, f64)> = cdf_steps(gaps).into_iter().map(|(x, y)| (x.max(lo), y)).collect();
            chart
                .draw_series(LineSeries::new(steps, color(&order, scheme).stroke_width(2)))
                .map_err(pe)?;
        }
        let bound = vec![(self.bound_ms, 0.0), (self.bound_ms, 1.0)];
        chart
            .draw_series(DashedLineSeries::new(bound, 6, 4, BLACK.stroke_width(1)))
            .map_err(pe)?;
        Ok(())
    }
}

/// `workload rrul --plot` (docs/workloads.md): per scheme the CDF of the ping's delay over
/// the best path's base RTT (drawn from the results' quantiles) and, beside it, the bulk
/// download's goodput (bar: over every seed; dots: each seed).
pub struct Rrul<'a> {
    pub title: String,
    pub results: &'a [fbdt_workload::rrul::RrulResult],
}

impl Figure for Rrul<'_> {
    fn size(&self) -> (u32, u32) {
        (1250, 500)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let order: Vec<String> = self.results.iter().map(|r| r.scheme.clone()).collect();
        let entries: Vec<(String, Mark)> = order.iter().map(|s| (s.clone(), Mark::Fill(color(&order, s)))).collect();
        let plot = with_legend(root, &entries)?;
        let root = plot.titled(&self.title, (FONT, 18)).map_err(pe)?;
        let w = root.dim_in_pixel().0;
        let (left, right) = root.split_horizontally(w * 3 / 5);
        // A log axis: a queued ping waits hundreds of ms, an unqueued one a few; added
        // delays under 0.5 ms are drawn at 0.5.
        let floor = 0.5;
        let largest = self
            .results
            .iter()
            .flat_map(|r| r.interactive_added_quantiles_ms.last())
            .fold(10.0, |a: f64, b| a.max(*b));
        let mut chart = ChartBuilder::on(&left)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(46)
            .build_cartesian_2d((floor..largest * 1.3).log_scale(), 0.0..1.0)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_label_formatter(&|x| short(*x))
            .x_desc("ping's added delay over the best path's base RTT, ms")
            .y_desc("CDF of pings")
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .draw()
            .map_err(pe)?;
        for r in self.results {
            let q = &r.interactive_added_quantiles_ms;
            let steps = q.len().saturating_sub(1).max(1) as f64;
            let line: Vec<(f64, f64)> = q.iter().enumerate().map(|(i, x)| (x.max(floor), i as f64 / steps)).collect();
            chart
                .draw_series(LineSeries::new(line, color(&order, &r.scheme).stroke_width(2)))
                .map_err(pe)?;
        }
        let n = self.results.len();
        let ymax = self
            .results
            .iter()
            .flat_map(|r| std::iter::once(r.bulk_mbps).chain(r.runs.iter().map(|x| x.2)))
            .fold(1.0, f64::max)
            * 1.1;
        let mut bars = ChartBuilder::on(&right)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..n as f64, 0.0..ymax)
            .map_err(pe)?;
        bars.configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_labels(0)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("scheme (bar: all seeds, dots: each seed)")
            .y_desc("bulk goodput beside the pings, Mbit/s")
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .draw()
            .map_err(pe)?;
        for (i, r) in self.results.iter().enumerate() {
            let c = color(&order, &r.scheme);
            let x = i as f64;
            bars.draw_series(std::iter::once(Rectangle::new([(x + 0.15, 0.0), (x + 0.85, r.bulk_mbps)], c.filled())))
                .map_err(pe)?;
            bars.draw_series(r.runs.iter().map(|run| Circle::new((x + 0.5, run.2), 3, BLACK.filled())))
                .map_err(pe)?;
        }
        Ok(())
    }
}

/// The empirical CDF of sorted samples as a step line: (x, fraction ≤ x).
pub fn cdf_steps(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len() as f64;
    let mut v = Vec::with_capacity(sorted.len() * 2);
    for (i, &x) in sorted.iter().enumerate() {
        v.push((x, i as f64 / n));
        v.push((x, (i + 1) as f64 / n));
    }
    v
}

/// `[start, end)` intervals in which a path's rate is 0 (outage or scan), per path name.
pub fn zero_rate_intervals(s: &Schedule) -> Vec<(String, f64, f64)> {
    let mut v = Vec::new();
    for p in &s.paths {
        let mut start: Option<f64> = None;
        for step in &p.steps {
            match (start, step.rate_mbps == 0.0) {
                (None, true) => start = Some(step.t_s),
                (Some(a), false) => {
                    v.push((p.name.clone(), a, step.t_s.min(s.duration_s)));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(a) = start {
            v.push((p.name.clone(), a, s.duration_s));
        }
    }
    v.retain(|i| i.1 < s.duration_s);
    v
}

/// Σ of the path rates as a step line over the run: where any path's rate changes.
pub fn capacity_steps(s: &Schedule) -> Vec<(f64, f64)> {
    let mut times: Vec<f64> = s
        .paths
        .iter()
        .flat_map(|p| p.steps.iter().map(|x| x.t_s))
        .filter(|&t| t < s.duration_s)
        .collect();
    times.sort_by(f64::total_cmp);
    times.dedup();
    let mut v = Vec::new();
    for t in times {
        let c: f64 = s.paths.iter().map(|p| p.at(t).rate_mbps).sum();
        if let Some(&(_, prev)) = v.last() {
            v.push((t, prev));
        }
        v.push((t, c));
    }
    if let Some(&(_, last)) = v.last() {
        v.push((s.duration_s, last));
    }
    v
}

/// Goodput (100 ms samples) per scheme over time, the capacity step line, and the
/// intervals where a path is down shaded.
pub struct TimeSeries<'a> {
    pub report: &'a RunReport,
    pub schedule: Schedule,
    pub order: &'a [String],
}

/// Light fills for the down intervals, one per path that goes down.
/// Neutral, so they do not read as one of the schemes' colours.
const SHADES: [RGBColor; 4] = [
    RGBColor(222, 222, 222),
    RGBColor(228, 218, 240),
    RGBColor(240, 232, 210),
    RGBColor(210, 232, 238),
];

impl Figure for TimeSeries<'_> {
    fn size(&self) -> (u32, u32) {
        (1100, 420)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()> {
        let r = self.report;
        let cap = capacity_steps(&self.schedule);
        let down = zero_rate_intervals(&self.schedule);
        // Only paths that actually go down get a shade and a legend entry.
        let shaded: Vec<(&str, RGBColor)> = self
            .schedule
            .paths
            .iter()
            .filter(|p| down.iter().any(|d| d.0 == p.name))
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), SHADES[i % SHADES.len()]))
            .collect();
        let mut entries: Vec<(String, Mark)> = r
            .results
            .iter()
            .map(|x| (x.scheme.clone(), Mark::Line(color(self.order, &x.scheme))))
            .collect();
        entries.push(("capacity (Σ path rates)".into(), Mark::Dashed(BLACK)));
        entries.extend(shaded.iter().map(|(p, c)| (format!("{p} rate 0"), Mark::Fill(*c))));
        let plot = with_legend(root, &entries)?;
        let ymax = r
            .results
            .iter()
            .flat_map(|x| x.series.iter().map(|s| s.mbps))
            .chain(cap.iter().map(|c| c.1))
            .fold(1.0, f64::max)
            * 1.05;
        let mut chart = ChartBuilder::on(&plot)
            .caption(
                format!(
                    "{}: goodput per 100 ms ({} backend, scale {})",
                    r.scenario,
                    r.backend,
                    short(r.scale)
                ),
                (FONT, 18),
            )
            .margin(14)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..r.duration_s, 0.0..ymax)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .bold_line_style(BLACK.mix(0.12))
            .x_label_formatter(&|x| short(*x))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_desc("time (s)")
            .y_desc("Mbit/s")
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()
            .map_err(pe)?;
        for (name, shade) in &shaded {
            chart
                .draw_series(
                    down.iter()
                        .filter(|d| d.0 == *name)
                        .map(|d| Rectangle::new([(d.1, 0.0), (d.2, ymax)], shade.filled())),
                )
                .map_err(pe)?;
        }
        chart
            .draw_series(DashedLineSeries::new(cap, 6, 4, BLACK.stroke_width(1)))
            .map_err(pe)?;
        for x in &r.results {
            let c = color(self.order, &x.scheme);
            chart
                .draw_series(LineSeries::new(
                    x.series.iter().map(|s| (s.t, s.mbps)),
                    c.stroke_width(1),
                ))
                .map_err(pe)?;
        }
        Ok(())
    }
}

/// One-second goodputs from the 100 ms `series` of a run of `duration_s`: the mean of each
/// whole second's samples (1 s / interval of them); a trailing partial second is dropped, as
/// the runs' own per-second samples do, and so are samples after the run's end (the testbed
/// keeps sampling while a transfer drains).
pub fn per_second(series: &[Sample], duration_s: f64) -> Vec<f64> {
    let Some(first) = series.first() else {
        return Vec::new();
    };
    // `t` is the end of each interval, so the first sample's time is the interval.
    let interval = first.t;
    if !(interval > 0.0 && interval <= 1.0) {
        return Vec::new();
    }
    let per = (1.0 / interval).round().max(1.0) as usize;
    let within = series.partition_point(|s| s.t <= duration_s + interval / 2.0);
    series[..within]
        .chunks_exact(per)
        .map(|c| c.iter().map(|s| s.mbps).sum::<f64>() / per as f64)
        .collect()
}

#[cfg(test)]
mod tests;
