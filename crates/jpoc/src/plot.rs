//! PNG figures with plotters. Text is rendered by ab_glyph in the font `fbdt-font`
//! registers (a TrueType file read at run time, Debian package fonts-dejavu-core; override
//! with the JPOC_FONT environment variable), so nothing links against fontconfig or
//! freetype.

use crate::experiments::{BeamsReport, FairnessReport, HeatmapReport, OverheadReport};
use fbdt_font::FAMILY as FONT;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// Why a figure was not written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error(transparent)]
    Font(#[from] fbdt_font::FontError),
    #[error("plot path {0} must end in .png")]
    NotPng(PathBuf),
    /// plotters' errors are generic over the backend; kept as text.
    #[error("plotting failed: {0}")]
    Draw(String),
    #[error("writing {path}: {msg}")]
    Write { path: PathBuf, msg: String },
}

type Result<T> = std::result::Result<T, PlotError>;

pub fn check_png(path: &Path) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(()),
        _ => Err(PlotError::NotPng(path.to_path_buf())),
    }
}

fn pe<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError::Draw(format!("{e:?}"))
}

/// The figure's final write, naming the file.
fn written<E: std::fmt::Debug>(path: &Path) -> impl FnOnce(E) -> PlotError + '_ {
    move |e| PlotError::Write {
        path: path.to_path_buf(),
        msg: format!("{e:?}"),
    }
}

const C_JPOC: RGBColor = RGBColor(31, 119, 180);
const C_AD: RGBColor = RGBColor(214, 39, 40);
const C_THIRD: RGBColor = RGBColor(44, 160, 44);

/// Picks (mean, CI) of one protocol from a fairness point.
type PointGetter = Box<dyn Fn(&crate::experiments::FairnessPoint) -> (f64, [f64; 2])>;

pub fn fairness(r: &FairnessReport, path: &Path) -> Result<()> {
    check_png(path)?;
    fbdt_font::ensure()?;
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    let xmax = r.points.iter().map(|p| p.blockage * 100.0).fold(0.0, f64::max).max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Jain's fairness index, {} clients ({} realizations, 95% CI)",
                r.clients, r.repeat
            ),
            (FONT, 22),
        )
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.03 * xmax..xmax * 1.03, 0.0f64..1.05)
        .map_err(pe)?;
    chart
        .configure_mesh()
        .x_desc("Blockage probability per beacon interval (%)")
        .y_desc("Jain's fairness index")
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(pe)?;
    let series: [(&str, RGBColor, PointGetter); 2] = [
        ("JPOC", C_JPOC, Box::new(|p| (p.jain_jpoc, p.jain_jpoc_ci95))),
        ("802.11ad/ay", C_AD, Box::new(|p| (p.jain_80211ad, p.jain_80211ad_ci95))),
    ];
    for (name, color, get) in series {
        let pts: Vec<(f64, f64, [f64; 2])> = r
            .points
            .iter()
            .map(|p| {
                let (m, c) = get(p);
                (p.blockage * 100.0, m, c)
            })
            .collect();
        chart
            .draw_series(LineSeries::new(pts.iter().map(|p| (p.0, p.1)), color.stroke_width(3)))
            .map_err(pe)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 25, y)], color.stroke_width(3)));
        chart
            .draw_series(pts.iter().map(|p| {
                ErrorBar::new_vertical(p.0, p.2[0].max(0.0), p.1, p.2[1].min(1.05), color.stroke_width(2), 10)
            }))
            .map_err(pe)?;
        chart
            .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 5, color.filled())))
            .map_err(pe)?;
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 18))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .map_err(pe)?;
    root.present().map_err(written(path))
}

pub fn overhead(r: &OverheadReport, path: &Path) -> Result<()> {
    check_png(path)?;
    fbdt_font::ensure()?;
    let root = BitMapBackend::new(path, (1200, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    let (left, right) = root.split_horizontally(620);
    let xs: Vec<f64> = r.points.iter().map(|p| p.clients as f64).collect();
    let xmin = xs.iter().cloned().fold(f64::INFINITY, f64::min) - 2.0;
    let xmax = xs.iter().cloned().fold(0.0, f64::max) + 2.0;
    let ymax = r
        .points
        .iter()
        .map(|p| p.minislots_80211ad.max(p.minislots_jpoc_ci95[1]))
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&left)
        .caption(
            format!(
                "A-BFT mini-slots meeting P0 = {}% ({}% blockage)",
                r.p0 * 100.0,
                r.blockage * 100.0
            ),
            (FONT, 20),
        )
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(75)
        .build_cartesian_2d(xmin..xmax, (10.0f64..ymax * 2.0).log_scale())
        .map_err(pe)?;
    chart
        .configure_mesh()
        .x_desc("Number of clients")
        .y_desc("Mini-slots per A-BFT (log)")
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(pe)?;
    chart
        .draw_series(LineSeries::new(
            r.points.iter().map(|p| (p.clients as f64, p.minislots_jpoc)),
            C_JPOC.stroke_width(3),
        ))
        .map_err(pe)?
        .label("JPOC (mean adaptive M)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 25, y)], C_JPOC.stroke_width(3)));
    chart
        .draw_series(
            r.points
                .iter()
                .map(|p| Circle::new((p.clients as f64, p.minislots_jpoc), 5, C_JPOC.filled())),
        )
        .map_err(pe)?;
    chart
        .draw_series(LineSeries::new(
            r.points.iter().map(|p| (p.clients as f64, p.minislots_80211ad)),
            C_AD.stroke_width(3),
        ))
        .map_err(pe)?
        .label("802.11ad (min. 36 x slots)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 25, y)], C_AD.stroke_width(3)));
    chart
        .draw_series(
            r.points
                .iter()
                .map(|p| TriangleMarker::new((p.clients as f64, p.minislots_80211ad), 7, C_AD.filled())),
        )
        .map_err(pe)?;
    chart
        .configure_series_labels()
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(pe)?;

    let rmax = r.points.iter().map(|p| p.ratio).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&right)
        .caption("Overhead ratio 802.11ad / JPOC", (FONT, 20))
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(60)
        .build_cartesian_2d(xmin..xmax, 0.0..rmax)
        .map_err(pe)?;
    chart
        .configure_mesh()
        .x_desc("Number of clients")
        .y_desc("Ratio of mini-slots")
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(pe)?;
    chart
        .draw_series(r.points.iter().map(|p| {
            let x = p.clients as f64;
            Rectangle::new([(x - 1.2, 0.0), (x + 1.2, p.ratio)], C_THIRD.filled())
        }))
        .map_err(pe)?;
    chart
        .draw_series(r.points.iter().map(|p| {
            Text::new(
                format!("{:.1}x", p.ratio),
                (p.clients as f64 - 1.4, p.ratio + rmax * 0.02),
                (FONT, 15),
            )
        }))
        .map_err(pe)?;
    root.present().map_err(written(path))
}

pub fn beams(r: &BeamsReport, path: &Path) -> Result<()> {
    check_png(path)?;
    fbdt_font::ensure()?;
    let root = BitMapBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    let nb = r.brackets.len();
    let ymax = r
        .series
        .iter()
        .flat_map(|s| s.percent_ci95.iter().map(|c| c[1]))
        .fold(10.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Good beams per client ({} drops x {} realizations, 95% CI)",
                r.samples, r.repeat
            ),
            (FONT, 22),
        )
        .margin(20)
        .x_label_area_size(55)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0f64..nb as f64, 0.0..ymax)
        .map_err(pe)?;
    let labels = r.brackets.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(nb * 2 + 1)
        .x_label_formatter(&|x| {
            // Label only bracket centres (k + 0.5).
            let k = (x - 0.5).round();
            if (x - 0.5 - k).abs() < 1e-6 && k >= 0.0 && (k as usize) < labels.len() {
                labels[k as usize].clone()
            } else {
                String::new()
            }
        })
        .x_desc("Number of good beams (decodable at the AP)")
        .y_desc("Clients (%)")
        .label_style((FONT, 16))
        .axis_desc_style((FONT, 18))
        .draw()
        .map_err(pe)?;
    let colors = [C_AD, C_THIRD, C_JPOC, RGBColor(148, 103, 189)];
    let ns = r.series.len().max(1) as f64;
    let w = 0.8 / ns;
    for (k, s) in r.series.iter().enumerate() {
        let color = colors[k % colors.len()];
        let x0 = |b: usize| b as f64 + 0.1 + w * k as f64;
        chart
            .draw_series(
                s.percent
                    .iter()
                    .enumerate()
                    .map(|(b, &v)| Rectangle::new([(x0(b), 0.0), (x0(b) + w, v)], color.filled())),
            )
            .map_err(pe)?
            .label(format!(
                "{} (mean {:.1}, max {})",
                s.label, s.mean_good_beams, s.max_good_beams
            ))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.filled()));
        chart
            .draw_series(s.percent_ci95.iter().enumerate().map(|(b, c)| {
                ErrorBar::new_vertical(
                    x0(b) + w / 2.0,
                    c[0].max(0.0),
                    s.percent[b],
                    c[1],
                    BLACK.stroke_width(1),
                    6,
                )
            }))
            .map_err(pe)?;
    }
    chart
        .configure_series_labels()
        .label_font((FONT, 16))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(pe)?;
    root.present().map_err(written(path))
}

/// Five-stop perceptual ramp (viridis anchors) for index values 0 → 1.
fn ramp(v: f64) -> RGBColor {
    const STOPS: [(u8, u8, u8); 5] = [
        (68, 1, 84),
        (59, 82, 139),
        (33, 145, 140),
        (94, 201, 98),
        (253, 231, 37),
    ];
    let t = v.clamp(0.0, 1.0) * (STOPS.len() - 1) as f64;
    let i = (t.floor() as usize).min(STOPS.len() - 2);
    let f = t - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * f).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

pub fn heatmap(r: &HeatmapReport, path: &Path) -> Result<()> {
    check_png(path)?;
    fbdt_font::ensure()?;
    let np = r.panels.len().max(1);
    let (w, h) = (460 * np as u32 + 170, 560);
    let root = BitMapBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE).map_err(pe)?;
    let (main, bar) = root.split_horizontally(w - 170);
    let main = main
        .titled(
            &format!(
                "Competition fairness index S_other/S_near (near client at {} m, {} realizations/cell)",
                r.near_m, r.repeat
            ),
            (FONT, 20),
        )
        .map_err(pe)?;
    let areas = main.split_evenly((1, np));
    let rad = r.radius_m;
    let half = r.cell_m / 2.0;
    for (panel, area) in r.panels.iter().zip(areas.iter()) {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{} ({:.0}% cells >= 0.5)", panel.label, panel.fraction_fair * 100.0),
                (FONT, 17),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(45)
            .build_cartesian_2d(-rad..rad, -rad..rad)
            .map_err(pe)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("x (m)")
            .y_desc("y (m)")
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .draw()
            .map_err(pe)?;
        chart
            .draw_series(panel.cells.iter().map(|c| {
                // Undefined index (near client never wins a beam) is drawn as fully fair.
                let v = c.index.unwrap_or(1.0);
                Rectangle::new([(c.x - half, c.y - half), (c.x + half, c.y + half)], ramp(v).filled())
            }))
            .map_err(pe)?;
        // AP at the centre, near client marked.
        chart
            .draw_series(std::iter::once(Cross::new((0.0, 0.0), 6, BLACK.stroke_width(2))))
            .map_err(pe)?;
        chart
            .draw_series(std::iter::once(Circle::new((r.near_m, 0.0), 5, WHITE.filled())))
            .map_err(pe)?;
    }
    // Colour bar.
    let cb = ChartBuilder::on(&bar)
        .margin_top(60)
        .margin_bottom(60)
        .margin_left(20)
        .margin_right(90)
        .y_label_area_size(0)
        .right_y_label_area_size(45)
        .build_cartesian_2d(0.0f64..1.0, 0.0f64..1.0)
        .map_err(pe)?;
    let mut cb = cb.set_secondary_coord(0.0f64..1.0, 0.0f64..1.0);
    cb.configure_secondary_axes()
        .y_labels(6)
        .label_style((FONT, 14))
        .draw()
        .map_err(pe)?;
    cb.draw_secondary_series((0..100).map(|i| {
        let v = i as f64 / 100.0;
        Rectangle::new([(0.0, v), (1.0, v + 0.01)], ramp(v + 0.005).filled())
    }))
    .map_err(pe)?;
    root.present().map_err(written(path))
}
