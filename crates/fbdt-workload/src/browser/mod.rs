//! Q2 with a real browser (`workload web --backend emu --browser chromium`): each page of
//! `--pages` is written to disk as one HTML whose subresources are the page's Table I objects
//! (web.rs's generator: stylesheets, deferred scripts and PNG images of the generated sizes,
//! seeded content), served in the server namespace over HTTP/1.1 by python3's threading
//! `http.server` and over HTTP/2 (TLS) by h2.rs, and loaded by headless Chromium in the
//! client namespace: through
//! `fbdt proxy` → `fbdt serve` (SOCKS5) for `fbdt`, straight to one radio's server address
//! for `tcp:<path>`, and with browser and server under `mptcpize run` for `mptcp`.
//!
//! The browser measures: it is driven over the DevTools protocol on `--remote-debugging-pipe`
//! (fds 3 and 4, NUL-terminated JSON), and after the load event Navigation Timing gives the
//! page load time (`loadEventEnd`, from navigation start), Paint Timing the first
//! contentful paint and Resource Timing every request's timings and size. A load counts only
//! if every object arrived with its size, every script ran, every image decoded and every
//! stylesheet parsed; anything else is an error. A fresh browser (new profile, cache
//! disabled, no open connections) per load; loads 1 s apart, as in the paper.
//!
//! page.rs writes the pages, cdp.rs is the DevTools client, servers.rs starts what the
//! browser talks to; this file runs the loads and checks them.

mod cdp;
mod page;
mod servers;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fbdt_emu::{Side, Testbed};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::metrics::{summarise, Summary};
use crate::setup::{Browser, Setup, WorkloadArgs};
use crate::web::{generate, page, PageSpec};
use fbdt_harness::process::Children;

pub use cdp::{with_browser, BrowserPlan, Cdp};
pub use page::{write_page, PageFiles};
pub use servers::{route, start_fbdt_pair, start_servers, Http, Route, ServePlan, Servers};

/// The paper's gap between page loads.
const GAP: Duration = Duration::from_secs(1);
/// After the load event, how long the first contentful paint may take to be reported.
const PAINT_LIMIT: Duration = Duration::from_secs(5);

/// Is `program` an executable file in `$PATH`?
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Read in the page after its load event: the numbers the browser recorded.
const METRICS_JS: &str = r#"(() => {
  const n = performance.getEntriesByType('navigation')[0];
  if (!n || !(n.loadEventEnd > 0)) return null;
  const p = performance.getEntriesByName('first-contentful-paint')[0];
  return JSON.stringify({
    load_event_end: n.loadEventEnd,
    dom_content_loaded: n.domContentLoadedEventEnd,
    fcp: p ? p.startTime : null,
    html_bytes: n.decodedBodySize,
    protocol: n.nextHopProtocol,
    scripts_ran: window.fbdtRan || 0,
    images_decoded: Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length,
    stylesheets: document.styleSheets.length,
    resources: performance.getEntriesByType('resource').map(e => ({
      name: e.name, start_ms: e.startTime, request_ms: e.requestStart,
      first_byte_ms: e.responseStart, end_ms: e.responseEnd,
      bytes: e.decodedBodySize, protocol: e.nextHopProtocol })) });
})()"#;

#[derive(Debug, Deserialize)]
struct PageTimings {
    load_event_end: f64,
    dom_content_loaded: f64,
    fcp: Option<f64>,
    html_bytes: u64,
    protocol: String,
    scripts_ran: usize,
    images_decoded: usize,
    stylesheets: usize,
    resources: Vec<RequestTiming>,
}

/// One subresource as Resource Timing saw it; times in ms from navigation start.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RequestTiming {
    /// URL path (the full URL in Resource Timing).
    pub name: String,
    pub start_ms: f64,
    pub request_ms: f64,
    pub first_byte_ms: f64,
    pub end_ms: f64,
    pub bytes: u64,
    pub protocol: String,
}

/// One page load as the browser measured it.
#[derive(Debug, Serialize)]
pub struct BrowserLoad {
    pub seed: u64,
    /// 0, 1, …: the load's place among this page's loads in the run.
    pub load: usize,
    /// Navigation Timing `loadEventEnd` (ms from navigation start).
    pub plt_ms: f64,
    /// First contentful paint (ms from navigation start).
    pub fcp_ms: f64,
    pub dom_content_loaded_ms: f64,
    /// ALPN / HTTP version of the HTML (`http/1.1`).
    pub protocol: String,
    pub resources: usize,
    /// Body bytes of every object (the HTML's not included).
    pub object_bytes: u64,
    pub html_bytes: u64,
    /// Bytes each radio's client end received during the load (browser start excluded).
    pub per_path_bytes: BTreeMap<String, u64>,
    /// `mptcp`: MPTCP connections the client opened during the load (MPCapable SYN-ACKs
    /// received); 0 would mean the browser fell back to TCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mptcp_connections: Option<u64>,
    pub requests: Vec<RequestTiming>,
}

/// One scheme × page: every load of every seed.
#[derive(Debug, Serialize)]
pub struct BrowserResult {
    pub scheme: String,
    pub page: &'static str,
    pub http: String,
    pub browser: Browser,
    pub objects: usize,
    /// The first seed's page (objects only).
    pub page_bytes: u64,
    /// Median page load time over loads and seeds (ms).
    pub page_load_ms: f64,
    pub page_load_p90_ms: f64,
    pub fcp_ms: f64,
    pub fcp_p90_ms: f64,
    pub summary: Summary,
    pub loads: Vec<BrowserLoad>,
}

/// Checks a load against the page on disk: every object once with its size, the HTML
/// whole, every script run, every image decoded, every stylesheet parsed.
fn verify(t: &PageTimings, files: &PageFiles, protocol: &str) -> Result<()> {
    let mut problems = Vec::new();
    if t.protocol != protocol {
        problems.push(format!("HTML over `{}`, not {protocol}", t.protocol));
    }
    if let Some(r) = t.resources.iter().find(|r| r.protocol != protocol) {
        problems.push(format!("{} over `{}`, not {protocol}", r.name, r.protocol));
    }
    if t.html_bytes != files.html_bytes {
        problems.push(format!("HTML {} bytes, served {}", t.html_bytes, files.html_bytes));
    }
    let mut got: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for r in &t.resources {
        got.entry(r.name.as_str()).or_default().push(r.bytes);
    }
    for (path, bytes) in &files.objects {
        match got.remove(path.as_str()).as_deref() {
            None => problems.push(format!("{path} never fetched")),
            Some([b]) if b == bytes => {}
            Some(sizes) => problems.push(format!("{path}: got {sizes:?} bytes, served {bytes}")),
        }
    }
    problems.extend(got.keys().map(|k| format!("unexpected request {k}")));
    if t.scripts_ran != files.scripts {
        problems.push(format!("{} of {} scripts ran", t.scripts_ran, files.scripts));
    }
    if t.images_decoded != files.images {
        problems.push(format!("{} of {} images decoded", t.images_decoded, files.images));
    }
    if t.stylesheets != files.stylesheets {
        problems.push(format!("{} of {} stylesheets parsed", t.stylesheets, files.stylesheets));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let n = problems.len();
    problems.truncate(5);
    bail!("the page arrived incomplete ({n} problems): {}", problems.join("; "))
}

/// The client namespace's MPTCP counter of handshakes that came back MP_CAPABLE.
pub(super) fn mptcp_capable(tb: &Testbed) -> Result<u64> {
    let out = tb
        .command(Side::Client, "cat")
        .arg("/proc/net/netstat")
        .output()
        .context("reading /proc/net/netstat in the client namespace")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("MPTcpExt:")).collect();
    if let [names, values] = lines.as_slice() {
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if n == "MPCapableSYNACKRX" {
                return v.parse().context("MPCapableSYNACKRX");
            }
        }
    }
    bail!("no MPTcpExt MPCapableSYNACKRX counter in the client namespace")
}

/// The client's counters at the start of a measurement: bytes per radio and, for `mptcp`,
/// MPTCP handshakes.
pub(super) struct Traffic {
    before: Vec<fbdt_emu::PathCounters>,
    mptcp_before: Option<u64>,
}

impl Traffic {
    pub(super) fn start(tb: &Testbed, route: &Route) -> Result<Self> {
        let mptcp_before = match route {
            Route::Mptcp => Some(mptcp_capable(tb)?),
            _ => None,
        };
        Ok(Traffic {
            before: tb.path_counters()?,
            mptcp_before,
        })
    }

    /// Bytes each radio's client end received since `start`, and (`mptcp`) the MPTCP
    /// connections opened.
    pub(super) fn end(self, tb: &Testbed) -> Result<(BTreeMap<String, u64>, Option<u64>)> {
        let per_path = fbdt_harness::process::received(&self.before, &tb.path_counters()?);
        let mptcp = match self.mptcp_before {
            Some(b) => Some(mptcp_capable(tb)?.saturating_sub(b)),
            None => None,
        };
        Ok((per_path, mptcp))
    }
}

/// Everything one load needs to know about where it runs.
struct LoadPlan<'a> {
    tb: &'a Testbed,
    route: &'a Route,
    /// `http://ip:port` or `https://ip:port`: the page server for this scheme and version.
    origin: String,
    proxy: Option<SocketAddr>,
    /// HTTP/2: the server certificate's key, which the browser accepts.
    spki_pin: Option<&'a str>,
    work: &'a Path,
    limit: Duration,
}

/// One page load by a fresh browser.
fn load_page(
    plan: &LoadPlan,
    files: &PageFiles,
    n: usize,
) -> Result<(PageTimings, BTreeMap<String, u64>, Option<u64>)> {
    let extra: Vec<String> = plan
        .spki_pin
        .map(|pin| format!("--ignore-certificate-errors-spki-list={pin}"))
        .into_iter()
        .collect();
    let browser = BrowserPlan {
        tb: plan.tb,
        route: plan.route,
        proxy: plan.proxy,
        work: plan.work,
        extra: &extra,
    };
    with_browser(&browser, n, |cdp, session| {
        let s = Some(session);
        let traffic = Traffic::start(plan.tb, plan.route)?;
        let url = format!("{}{}", plan.origin, files.url_path);
        let until = Instant::now() + plan.limit;
        cdp.open(session, &url, until, plan.limit)?;
        // loadEventEnd is set when the load handlers returned, the paint entry when the
        // compositor reported it: poll for both.
        let mut painted_by = None;
        let timings = loop {
            let v = cdp.call(
                s,
                "Runtime.evaluate",
                json!({ "expression": METRICS_JS, "returnByValue": true }),
            )?;
            if let Some(text) = v["result"]["value"].as_str() {
                let mut t: PageTimings = serde_json::from_str(text).context("the page's timings")?;
                for r in &mut t.resources {
                    if let Some(path) = r.name.strip_prefix(&plan.origin) {
                        r.name = path.to_string();
                    }
                }
                if t.fcp.is_some() {
                    break t;
                }
                let by = *painted_by.get_or_insert_with(|| Instant::now() + PAINT_LIMIT);
                if Instant::now() > by {
                    bail!("the page loaded but no first contentful paint was reported");
                }
            } else if Instant::now() > until {
                bail!("no loadEventEnd for {url} within {:?}", plan.limit);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (per_path, mptcp) = traffic.end(plan.tb)?;
        Ok((timings, per_path, mptcp))
    })
}

/// Everything a run needs beyond the setup.
struct RunPlan<'a> {
    setup: &'a Setup,
    pages: &'a [PageSpec],
    versions: &'a [Http],
    loads: usize,
    fbdt: Option<&'a Path>,
    limit: Duration,
    bar: &'a ProgressBar,
}

/// One scheme × seed on a fresh testbed: every version and page, `loads` times each; the
/// loads per version and page (`[version][page]`).
fn run_one(plan: &RunPlan, scheme: &str, seed: u64) -> Result<Vec<Vec<Vec<BrowserLoad>>>> {
    let setup = plan.setup;
    let route = route(scheme, setup)?;
    let work = tempfile::tempdir().context("a working directory")?;
    let dir = work.path();
    let www = dir.join("www");
    let pages: Vec<PageFiles> = plan
        .pages
        .iter()
        .map(|p| write_page(&www, p, setup.scale, seed))
        .collect::<Result<_>>()?;
    let identity = super::h2::Identity::generate()?;
    let serve = ServePlan {
        versions: plan.versions,
        fbdt: plan.fbdt,
        identity: Some(&identity),
        www: &www,
        dir,
    };
    on_testbed(setup, scheme, seed, |tb, children| {
        let mut srv = start_servers(tb, &route, &serve, children)?;
        let loads = (|| {
            let mut out = Vec::new();
            let mut n = 0;
            for &http in plan.versions {
                let load_plan = LoadPlan {
                    tb,
                    route: &route,
                    origin: match http {
                        Http::H1 => srv.h1.clone(),
                        Http::H2 => srv.h2.clone(),
                    }
                    .expect("started for every version"),
                    proxy: srv.proxy,
                    spki_pin: (http == Http::H2).then_some(identity.spki_sha256.as_str()),
                    work: dir,
                    limit: plan.limit,
                };
                let mut per_page = Vec::new();
                for (spec, files) in plan.pages.iter().zip(&pages) {
                    let mut loads = Vec::new();
                    for load in 0..plan.loads {
                        if n > 0 {
                            std::thread::sleep(GAP);
                        }
                        let what = format!("page {} HTTP/{} load {}", spec.name, http.label(), load + 1);
                        plan.bar.set_message(format!("{scheme}, {what}"));
                        let (t, per_path_bytes, mptcp_connections) =
                            load_page(&load_plan, files, n).with_context(|| what.clone())?;
                        n += 1;
                        children.check(dir)?;
                        verify(&t, files, http.alpn()).with_context(|| what.clone())?;
                        if mptcp_connections == Some(0) {
                            bail!("{what}: the browser opened no MPTCP connection (mptcpize had no effect)");
                        }
                        let fcp = t.fcp.expect("polled until present");
                        let requests = t.resources;
                        loads.push(BrowserLoad {
                            seed,
                            load,
                            plt_ms: t.load_event_end,
                            fcp_ms: fcp,
                            dom_content_loaded_ms: t.dom_content_loaded,
                            protocol: t.protocol,
                            resources: requests.len(),
                            object_bytes: requests.iter().map(|r| r.bytes).sum(),
                            html_bytes: t.html_bytes,
                            per_path_bytes,
                            mptcp_connections,
                            requests,
                        });
                        plan.bar.inc(1);
                    }
                    per_page.push(loads);
                }
                out.push(per_page);
            }
            Ok(out)
        })();
        let stopped = srv.stop();
        loads.and_then(|r| stopped.map(|_| r))
    })
}

/// One scheme × seed on a fresh testbed of the scenario: `body` with the testbed and the
/// children it starts (killed after it returns); the run's fidelity verdict is recorded if
/// it succeeded.
pub(crate) fn on_testbed<T>(
    setup: &Setup,
    scheme: &str,
    seed: u64,
    body: impl FnOnce(&Testbed, &mut Children) -> Result<T>,
) -> Result<T> {
    let mut sc = setup.scenario.clone();
    sc.seed = seed;
    let schedule = sc.schedule(setup.scale)?;
    let spec = fbdt_emu::spec_from_schedule(&sc, &schedule)?;
    let mut tb = Testbed::start(&spec, &setup.testbed).context("starting the testbed")?;
    tb.play()?;
    let mut children = Children(Vec::new());
    let result = body(&tb, &mut children);
    drop(children);
    let fidelity = tb.fidelity();
    tb.stop();
    let out = result.with_context(|| format!("scheme {scheme}, seed {seed}"))?;
    setup.record_fidelity(scheme, seed, fidelity);
    Ok(out)
}

/// `workload web --backend emu --browser chromium`.
pub fn run(setup: &Setup, args: &WorkloadArgs, browser: Browser) -> Result<Vec<BrowserResult>> {
    let Browser::Chromium = browser;
    let versions: Vec<Http> = if args.http.is_empty() {
        vec![Http::H1, Http::H2]
    } else {
        args.http.iter().map(|v| Http::parse(v)).collect::<Result<_>>()?
    };
    let pages: Vec<PageSpec> = args.pages.iter().map(|p| page(p.trim())).collect::<Result<_>>()?;
    if args.page_loads == 0 || args.page_loads > 100 {
        bail!("--page-loads must be in 1..=100");
    }
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("--browser chromium needs root to build the emulated testbed: {why}");
    }
    for program in ["chromium", "python3"] {
        if !on_path(program) {
            bail!("--browser chromium needs `{program}` (not found in PATH)");
        }
    }
    let routes: Vec<Route> = setup.schemes.iter().map(|s| route(s, setup)).collect::<Result<_>>()?;
    if routes.contains(&Route::Mptcp) && !on_path("mptcpize") {
        bail!("the mptcp scheme runs the browser under `mptcpize run`: install it (apt-get install mptcpd)");
    }
    let fbdt = if routes.iter().any(Route::is_fbdt) {
        Some(fbdt_harness::process::fbdt_binary(None)?)
    } else {
        None
    };
    let loads = args.page_loads as usize;
    let total = setup.schemes.len() * setup.seeds.len() * versions.len() * pages.len() * loads;
    let bar = fbdt_harness::progress::bar(total as u64);
    bar.set_style(
        ProgressStyle::with_template("web (chromium) [{bar:30}] {pos}/{len} loads, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let plan = RunPlan {
        setup,
        pages: &pages,
        versions: &versions,
        loads,
        fbdt: fbdt.as_deref(),
        limit: Duration::from_secs_f64(args.max_duration),
        bar: &bar,
    };
    // results[scheme][version][page] = loads over seeds
    let mut results: Vec<Vec<Vec<Vec<BrowserLoad>>>> = Vec::new();
    for scheme in &setup.schemes {
        let mut acc: Vec<Vec<Vec<BrowserLoad>>> = versions
            .iter()
            .map(|_| pages.iter().map(|_| Vec::new()).collect())
            .collect();
        for &seed in &setup.seeds {
            let ran = match run_one(&plan, scheme, seed) {
                Ok(r) => r,
                Err(e) => {
                    bar.finish_and_clear();
                    return Err(e);
                }
            };
            for (slots, per_page) in acc.iter_mut().zip(ran) {
                for (slot, l) in slots.iter_mut().zip(per_page) {
                    slot.extend(l);
                }
            }
        }
        results.push(acc);
    }
    bar.finish_and_clear();
    let first_seed = setup.seeds[0];
    let mut out = Vec::new();
    for (scheme, acc) in setup.schemes.iter().zip(results) {
        for (&http, per_page) in versions.iter().zip(acc) {
            for (spec, loads) in pages.iter().zip(per_page) {
                let plt: Vec<Option<f64>> = loads.iter().map(|l| Some(l.plt_ms)).collect();
                let fcp: Vec<Option<f64>> = loads.iter().map(|l| Some(l.fcp_ms)).collect();
                let summary = summarise(&plt);
                let fcp = summarise(&fcp);
                out.push(BrowserResult {
                    scheme: scheme.clone(),
                    page: spec.name,
                    http: http.label().into(),
                    browser,
                    objects: spec.objects,
                    page_bytes: generate(spec, setup.scale, first_seed).iter().sum(),
                    page_load_ms: summary.median,
                    page_load_p90_ms: summary.p90,
                    fcp_ms: fcp.median,
                    fcp_p90_ms: fcp.p90,
                    summary,
                    loads,
                });
            }
        }
    }
    println!(
        "Chromium page loads, scenario {} (scale {}, {} seeds × {loads} loads): load time \
         median/p90, first contentful paint median, in ms",
        setup.scenario.name,
        setup.scale,
        setup.seeds.len()
    );
    print!("{:<10} {:>4}", "page", "http");
    for s in &setup.schemes {
        print!(" {s:>22}");
    }
    println!();
    for spec in &pages {
        for &http in &versions {
            print!("{:<10} {:>4}", spec.name, http.label());
            for s in &setup.schemes {
                let cell = out
                    .iter()
                    .find(|r| &r.scheme == s && r.page == spec.name && r.http == http.label())
                    .map_or("-".into(), |r| {
                        format!("{:.0}/{:.0} fcp {:.0}", r.page_load_ms, r.page_load_p90_ms, r.fcp_ms)
                    });
                print!(" {cell:>22}");
            }
            println!();
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
