//! `report.html`: one self-contained page (inline CSS, images by relative path, no script)
//! from the summary. Missed targets are shown as plainly as met ones.

use std::fmt::Write as _;

use super::check::Status;
use super::summary::Summary;
use super::text::{escape, short};

/// A figure on the page: file name relative to the page, and what it shows.
pub struct Figure {
    pub file: String,
    /// The same figure as SVG, linked from the image.
    pub svg: Option<String>,
    pub caption: String,
}

fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or("—".into(), |v| format!("{v:.decimals$}"))
}

const CSS: &str = "body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;max-width:1200px;margin:24px auto;\
padding:0 16px;color:#222;line-height:1.4}h1{font-size:24px}h2{font-size:19px;margin-top:32px;\
border-bottom:1px solid #ccc}table{border-collapse:collapse;margin:8px 0;font-size:14px}\
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}\
td.l,th.l{text-align:left}tr.sc td{background:#e8eef7;text-align:left;font-weight:bold}\
.PASS{background:#c8f0c8;color:#064}.MISS{background:#f8c8c8;color:#900;font-weight:bold}\
.NA{background:#eee;color:#666}.UNF{background:#ddd;color:#777;font-style:italic}tr.unf td{color:#aaa}\
tr.sc td.unf{background:#ddd;color:#555}.verdict{padding:10px 14px;font-size:17px;border-radius:4px}.verdict ul{margin:6px 0 0;font-size:15px}\
.ok{background:#c8f0c8}.bad{background:#f8c8c8}figure{margin:16px 0}figure img{max-width:100%;\
border:1px solid #ddd}figcaption{font-size:14px;color:#444}pre{background:#f7f7f7;padding:8px;\
white-space:pre-wrap}dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}dt{font-weight:bold}";

/// The whole page.
pub fn render(s: &Summary, figures: &[Figure], notes: Option<&str>) -> String {
    let mut h = String::new();
    let title = format!("fbdt-lab paper — {} backend", s.run.backend);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>{CSS}</style>\
         </head><body>\n<h1>{}</h1>\n",
        escape(&title),
        escape(&title)
    );
    verdict(&mut h, s);
    what_was_run(&mut h, s);
    targets(&mut h, s);
    results(&mut h, s);
    if let Some(w) = &s.workloads {
        workloads(&mut h, w);
    }
    if let Some(c) = &s.cotag {
        super::cotag::html(&mut h, c);
    }
    h.push_str("<h2 id=\"figures\">Figures</h2>\n");
    for f in figures {
        let img = format!("<img src=\"{}\" alt=\"{}\">", escape(&f.file), escape(&f.caption));
        let img = match &f.svg {
            Some(svg) => format!("<a href=\"{}\">{img}</a>", escape(svg)),
            None => img,
        };
        let _ = writeln!(
            h,
            "<figure>{img}<figcaption>{}</figcaption></figure>",
            escape(&f.caption)
        );
    }
    h.push_str("<h2 id=\"notes\">Notes</h2>\n");
    match notes {
        Some(n) => {
            let _ = writeln!(h, "<pre class=\"notes\">{}</pre>", escape(n));
        }
        None => h.push_str("<p><em>No notes given (<code>--notes FILE</code> inserts them here).</em></p>\n"),
    }
    h.push_str("</body></html>\n");
    h
}

fn verdict(h: &mut String, s: &Summary) {
    let count = |st: Status| s.checks.iter().filter(|c| c.status == st).count();
    let (miss, na, unf) = (
        count(Status::Miss),
        count(Status::NotMeasured),
        count(Status::Unfaithful),
    );
    let text = if s.all_pass {
        format!("All {} target checks passed.", s.checks.len())
    } else {
        format!(
            "{} of {} target checks passed: {miss} missed, {na} not measured, {unf} unfaithful \
             (the emulator was out of tolerance: neither pass nor miss); {} scenario run(s) failed.",
            count(Status::Pass),
            s.checks.len(),
            s.failures.len()
        )
    };
    let class = if s.all_pass { "ok" } else { "bad" };
    let _ = write!(h, "<div class=\"verdict {class}\">{}", escape(&text));
    let missed: Vec<String> = s
        .checks
        .iter()
        .filter(|c| c.status != Status::Pass)
        .map(|c| format!("{}: {} ({})", c.scenario, c.target, c.status.label()))
        .chain(s.failures.iter().map(|f| format!("{}: run failed", f.scenario)))
        .collect();
    if !missed.is_empty() {
        h.push_str("<ul>");
        for m in missed {
            let _ = write!(h, "<li>{}</li>", escape(&m));
        }
        h.push_str("</ul>");
    }
    h.push_str("</div>\n");
}

fn what_was_run(h: &mut String, s: &Summary) {
    let r = &s.run;
    let scales: Vec<String> = r.scales.iter().map(|&x| short(x)).collect();
    let rows = [
        ("backend", r.backend.clone()),
        ("mode", if r.quick { "quick" } else { "full" }.to_string()),
        ("MPTCP baseline", r.baseline.clone()),
        ("scale", scales.join(", ")),
        ("scale chosen by", r.scale_sources.join("; ")),
        (
            "emulator frames",
            match r.gso_unit_airtime_us {
                Some(us) => format!("GSO units of ≤ {us} µs (--gso-units)"),
                None if r.scale_sources.is_empty() => "—".into(),
                None => "one MTU packet each".into(),
            },
        ),
        ("congestion control", r.congestion_control.join(", ")),
        ("machine", format!("{} cores, kernel {}", r.cores, r.kernel)),
        ("git revision", r.git_revision.clone()),
        ("started (UTC)", r.started.clone()),
        ("wall time", format!("{:.0} s", r.wall_s)),
        ("command", r.command_line.join(" ")),
    ];
    h.push_str("<h2 id=\"run\">What was run</h2>\n<dl>");
    for (k, v) in rows {
        let _ = write!(h, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(&v));
    }
    h.push_str(
        "</dl>\n<p>The paper's numbers are at its links' full rates; emulated runs scale every path \
         rate by <em>scale</em> so the machine can emulate them faithfully. Compare <strong>ratios</strong> \
         (to Σ standalone TCP, to MPTCP, to capacity), not absolute Mbit/s. The ÷ scale column is the \
         full-rate equivalent of our number, for orientation only. Σ standalone = the sum of each \
         path's single-path TCP goodput measured alone in the same run; capacity = the time-averaged \
         sum of the configured path rates.</p>\n",
    );
}

fn status_cell(st: Status) -> String {
    let class = match st {
        Status::NotMeasured => "NA",
        Status::Unfaithful => "UNF",
        _ => st.label(),
    };
    format!("<td class=\"{class}\">{}</td>", st.label())
}

fn targets(h: &mut String, s: &Summary) {
    h.push_str(
        "<h2 id=\"targets\">Target checks</h2>\n<table><tr><th class=\"l\">scenario</th><th class=\"l\">target</th>\
         <th>ours</th><th>paper</th><th>result</th><th class=\"l\">runs</th></tr>\n",
    );
    for c in &s.checks {
        let _ = writeln!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>{}<td class=\"l\">{}</td></tr>",
            escape(&c.scenario),
            escape(&c.target),
            num(c.value, 4),
            num(c.paper_value, 4),
            status_cell(c.status),
            escape(&c.runs_note().unwrap_or_default())
        );
    }
    h.push_str(
        "</table>\n<p>ours / paper = the ratio the target is about (threshold in the target). With \
         <code>--repeat</code>, ours is the ratio of the means and the last column the ratio run by \
         run (same seed for every scheme); runs on both sides of the threshold mean the verdict is \
         within run-to-run spread.</p>\n",
    );
    if !s.failures.is_empty() {
        h.push_str("<h2>Failed runs</h2>\n");
        for f in &s.failures {
            let _ = writeln!(
                h,
                "<p class=\"MISS\">{}: run failed, its targets are not measured</p><pre>{}</pre>",
                escape(&f.scenario),
                escape(&f.error)
            );
        }
    }
}

fn results(h: &mut String, s: &Summary) {
    h.push_str(
        "<h2 id=\"results\">Goodput per scenario and scheme</h2>\n<table><tr><th class=\"l\">scheme</th><th>Mbit/s</th>\
         <th>CPU cores</th><th>stack CPU</th><th>p10</th><th>p50</th><th>p90</th><th>÷ scale</th><th>paper</th><th>/ Σ standalone</th>\
         <th>paper / Σ standalone</th><th>sd 100 ms</th><th>delay p50 ms</th><th>delay p99 ms</th></tr>\n",
    );
    for sc in &s.scenarios {
        let _ = writeln!(
            h,
            "<tr class=\"sc\"><td colspan=\"13\">{} — {:.0} s at scale {}: capacity {:.1} Mbit/s, \
             Σ standalone {} Mbit/s; paper Σ standalone {} Mbit/s</td></tr>",
            escape(&sc.scenario),
            sc.duration_s,
            short(sc.scale),
            sc.capacity_mbps,
            num(sc.sum_standalone_mbps, 1),
            num(sc.paper.sum_standalone_mbps, 0)
        );
        if !sc.faithful {
            let _ = writeln!(
                h,
                "<tr class=\"sc\"><td class=\"unf\" colspan=\"13\">UNFAITHFUL emulation (greyed rows; \
                 no target counts them): {}</td></tr>",
                escape(&sc.unfaithful.join(" | "))
            );
        } else if !sc.left_out_seeds.is_empty() {
            let _ = writeln!(
                h,
                "<tr class=\"sc\"><td class=\"l\" colspan=\"13\">Repetitions left out as unfaithful \
                 (seeds {}; every figure and target here is over the others): {}</td></tr>",
                sc.left_out_seeds
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                escape(&sc.unfaithful.join(" | "))
            );
        }
        for x in &sc.schemes {
            let _ = writeln!(
                h,
                "<tr{}><td class=\"l\">{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td>\
                 <td>{:.0}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if x.faithful { "" } else { " class=\"unf\"" },
                escape(&x.scheme),
                x.goodput_mbps,
                num(x.endpoint_cpu_cores, 2),
                num(x.stack_cpu_cores, 2),
                x.p10_mbps,
                x.p50_mbps,
                x.p90_mbps,
                x.full_rate_mbps,
                num(x.paper_mbps, 0),
                num(x.ratio_to_sum_standalone, 3),
                num(x.paper_ratio_to_sum_standalone, 3),
                num(x.sd_100ms_mbps, 1),
                num(x.delay_p50_ms, 1),
                num(x.delay_p99_ms, 1)
            );
        }
    }
    h.push_str(
        "</table>\n<p>Mbit/s and p10/p50/p90 (of one-second samples) at our scale; paper = the \
         scenario file's <code>[reference]</code> (full rate; its <code>mptcp</code> entry is shown on our \
         MPTCP baseline); sd 100 ms = standard deviation of the 100 ms goodput series; delay = in-order \
         delivery delay, first transmission to in-order delivery (docs/results.md); CPU cores = both \
         endpoints' CPU-seconds per second of run, user + system (testbed only: the simulator has no \
         CPU to measure); stack CPU = the host's busy cores less the emulator's and other programs': \
         both ends and all the kernel's work for them, wherever it was booked (softirq work is charged \
         to whatever task it interrupts, so the endpoints' figure favours ends that sleep in a read); — = not given or not measured.</p>\n",
    );
}

fn workloads(h: &mut String, w: &super::workloads::WorkloadSection) {
    let _ = writeln!(
        h,
        "<h2 id=\"workloads\">Application workloads ({} backend)</h2>\n<p>Paper 001 sec. VI-C ({} \
         model, {} seeds per point, radio sleep/wake: {}; video {}; {:.0} s). {} The claims are in \
         the target checks above; models and assumptions in docs/workloads.md.</p>",
        escape(&w.backend),
        escape(&w.model),
        w.repeat,
        escape(&w.radio),
        w.video_s
            .map_or("as long as each scenario".into(), |v| format!("{v:.0} s")),
        w.wall_s,
        if w.backend == "emu" && w.web_browser.is_some() {
            "On the testbed: MPTCP = the kernel's, sizes and rates × the host's calibrated scale \
             (rows name the nominal ones), web pages loaded by headless Chromium (and adaptive video \
             played by dash.js in it when installed, see the dash tables' metric); a table with a \
             run the monitors flagged counts in no claim."
        } else if w.backend == "emu" {
            "On the testbed: MPTCP = the kernel's, sizes and rates × the host's calibrated scale \
             (rows name the nominal ones), web pages by the synthetic page driver (Chromium or \
             mptcpize not installed); a table with a run the monitors flagged counts in no claim."
        } else {
            "In the simulator at scale 1, whatever backend the suite above used (--workloads-backend \
             emu runs them on the testbed). MPTCP = <code>mp:minrtt</code>."
        }
    );
    for t in &w.tables {
        let _ = write!(
            h,
            "<h3>{} — {}</h3>\n<p>{}{}</p>\n<table><tr><th class=\"l\"></th>",
            escape(&t.kind),
            escape(&t.scenario),
            escape(&t.metric),
            if t.unfaithful_runs > 0 {
                format!(
                    " — <b>UNFAITHFUL</b>: {} run(s) flagged by the emulator's monitors; this table counts in no claim",
                    t.unfaithful_runs
                )
            } else {
                String::new()
            }
        );
        for sc in &t.schemes {
            let _ = write!(h, "<th>{}</th>", escape(sc));
        }
        h.push_str("<th class=\"l\">paper</th></tr>\n");
        for r in &t.rows {
            let _ = write!(h, "<tr><td class=\"l\">{}</td>", escape(&r.label));
            for v in &r.values {
                let _ = write!(h, "<td>{}</td>", num(*v, 1));
            }
            let _ = writeln!(
                h,
                "<td class=\"l\">{}</td></tr>",
                escape(r.paper.as_deref().unwrap_or("—"))
            );
        }
        h.push_str("</table>\n");
    }
    if w.fbdt_behind.is_empty() {
        h.push_str("<p>FBDT was the best scheme (within 2 %) of every row.</p>\n");
    } else {
        h.push_str("<p>Where FBDT is not the best scheme (another beats it by more than 2 %, or a point for shares):</p>\n<ul>");
        for x in &w.fbdt_behind {
            let _ = write!(h, "<li>{}</li>", escape(x));
        }
        h.push_str("</ul>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::super::summary::{build, tests as st, Failure};
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(
            escape("<b>\"a\" & 'b'</b>"),
            "&lt;b&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/b&gt;"
        );
        assert_eq!(escape("Σ ≥ 0.95"), "Σ ≥ 0.95");
    }

    #[test]
    fn the_page_shows_misses_failures_and_escaped_notes() {
        let r = st::report(
            "blockage",
            0.2,
            240.0,
            &[
                ("fbdt", 150.0),
                ("mptcp", 160.0),
                ("tcp:wifi", 90.0),
                ("tcp:wigig", 100.0),
            ],
        );
        let f = Failure {
            scenario: "nlos".into(),
            error: "testbed <gone>".into(),
        };
        let s = build(&[r], &[], vec![f], st::info("mptcp"));
        let fig = Figure {
            file: "bars-fig8c.png".into(),
            svg: Some("bars-fig8c.svg".into()),
            caption: "Fig. 8c".into(),
        };
        let page = render(&s, &[fig], Some("FBDT <script>alert(1)</script> & co"));
        assert!(page.contains("<td class=\"MISS\">MISS</td>"), "{page}");
        assert!(page.contains("missed"));
        assert!(page.contains("testbed &lt;gone&gt;"));
        assert!(page.contains("FBDT &lt;script&gt;alert(1)&lt;/script&gt; &amp; co"));
        assert!(!page.contains("<script>"));
        assert!(page.contains("<a href=\"bars-fig8c.svg\"><img src=\"bars-fig8c.png\""));
        assert!(page.contains("compare <strong>ratios</strong>") || page.contains("Compare <strong>ratios</strong>"));
        // The paper's blockage FBDT number is in the table.
        assert!(page.contains("<td>1292</td>"));
    }

    #[test]
    fn the_results_table_shows_the_100ms_sd_and_the_delivery_delay() {
        let mut r = st::report("los", 0.2, 370.0, &[("fbdt", 360.0)]);
        let x = &mut r.results[0];
        x.series_100ms_mbps = vec![300.0, 500.0];
        x.delivery_delay_ms = fbdt_harness::results::DeliveryDelay::from_ms(vec![12.0, 14.0, 16.0], 0);
        let page = render(&build(&[r], &[], Vec::new(), st::info("mptcp")), &[], None);
        // sd 100, p50 14, p99 15.96.
        assert!(page.contains("<td>100.0</td><td>14.0</td><td>16.0</td></tr>"), "{page}");
    }
}
