//! `fbdt-lab app` (its arguments and its work; fbdt-lab only mounts it): a real application
//! through `fbdt proxy` (client namespace) and `fbdt serve` (server namespace) over the
//! emulated radios of a scenario. curl fetches a file from a real HTTP server (python3's
//! http.server) in the server namespace, through the proxy and then over each radio alone; its
//! SHA-256 is checked, and every read is timed so the longest gap in delivery (a radio cut mid-
//! download, as in `blockage`) is measured. Headless Chromium loads a page of many scripts and
//! ffmpeg decodes a video through the proxy, each checked against what was served. Needs root,
//! curl, python3, the `fbdt` binary, and chromium or ffmpeg for those apps.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use fbdt_emu::{Side, Testbed};
use fbdt_scenario::Scenario;
use indicatif::ProgressBar;
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use sha2::{Digest, Sha256};

use fbdt_harness::process::{
    fbdt_binary, received, security_args, wait_listening, Children, FBDT_PORT, HTTP_PORT, PROXY_PORT, READY_LIMIT,
};

/// `fbdt perf --server` for the curl apps' baseline (TCP/MPTCP would take the next port).
const PERF_PORT: u16 = 5410;
/// `--app transparent`: the origin's own address, on the server namespace's loopback.
const ORIGIN: Ipv4Addr = Ipv4Addr::new(10, 199, 0, 1);
/// Largest file `--seconds` may ask for (it is generated in memory).
const MAX_FILE: u64 = 1 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum App {
    /// curl through the SOCKS5 front end (--socks5-hostname).
    CurlSocks,
    /// curl through the HTTP proxy front end (absolute-URI requests).
    CurlHttp,
    /// Headless Chromium (--proxy-server=socks5://…) loading a page of 20 scripts.
    Chromium,
    /// ffmpeg (-http_proxy) decoding an MPEG-TS video; frames' MD5 against the local file.
    Ffmpeg,
    /// curl with no proxy setting: `fbdt proxy --transparent --nft-install` in the client
    /// namespace redirects its connection (the origin gets an address of its own, which the
    /// redirect rule does not spare as it spares the FBDT servers').
    Transparent,
    /// 100 sequential 1 KiB GETs with curl (a new connection each, as HTTP/1.0 does) through
    /// the SOCKS5 front end, and directly over each radio alone: time per request and to
    /// the first byte.
    Small,
}

/// Requests of `--app small`, and their size.
const SMALL_REQUESTS: usize = 100;
const SMALL_BYTES: usize = 1024;

/// Scripts on the Chromium page; each counts itself when it runs.
const PAGE_SCRIPTS: usize = 20;
/// The page's scripts hold at most this many bytes in all.
const MAX_PAGE_BYTES: u64 = 16 << 20;

#[derive(Args, Debug)]
pub struct AppArgs {
    /// Built-in scenario name or a scenario .toml file (`blockage` cuts the busiest radio
    /// mid-download).
    pub scenario: String,
    #[arg(long, value_enum, default_value_t = App::CurlSocks)]
    pub app: App,
    /// Size the file so that the scenario's mean capacity moves it in this many seconds.
    #[arg(long, default_value_t = 8.0)]
    pub seconds: f64,
    /// Rate scale (default: this host's calibrated one, as `run --backend emu`).
    #[arg(long)]
    pub scale: Option<f64>,
    /// No TLS between proxy and server (default: TLS 1.3 with a pinned key and a token).
    #[arg(long)]
    pub plaintext: bool,
    /// The `fbdt` binary (default: next to this one).
    #[arg(long)]
    pub fbdt: Option<PathBuf>,
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One download: how long it took, whether the bytes were right, and when they came.
#[derive(Debug, Serialize)]
pub struct Download {
    pub seconds: f64,
    pub goodput_mbps: f64,
    pub bytes: u64,
    pub sha256_ok: bool,
    /// The longest time between two reads after the first byte arrived.
    pub longest_gap_s: f64,
    pub series_100ms_mbps: Vec<f64>,
    /// Client-side bytes received per radio during the download.
    pub per_path_bytes: std::collections::BTreeMap<String, u64>,
    /// What the emulator's monitors saw during this download (docs/testbed.md).
    pub fidelity: fbdt_emu::Fidelity,
}

#[derive(Debug, Serialize)]
pub struct DirectDownload {
    pub path: String,
    #[serde(flatten)]
    pub download: Download,
}

/// curl apps: `fbdt perf` downloading as many bytes over the same radios, in the same run,
/// right after the proxied download — what FBDT moves without the proxy, the application's
/// TCP connections and the HTTP server.
#[derive(Debug, Serialize)]
pub struct PerfRun {
    pub seconds: f64,
    pub goodput_mbps: f64,
    pub bytes: u64,
    pub per_path_bytes: std::collections::BTreeMap<String, u64>,
    pub fidelity: fbdt_emu::Fidelity,
}

/// `--app small` over one route: per-request times from curl's `-w`.
#[derive(Debug, Serialize)]
pub struct SmallRequests {
    /// `proxy`, or the radio used alone.
    pub route: String,
    pub requests: usize,
    pub total_s: f64,
    pub request_median_ms: f64,
    /// Time to first byte (curl's time_starttransfer), median.
    pub ttfb_median_ms: f64,
    /// Every response had the served bytes.
    pub content_ok: bool,
}

/// A browser or player run through the proxy.
#[derive(Debug, Serialize)]
pub struct ClientRun {
    pub program: String,
    /// Wall time of the program, start-up included.
    pub seconds: f64,
    /// What it got equals what was served (every script ran / the decoded frames' MD5).
    pub content_ok: bool,
    pub detail: String,
    /// Client-side bytes received per radio during the run: both radios carried it, so it
    /// went through the proxy (a direct connection would take one).
    pub per_path_bytes: std::collections::BTreeMap<String, u64>,
    pub fidelity: fbdt_emu::Fidelity,
}

/// What a program run through the proxy printed, and how it went.
struct Ran {
    stdout: String,
    seconds: f64,
    per_path_bytes: std::collections::BTreeMap<String, u64>,
    fidelity: fbdt_emu::Fidelity,
}

#[derive(Debug, Serialize)]
pub struct AppReport {
    pub scenario: String,
    pub app: App,
    pub scale: f64,
    pub encryption: &'static str,
    pub file_bytes: u64,
    /// curl apps: the download through the proxy.
    pub proxy: Option<Download>,
    /// curl apps: the same over each radio alone.
    pub direct: Vec<DirectDownload>,
    /// chromium / ffmpeg: what the application did through the proxy.
    pub client: Option<ClientRun>,
    /// small: through the proxy first, then each radio alone.
    pub small: Vec<SmallRequests>,
    /// small: proxy time per request ÷ the best radio's alone (issue 16 asks ≤ 1.2).
    pub small_proxy_over_best_direct: Option<f64>,
    /// Proxy goodput ÷ the best radio's alone.
    pub proxy_over_best_direct: Option<f64>,
    /// curl apps: `fbdt perf` over the same radios right after the proxied download.
    pub perf: Option<PerfRun>,
    /// Proxy goodput ÷ `fbdt perf`'s (issue 16 asks ≥ 0.95).
    pub proxy_over_perf: Option<f64>,
    pub meta: fbdt_harness::results::Meta,
}

/// `fbdt proxy --nft-install` installs its table right after it listens.
fn wait_for_nft_table(tb: &Testbed, children: &mut Children, logs: &Path) -> Result<()> {
    let start = Instant::now();
    loop {
        let listed = tb
            .command(Side::Client, "nft")
            .args(["list", "table", "inet", "fbdt_proxy"])
            .output()
            .context("running nft (is nftables installed?)")?;
        if listed.status.success() {
            return Ok(());
        }
        children.check(logs)?;
        if start.elapsed() > READY_LIMIT {
            bail!("fbdt proxy --nft-install installed no table within {READY_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `fbdt perf` in the client namespace: a download of `bytes` over every radio from the
/// perf server, with the proxy's security options.
fn perf_download(
    tb: &Testbed,
    fbdt: &Path,
    paths: &[fbdt_emu::PathInfo],
    bytes: u64,
    security: &[String],
) -> Result<PerfRun> {
    let before = tb.path_counters()?;
    tb.play()?;
    let mut cmd = tb.command(Side::Client, &fbdt.display().to_string());
    cmd.args(["perf", "--json", "--bytes", &bytes.to_string()]);
    for p in paths {
        cmd.args(["--path", &format!("{}={}:{PERF_PORT}", p.client_ip, p.server_ip)]);
    }
    let out = cmd.args(security).output().context("running fbdt perf")?;
    if !out.status.success() {
        bail!(
            "fbdt perf: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let after = tb.path_counters()?;
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).context("reading fbdt perf's JSON")?;
    let r = &doc["results"][0];
    let (Some(goodput_mbps), Some(got), Some(seconds)) = (
        r["goodput_mbps"].as_f64(),
        r["bytes_delivered"].as_u64(),
        doc["duration_s"].as_f64(),
    ) else {
        bail!("fbdt perf's JSON lacks goodput_mbps, bytes_delivered or duration_s");
    };
    if got != bytes {
        bail!("fbdt perf delivered {got} bytes, asked for {bytes}");
    }
    Ok(PerfRun {
        seconds,
        goodput_mbps,
        bytes: got,
        per_path_bytes: received(&before, &after),
        fidelity: tb.fidelity(),
    })
}

/// Runs curl in the client namespace, reading its output as it arrives.
fn fetch(tb: &Testbed, curl_args: &[String], expected: &[u8; 32], bar: &ProgressBar) -> Result<Download> {
    let before = tb.path_counters()?;
    tb.play()?;
    let mut cmd = tb.command(Side::Client, "curl");
    cmd.args(["-sS", "--fail", "-o", "-"]).args(curl_args);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting curl (is it installed?)")?;
    let start = Instant::now();
    let mut out = child.stdout.take().expect("piped");
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let (mut bytes, mut reads) = (0u64, Vec::new());
    loop {
        let n = out.read(&mut buf).context("reading curl's output")?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        bytes += n as u64;
        reads.push((start.elapsed().as_secs_f64(), bytes));
        bar.set_position(bytes);
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("curl {}: {status}: {}", curl_args.join(" "), err.trim());
    }
    let after = tb.path_counters()?;
    let longest_gap_s = reads.windows(2).map(|w| w[1].0 - w[0].0).fold(0.0, f64::max);
    let bins = (seconds / 0.1).ceil() as usize;
    let mut per_bin = vec![0u64; bins.max(1)];
    let mut last = 0;
    for &(t, b) in &reads {
        let i = ((t / 0.1) as usize).min(per_bin.len() - 1);
        per_bin[i] += b - last;
        last = b;
    }
    Ok(Download {
        seconds,
        goodput_mbps: bytes as f64 * 8.0 / seconds.max(1e-9) / 1e6,
        bytes,
        sha256_ok: <[u8; 32]>::from(hasher.finalize()) == *expected,
        longest_gap_s,
        series_100ms_mbps: per_bin.iter().map(|&b| b as f64 * 8.0 / 0.1 / 1e6).collect(),
        per_path_bytes: received(&before, &after),
        fidelity: tb.fidelity(),
    })
}

fn say(what: &str, d: &Download) {
    eprintln!(
        "{what}: {:.1} Mbit/s, {:.2} s, longest gap {:.2} s, content {}{}",
        d.goodput_mbps,
        d.seconds,
        d.longest_gap_s,
        if d.sha256_ok { "intact" } else { "CORRUPT" },
        if d.fidelity.faithful {
            String::new()
        } else {
            format!(" — UNFAITHFUL: {}", d.fidelity.reasons.join("; "))
        }
    );
}

/// Writes the Chromium page: `PAGE_SCRIPTS` scripts of `bytes` in all (padding in comments),
/// and an onload handler that writes how many of them ran into the page.
fn write_page(www: &Path, bytes: u64) -> Result<()> {
    let each = (bytes / PAGE_SCRIPTS as u64).max(64) as usize;
    let mut html = String::from("<!DOCTYPE html><html><head><title>fbdt-lab app</title>");
    for i in 0..PAGE_SCRIPTS {
        let code = "window.parts=(window.parts||0)+1;\n";
        let pad = each.saturating_sub(code.len() + 6);
        std::fs::write(
            www.join(format!("part-{i}.js")),
            format!("{code}/*{}*/\n", "x".repeat(pad)),
        )?;
        html.push_str(&format!("<script src=\"part-{i}.js\"></script>"));
    }
    html.push_str(
        "</head><body><p id=\"ran\">none</p><script>window.onload=function(){\
         document.getElementById('ran').textContent='scripts '+(window.parts||0)}</script></body></html>",
    );
    std::fs::write(www.join("index.html"), html)?;
    Ok(())
}

/// Runs `cmd` (already in the client namespace) to the end.
fn timed_output(tb: &Testbed, mut cmd: Command, what: &str) -> Result<Ran> {
    let before = tb.path_counters()?;
    tb.play()?;
    let start = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {what} (is it installed?)"))?;
    let seconds = start.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        bail!("{what}: {}: {}", out.status, last.join(" | "));
    }
    Ok(Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        seconds,
        per_path_bytes: received(&before, &tb.path_counters()?),
        fidelity: tb.fidelity(),
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// `SMALL_REQUESTS` sequential GETs of `url` in one curl run with `via` (proxy or interface
/// options); each response goes to its own file, checked against `expected`.
fn small_requests(
    tb: &Testbed,
    route: &str,
    via: &[String],
    url: &str,
    expected: &[u8],
    work: &Path,
) -> Result<SmallRequests> {
    let out_dir = work.join(format!("small-{route}"));
    std::fs::create_dir_all(&out_dir)?;
    let mut cmd = tb.command(Side::Client, "curl");
    cmd.args(["-sS", "--fail", "-w", "%{time_starttransfer} %{time_total}\\n"])
        .args(via);
    for i in 0..SMALL_REQUESTS {
        cmd.arg("-o").arg(out_dir.join(i.to_string())).arg(url);
    }
    let run = timed_output(tb, cmd, "curl")?;
    let (mut ttfb, mut total) = (Vec::new(), Vec::new());
    for line in run.stdout.lines() {
        let mut f = line.split_whitespace().map(|x| x.parse::<f64>());
        if let (Some(Ok(a)), Some(Ok(b))) = (f.next(), f.next()) {
            ttfb.push(a * 1e3);
            total.push(b * 1e3);
        }
    }
    let content_ok = total.len() == SMALL_REQUESTS
        && (0..SMALL_REQUESTS).all(|i| std::fs::read(out_dir.join(i.to_string())).is_ok_and(|b| b == expected));
    Ok(SmallRequests {
        route: route.into(),
        requests: total.len(),
        total_s: run.seconds,
        request_median_ms: median(&mut total),
        ttfb_median_ms: median(&mut ttfb),
        content_ok,
    })
}

fn chromium(tb: &Testbed, proxy: SocketAddr, url: &str, work: &Path) -> Result<ClientRun> {
    let mut cmd = tb.command(Side::Client, "chromium");
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"])
        .arg(format!("--proxy-server=socks5://{proxy}"))
        .arg(format!("--user-data-dir={}", work.join("chromium").display()))
        .args(["--dump-dom", url]);
    let run = timed_output(tb, cmd, "chromium")?;
    let want = format!("scripts {PAGE_SCRIPTS}");
    let ran = run
        .stdout
        .split("id=\"ran\">")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .unwrap_or("no result in the page")
        .to_string();
    Ok(ClientRun {
        program: "chromium".into(),
        seconds: run.seconds,
        content_ok: ran == want,
        detail: format!("the page says \"{ran}\" (all {PAGE_SCRIPTS} scripts: \"{want}\")"),
        per_path_bytes: run.per_path_bytes,
        fidelity: run.fidelity,
    })
}

/// The decoded frames' MD5 as ffmpeg prints it (`MD5=…`).
fn frames_md5(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("MD5=").map(str::to_string))
}

fn ffmpeg(tb: &Testbed, proxy: SocketAddr, url: &str, local: &Path) -> Result<ClientRun> {
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-i"])
        .arg(local)
        .args(["-f", "md5", "-"])
        .output()
        .context("running ffmpeg (is it installed?)")?;
    let want = frames_md5(&String::from_utf8_lossy(&out.stdout))
        .ok_or_else(|| anyhow!("ffmpeg gave no MD5 of the local video"))?;
    let mut cmd = tb.command(Side::Client, "ffmpeg");
    cmd.args([
        "-v",
        "error",
        "-http_proxy",
        &format!("http://{proxy}"),
        "-i",
        url,
        "-f",
        "md5",
        "-",
    ]);
    let run = timed_output(tb, cmd, "ffmpeg")?;
    let got = frames_md5(&run.stdout).unwrap_or_default();
    Ok(ClientRun {
        program: "ffmpeg".into(),
        seconds: run.seconds,
        content_ok: got == want,
        detail: format!("decoded frames MD5 {got}, served video's {want}"),
        per_path_bytes: run.per_path_bytes,
        fidelity: run.fidelity,
    })
}

/// The 1 KiB body of `--app small`.
fn small_content() -> Vec<u8> {
    (0..SMALL_BYTES).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A seeded-content MPEG-TS video of about `bytes` (ffmpeg's test pattern; the bit rate
/// sets the size), for `--app ffmpeg`.
fn write_video(path: &Path, bytes: u64) -> Result<()> {
    let secs = 10u64;
    let kbits = (bytes * 8 / secs / 1000).clamp(100, 200_000);
    let out = Command::new("ffmpeg")
        .args(["-v", "error", "-y", "-f", "lavfi", "-i"])
        .arg(format!("testsrc=duration={secs}:size=1280x720:rate=25"))
        .args(["-c:v", "mpeg4", "-b:v", &format!("{kbits}k"), "-f", "mpegts"])
        .arg(path)
        .output()
        .context("running ffmpeg to make the test video (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "ffmpeg could not make the test video: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub fn run(args: AppArgs, testbed: &fbdt_emu::TestbedOptions) -> Result<()> {
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("fbdt-lab app needs root to build the emulated testbed: {why}");
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be in (0, 600], got {}", args.seconds);
    }
    let fbdt = fbdt_binary(args.fbdt.as_deref())?;
    let scenario = Scenario::load(&args.scenario)?;
    let bar = fbdt_harness::progress::bar(0);
    let (scale, _) = fbdt_harness::emu::scale_of(&scenario, args.scale, testbed, &bar)?;
    let schedule = scenario.schedule(scale)?;
    let spec = fbdt_emu::spec_from_schedule(&scenario, &schedule)?;
    let capacity_mbps = spec.capacity_mbps();
    let file_bytes = ((capacity_mbps * 1e6 / 8.0 * args.seconds) as u64).clamp(1 << 20, MAX_FILE);

    let work = tempfile::tempdir().context("a working directory")?;
    let dir = work.path();
    let www = dir.join("www");
    std::fs::create_dir(&www)?;
    let mut content = vec![0u8; file_bytes as usize];
    rand_chacha::ChaCha8Rng::seed_from_u64(scenario.seed).fill_bytes(&mut content);
    std::fs::write(www.join("file"), &content)?;
    let expected: [u8; 32] = Sha256::digest(&content).into();
    drop(content);
    match args.app {
        App::Chromium => write_page(&www, file_bytes.min(MAX_PAGE_BYTES))?,
        App::Ffmpeg => write_video(&www.join("video.ts"), file_bytes)?,
        App::Small => std::fs::write(www.join("small"), small_content())?,
        App::CurlSocks | App::CurlHttp | App::Transparent => {}
    }

    let mut tb = Testbed::start(&spec, testbed).context("starting the testbed")?;
    let paths = tb.paths().to_vec();
    let server0 = paths[0].server_ip;
    let client0 = paths[0].client_ip;
    let mut children = Children(Vec::new());
    let mut http = tb.command(Side::Server, "python3");
    http.args([
        "-m",
        "http.server",
        &HTTP_PORT.to_string(),
        "--bind",
        "0.0.0.0",
        "--directory",
    ])
    .arg(&www);
    children.spawn("http", http, &dir.join("http.log"))?;

    let (security, serve_security) = security_args(dir, args.plaintext)?;
    if args.app == App::Transparent {
        // The client needs a route for the SYN to exist at all; the redirect takes it before
        // it leaves.
        let ip = |side, a: &[&str]| -> Result<()> {
            let out = tb.command(side, "ip").args(a).output().context("running ip")?;
            if !out.status.success() {
                bail!("ip {}: {}", a.join(" "), String::from_utf8_lossy(&out.stderr).trim());
            }
            Ok(())
        };
        ip(Side::Server, &["addr", "add", &format!("{ORIGIN}/32"), "dev", "lo"])?;
        ip(
            Side::Client,
            &["route", "add", &format!("{ORIGIN}/32"), "dev", &paths[0].client_if],
        )?;
    }
    let mut serve = tb.command(Side::Server, &fbdt.display().to_string());
    serve
        .args(["serve", "--listen", &format!("0.0.0.0:{FBDT_PORT}")])
        .args(["--allow", &format!("{server0}:{HTTP_PORT}")])
        .args(["--allow", &format!("{ORIGIN}:{HTTP_PORT}")])
        .args(&serve_security);
    children.spawn("serve", serve, &dir.join("serve.log"))?;
    let with_perf = matches!(args.app, App::CurlSocks | App::CurlHttp);
    if with_perf {
        let mut perf = tb.command(Side::Server, &fbdt.display().to_string());
        perf.args(["perf", "--server", "--listen", &format!("0.0.0.0:{PERF_PORT}")])
            // `fbdt perf --server` has no allow-list, so no --allow-anyone either.
            .args(serve_security.iter().filter(|a| *a != "--allow-anyone"));
        children.spawn("perf", perf, &dir.join("perf.log"))?;
        wait_listening(
            &tb,
            Side::Server,
            SocketAddr::from((server0, PERF_PORT)),
            &mut children,
            dir,
        )?;
    }
    wait_listening(
        &tb,
        Side::Server,
        SocketAddr::from((server0, HTTP_PORT)),
        &mut children,
        dir,
    )?;
    wait_listening(
        &tb,
        Side::Server,
        SocketAddr::from((server0, FBDT_PORT)),
        &mut children,
        dir,
    )?;

    // nft's redirect of this machine's own connections goes to the loopback address.
    let proxy_ip = if args.app == App::Transparent {
        Ipv4Addr::LOCALHOST
    } else {
        client0
    };
    let proxy_addr = SocketAddr::from((proxy_ip, PROXY_PORT));
    let mut proxy = tb.command(Side::Client, &fbdt.display().to_string());
    proxy.args(["proxy", "--listen", &proxy_addr.to_string()]);
    if args.app == App::Transparent {
        proxy.args(["--transparent", "--nft-install"]);
    }
    for p in &paths {
        proxy.args(["--path", &format!("{}={}:{FBDT_PORT}", p.client_ip, p.server_ip)]);
    }
    proxy.arg("--control").arg(dir.join("proxy.sock")).args(&security);
    children.spawn("proxy", proxy, &dir.join("proxy.log"))?;
    wait_listening(&tb, Side::Client, proxy_addr, &mut children, dir)?;
    if args.app == App::Transparent {
        wait_for_nft_table(&tb, &mut children, dir)?;
    }

    let url = |ip: Ipv4Addr| format!("http://{ip}:{HTTP_PORT}/file");
    let (mut proxy_dl, mut direct, mut client, mut small, mut perf) = (None, Vec::new(), None, Vec::new(), None);
    match args.app {
        App::CurlSocks | App::CurlHttp => {
            let via = match args.app {
                App::CurlHttp => vec!["-x".to_string(), format!("http://{proxy_addr}")],
                _ => vec!["--socks5-hostname".to_string(), proxy_addr.to_string()],
            };
            bar.set_length(file_bytes);
            let d = fetch(&tb, &[via, vec![url(server0)]].concat(), &expected, &bar)
                .and_then(|d| children.check(dir).map(|_| d))
                .context("the download through the proxy")?;
            say(&format!("through fbdt proxy ({:?})", args.app), &d);
            proxy_dl = Some(d);
            bar.set_message("fbdt perf over the same radios");
            let p = perf_download(&tb, &fbdt, &paths, file_bytes, &security)
                .and_then(|p| children.check(dir).map(|_| p))
                .context("fbdt perf over the same radios")?;
            eprintln!(
                "fbdt perf over the same radios: {:.1} Mbit/s in {:.2} s{}",
                p.goodput_mbps,
                p.seconds,
                if p.fidelity.faithful { "" } else { " (UNFAITHFUL)" }
            );
            perf = Some(p);
            bar.set_message("");
            for p in &paths {
                bar.set_position(0);
                let curl = vec!["--interface".to_string(), p.client_ip.to_string(), url(p.server_ip)];
                let d = fetch(&tb, &curl, &expected, &bar)
                    .with_context(|| format!("the direct download over {}", p.name))?;
                say(&format!("{} alone", p.name), &d);
                direct.push(DirectDownload {
                    path: p.name.clone(),
                    download: d,
                });
            }
        }
        App::Transparent => {
            bar.set_length(file_bytes);
            let d = fetch(&tb, &[url(ORIGIN)], &expected, &bar)
                .and_then(|d| children.check(dir).map(|_| d))
                .context("the download redirected into the proxy")?;
            say("curl with no proxy setting, redirected into fbdt proxy", &d);
            proxy_dl = Some(d);
        }
        App::Chromium => {
            let page = format!("http://{server0}:{HTTP_PORT}/index.html");
            let c = chromium(&tb, proxy_addr, &page, dir)?;
            eprintln!("chromium through fbdt proxy: {:.2} s, {}", c.seconds, c.detail);
            client = Some(c);
        }
        App::Small => {
            let want = small_content();
            let via = vec!["--socks5-hostname".to_string(), proxy_addr.to_string()];
            let small_url = |ip| format!("http://{ip}:{HTTP_PORT}/small");
            small.push(small_requests(&tb, "proxy", &via, &small_url(server0), &want, dir)?);
            for p in &paths {
                let via = vec!["--interface".to_string(), p.client_ip.to_string()];
                small.push(small_requests(&tb, &p.name, &via, &small_url(p.server_ip), &want, dir)?);
            }
            for r in &small {
                eprintln!(
                    "{SMALL_REQUESTS} × {SMALL_BYTES} B over {}: {:.2} s, median {:.2} ms per request, first byte {:.2} ms{}",
                    r.route,
                    r.total_s,
                    r.request_median_ms,
                    r.ttfb_median_ms,
                    if r.content_ok { "" } else { ", CONTENT DIFFERS" }
                );
            }
        }
        App::Ffmpeg => {
            let video = format!("http://{server0}:{HTTP_PORT}/video.ts");
            let c = ffmpeg(&tb, proxy_addr, &video, &www.join("video.ts"))?;
            eprintln!("ffmpeg through fbdt proxy: {:.2} s, {}", c.seconds, c.detail);
            client = Some(c);
        }
    }
    children.check(dir)?;
    bar.finish_and_clear();
    drop(children);
    tb.stop();

    let best = direct.iter().map(|d| d.download.goodput_mbps).fold(0.0, f64::max);
    let proxy_over_perf = proxy_dl
        .as_ref()
        .zip(perf.as_ref())
        .filter(|(_, p)| p.goodput_mbps > 0.0)
        .map(|(d, p)| d.goodput_mbps / p.goodput_mbps);
    let report = AppReport {
        scenario: scenario.name.clone(),
        app: args.app,
        scale,
        encryption: if args.plaintext { "none" } else { "tls13" },
        file_bytes,
        proxy_over_best_direct: proxy_dl.as_ref().filter(|_| best > 0.0).map(|d| d.goodput_mbps / best),
        proxy: proxy_dl,
        direct,
        client,
        small_proxy_over_best_direct: small.first().and_then(|p| {
            let best = small[1..]
                .iter()
                .map(|d| d.request_median_ms)
                .fold(f64::INFINITY, f64::min);
            (best.is_finite() && best > 0.0).then(|| p.request_median_ms / best)
        }),
        small,
        proxy_over_perf,
        perf,
        meta: fbdt_harness::results::Meta::here(),
    };
    if let Some(r) = report.proxy_over_best_direct {
        println!("proxy ÷ best radio alone: {r:.3}");
    }
    if let Some(r) = report.proxy_over_perf {
        println!("proxy ÷ fbdt perf over the same radios: {r:.3}");
    }
    if let Some(r) = report.small_proxy_over_best_direct {
        println!("small requests, time per request through the proxy ÷ the best radio alone: {r:.3}");
    }
    if let Some(path) = &args.json {
        fbdt_harness::results::write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    let corrupt: Vec<&str> = report
        .proxy
        .iter()
        .map(|d| ("proxy", d))
        .chain(report.direct.iter().map(|d| (d.path.as_str(), &d.download)))
        .filter(|(_, d)| !d.sha256_ok || d.bytes != file_bytes)
        .map(|(n, _)| n)
        .chain(
            report
                .client
                .iter()
                .filter(|c| !c.content_ok)
                .map(|c| c.program.as_str()),
        )
        .collect();
    if !corrupt.is_empty() {
        return Err(anyhow!("content differs from what was served: {}", corrupt.join(", ")));
    }
    Ok(())
}
