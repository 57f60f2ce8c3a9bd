//! Q3b with a real player (`workload dash --backend emu --browser chromium`): dash.js (npm
//! `dashjs`, pinned) in headless Chromium plays a ladder encoded locally with ffmpeg, served
//! from the server namespace by python3's http.server and reached as in browser.rs (through
//! `fbdt proxy` → `fbdt serve` for `fbdt`, one radio for `tcp:<path>`, `mptcpize run` for
//! `mptcp`).
//!
//! The ladder: Pensieve's six rungs × `LADDER_FACTOR` × the run's scale, as the simulator's
//! player (dash.rs) sends them, in 2-s segments. ffmpeg encodes a synthetic source
//! (`testsrc2`, 256×144, VP9 in WebM — Debian's Chromium plays it in MSE) at a small real
//! rate, and every media segment is then padded to its rung's exact size with an EBML Void
//! element after its cluster (parsers skip it), and the MPD's `bandwidth` set to the rung's
//! rate: the network carries the ladder's bytes, the decoder a cheap picture. Encoded once
//! per (segments, sizes) under the user's cache directory.
//!
//! The page (dash_player.html) records, from dash.js's and the video element's events:
//! every media segment downloaded (URL → rung and number, bytes, times), the first `playing`
//! (start-up delay from `initialize`), every `waiting` → `playing` after it (stalls), and
//! `ended`. A run counts only if every segment arrived whole and playback reached the end;
//! anything else (player or element error, `--max-duration` exceeded) is an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::ProgressStyle;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::browser::{self, BrowserPlan, Http, Route, ServePlan, Traffic};
use super::dash::{qoe_lin, DashResult, CHUNK_S, LADDER_FACTOR, LADDER_MBPS, MAX_BUFFER_S};
use super::setup::Browser;
use super::setup::{Abr, Setup, WorkloadArgs};

/// The dash.js release the page runs (`.ci/run` installs it).
pub const DASHJS_VERSION: &str = "4.7.4";
/// Where `.ci/run` puts it, from the workspace root.
const DASHJS_DIR: &str = "vendor/npm/node_modules/dashjs/dist/dash.all.min.js";
/// The player page.
const PLAYER_HTML: &str = include_str!("dash_player.html");
/// The encoder's frame rate and the source's size: small, the bytes come from padding.
const FPS: u32 = 24;
const SIZE: &str = "256x144";
/// The ladder's on-disk layout version (part of the cache key).
const LAYOUT: u32 = 1;
/// How often the page's state is read.
const POLL: Duration = Duration::from_millis(250);

/// dash.all.min.js: `$FBDT_DASHJS`, else `vendor/npm/…` in this workspace.
pub fn dashjs_path() -> PathBuf {
    match std::env::var_os("FBDT_DASHJS") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(DASHJS_DIR),
    }
}

/// Bytes of one media segment of each rung at `scale`.
pub fn segment_bytes(scale: f64) -> [u64; 6] {
    LADDER_MBPS.map(|m| (m * LADDER_FACTOR * scale * 1e6 / 8.0 * CHUNK_S).round() as u64)
}

/// What the encoder aims at per rung (bit/s): a quarter of the rung's rate (VP9 overshoots
/// on the first segments), at most 1 Mbit/s (more buys nothing at 256×144).
fn encode_bps(bytes: u64) -> u64 {
    ((bytes as f64 * 8.0 / CHUNK_S / 4.0) as u64).clamp(10_000, 1_000_000)
}

/// An encoded, padded ladder on disk.
pub struct Ladder {
    pub dir: PathBuf,
    pub segments: usize,
    pub bytes: [u64; 6],
}

impl Ladder {
    fn segment(&self, rung: usize, number: usize) -> PathBuf {
        self.dir.join(format!("seg-{rung}-{number}.webm"))
    }
}

/// The cached ladder of `segments` × 2 s at `scale`, encoding it first if needed.
pub fn ladder(segments: usize, scale: f64) -> Result<Ladder> {
    let bytes = segment_bytes(scale);
    let key = format!(
        "v{LAYOUT}-{segments}x{CHUNK_S}s-{}",
        bytes.iter().map(u64::to_string).collect::<Vec<_>>().join("-")
    );
    let root = fbdt_emu::ScaleCache::default_path().with_file_name("dash-ladders");
    let dir = root.join(&key);
    let ladder = Ladder { dir, segments, bytes };
    if ladder.dir.join("manifest.mpd").is_file() {
        return Ok(ladder);
    }
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{key}-"))
        .tempdir_in(&root)
        .context("a directory for the encoder")?;
    encode(tmp.path(), &ladder)?;
    let tmp = tmp.keep();
    if let Err(e) = std::fs::rename(&tmp, &ladder.dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another run finished the same ladder first.
        if !ladder.dir.join("manifest.mpd").is_file() {
            return Err(e).with_context(|| format!("moving the ladder to {}", ladder.dir.display()));
        }
    }
    Ok(ladder)
}

/// ffmpeg → `dir` (manifest.mpd, init-R.webm, seg-R-N.webm), then padding and bandwidths.
fn encode(dir: &Path, ladder: &Ladder) -> Result<()> {
    let seconds = ladder.segments as f64 * CHUNK_S;
    let gop = (f64::from(FPS) * CHUNK_S).round() as u32;
    let mut cmd = Command::new("ffmpeg");
    cmd.current_dir(dir)
        .args(["-hide_banner", "-loglevel", "error", "-nostdin", "-f", "lavfi", "-i"])
        .arg(format!("testsrc2=s={SIZE}:r={FPS}:d={seconds}"));
    for _ in 0..ladder.bytes.len() {
        cmd.args(["-map", "0:v"]);
    }
    cmd.args([
        "-c:v",
        "libvpx-vp9",
        "-deadline",
        "realtime",
        "-cpu-used",
        "8",
        "-threads",
        "1",
        "-pix_fmt",
        "yuv420p",
        "-g",
    ])
    .arg(gop.to_string())
    .arg("-keyint_min")
    .arg(gop.to_string());
    for (r, &b) in ladder.bytes.iter().enumerate() {
        cmd.arg(format!("-b:v:{r}")).arg(encode_bps(b).to_string());
    }
    cmd.args([
        "-f",
        "dash",
        "-seg_duration",
        &CHUNK_S.to_string(),
        "-use_template",
        "1",
        "-use_timeline",
        "0",
        "-adaptation_sets",
        "id=0,streams=v",
        "-dash_segment_type",
        "webm",
        "-init_seg_name",
        "init-$RepresentationID$.webm",
        "-media_seg_name",
        "seg-$RepresentationID$-$Number$.webm",
        "manifest.mpd",
    ]);
    let out = cmd.output().context("running ffmpeg (apt-get install ffmpeg)")?;
    if !out.status.success() {
        bail!(
            "ffmpeg could not encode the ladder: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let at = |r: usize, n: usize| dir.join(format!("seg-{r}-{n}.webm"));
    for (r, &want) in ladder.bytes.iter().enumerate() {
        if at(r, ladder.segments + 1).exists() || !at(r, ladder.segments).exists() {
            bail!("ffmpeg did not cut rung {r} into {} segments", ladder.segments);
        }
        for n in 1..=ladder.segments {
            pad(&at(r, n), want)?;
        }
    }
    let mpd = dir.join("manifest.mpd");
    let text = std::fs::read_to_string(&mpd).context("ffmpeg's manifest")?;
    let bps: Vec<u64> = ladder
        .bytes
        .iter()
        .map(|&b| (b as f64 * 8.0 / CHUNK_S).round() as u64)
        .collect();
    std::fs::write(&mpd, set_bandwidths(&text, &bps)?)?;
    Ok(())
}

/// Appends an EBML Void element (ID 0xEC, 8-byte size) so that the file has `want` bytes
/// (the element's content is zeros, left sparse).
fn pad(file: &Path, want: u64) -> Result<()> {
    let have = std::fs::metadata(file)?.len();
    if have + 9 > want {
        bail!(
            "{}: {have} bytes encoded, more than its rung's {want} (+ 9 of padding) at this \
             scale; use a larger --scale",
            file.display()
        );
    }
    let body = want - have - 9;
    let mut void = vec![0xEC, 0x01];
    void.extend_from_slice(&body.to_be_bytes()[1..]);
    let mut f = std::fs::OpenOptions::new().append(true).open(file)?;
    std::io::Write::write_all(&mut f, &void)?;
    // The Void's zero bytes as a hole: the cache holds hundreds of MB of ladder at large
    // scales, on disk only the encoded picture.
    f.set_len(want)?;
    Ok(())
}

/// The MPD with `bandwidth` of `<Representation id="r"` set to `bps[r]`.
fn set_bandwidths(mpd: &str, bps: &[u64]) -> Result<String> {
    let mut out = mpd.to_string();
    for (r, b) in bps.iter().enumerate() {
        let tag = format!("<Representation id=\"{r}\"");
        let start = out
            .find(&tag)
            .with_context(|| format!("no representation {r} in the MPD"))?;
        let end = start + out[start..].find('>').context("an unterminated tag in the MPD")?;
        let at = start
            + out[start..end]
                .find("bandwidth=\"")
                .with_context(|| format!("representation {r} has no bandwidth"))?
            + "bandwidth=\"".len();
        let digits = out[at..].find('"').context("an unterminated bandwidth")?;
        out.replace_range(at..at + digits, &b.to_string());
    }
    Ok(out)
}

/// The page's record (window.fbdt); times in ms of the page's clock.
#[derive(Debug, Deserialize)]
struct PageState {
    t0: Option<f64>,
    playing: Option<f64>,
    ended: Option<f64>,
    error: Option<String>,
    duration: Option<f64>,
    #[serde(rename = "currentTime")]
    current_time: f64,
    version: Option<String>,
    segments: Vec<PageSegment>,
    stalls: Vec<Stall>,
}

#[derive(Debug, Deserialize)]
struct PageSegment {
    url: String,
    bytes: Option<f64>,
    request_ms: Option<f64>,
    first_byte_ms: Option<f64>,
    end_ms: f64,
    failed: bool,
}

/// One stall after playback started (ms of the page's clock).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Stall {
    pub start_ms: f64,
    pub end_ms: f64,
}

/// One media segment as played: the last complete download of its number.
#[derive(Clone, Debug, Serialize)]
pub struct Segment {
    /// 1, 2, …
    pub number: usize,
    pub rung: usize,
    pub bytes: u64,
    /// ms from the player's start.
    pub request_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    pub end_ms: f64,
}

/// One playback (scheme × seed).
#[derive(Debug, Serialize)]
pub struct Playback {
    pub seed: u64,
    /// QoE_lin summed over segments, and per segment (Pensieve's average).
    pub qoe_lin: f64,
    pub qoe_lin_per_chunk: f64,
    pub rebuffer_s: f64,
    /// Stalled / (stalled + played) after start-up.
    pub rebuffer_ratio: f64,
    /// `initialize` to the first `playing`.
    pub startup_s: f64,
    /// Mean rung bitrate as sent (Mbit/s).
    pub bitrate_mbps: f64,
    pub switches: usize,
    pub rungs: Vec<usize>,
    /// Downloads dash.js abandoned or repeated (a segment fetched again at another rung).
    pub extra_downloads: usize,
    pub segments: Vec<Segment>,
    pub stalls: Vec<Stall>,
    pub per_path_bytes: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mptcp_connections: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct DashBrowserResult {
    /// The scheme and the means over seeds, as the simulator's player reports them.
    #[serde(flatten)]
    pub summary: DashResult,
    pub browser: Browser,
    pub abr: Abr,
    pub dashjs: String,
    pub segments: usize,
    /// Bytes of one segment per rung.
    pub segment_bytes: [u64; 6],
    pub playbacks: Vec<Playback>,
}

/// `seg-R-N.webm` at the end of a URL.
fn rung_and_number(url: &str) -> Option<(usize, usize)> {
    let name = url.rsplit('/').next()?.strip_prefix("seg-")?.strip_suffix(".webm")?;
    let (r, n) = name.split_once('-')?;
    Some((r.parse().ok()?, n.parse().ok()?))
}

/// The metrics of a finished playback; an error if a segment is missing or short or the
/// video did not reach its end.
fn judge(state: &PageState, ladder: &Ladder, scale: f64, seed: u64) -> Result<Playback> {
    let t0 = state.t0.context("the player never started")?;
    let playing = state.playing.context("playback never started")?;
    let video_s = ladder.segments as f64 * CHUNK_S;
    if state.ended.is_none() || state.current_time < video_s - 0.5 {
        bail!(
            "playback stopped at {:.1} s of {video_s} s (duration {:?})",
            state.current_time,
            state.duration
        );
    }
    let mut last: BTreeMap<usize, Segment> = BTreeMap::new();
    let mut downloads = 0;
    for s in state.segments.iter().filter(|s| !s.failed) {
        let (rung, number) =
            rung_and_number(&s.url).with_context(|| format!("a segment URL of another shape: {}", s.url))?;
        if rung >= ladder.bytes.len() || number == 0 || number > ladder.segments {
            bail!("the player asked for {}, not in the ladder", s.url);
        }
        let bytes = s.bytes.unwrap_or(0.0) as u64;
        let want = std::fs::metadata(ladder.segment(rung, number))?.len();
        if bytes != want {
            bail!("segment {number} at rung {rung}: {bytes} bytes arrived, {want} served");
        }
        downloads += 1;
        last.insert(
            number,
            Segment {
                number,
                rung,
                bytes,
                request_ms: s.request_ms.map(|t| t - t0),
                first_byte_ms: s.first_byte_ms.map(|t| t - t0),
                end_ms: s.end_ms - t0,
            },
        );
    }
    let missing: Vec<usize> = (1..=ladder.segments).filter(|n| !last.contains_key(n)).collect();
    if !missing.is_empty() {
        bail!("segments {missing:?} never arrived whole");
    }
    let segments: Vec<Segment> = last.into_values().collect();
    let rungs: Vec<usize> = segments.iter().map(|s| s.rung).collect();
    let rebuffer_s = state.stalls.iter().fold(0.0, |a, s| a + (s.end_ms - s.start_ms) / 1e3);
    let qoe = qoe_lin(&rungs, rebuffer_s);
    Ok(Playback {
        seed,
        qoe_lin: qoe,
        qoe_lin_per_chunk: qoe / rungs.len() as f64,
        rebuffer_s,
        rebuffer_ratio: rebuffer_s / (rebuffer_s + video_s),
        startup_s: (playing - t0) / 1e3,
        bitrate_mbps: rungs
            .iter()
            .map(|&r| LADDER_MBPS[r] * LADDER_FACTOR * scale)
            .sum::<f64>()
            / rungs.len() as f64,
        switches: rungs.windows(2).filter(|w| w[0] != w[1]).count(),
        extra_downloads: downloads - rungs.len(),
        rungs,
        segments,
        stalls: state.stalls.clone(),
        per_path_bytes: BTreeMap::new(),
        mptcp_connections: None,
    })
}

/// Reads the page's record.
fn state(cdp: &mut browser::Cdp, session: &str) -> Result<PageState> {
    let v = cdp.call(
        Some(session),
        "Runtime.evaluate",
        json!({ "expression": "JSON.stringify(window.fbdt)", "returnByValue": true }),
    )?;
    let text = v["result"]["value"].as_str().context("the player page has no record")?;
    serde_json::from_str(text).context("the player's record")
}

/// One playback by a fresh browser on the running servers.
fn play(
    browser_plan: &BrowserPlan,
    origin: &str,
    abr: Abr,
    ladder: &Ladder,
    limit: Duration,
) -> Result<(PageState, BTreeMap<String, u64>, Option<u64>)> {
    browser::with_browser(browser_plan, 0, |cdp, session| {
        let traffic = Traffic::start(browser_plan.tb, browser_plan.route)?;
        let until = Instant::now() + limit;
        cdp.open(session, &format!("{origin}/index.html"), until, limit)?;
        let call = format!("fbdtStart('v/manifest.mpd', '{}', {MAX_BUFFER_S})", abr.strategy());
        let started = cdp.call(
            Some(session),
            "Runtime.evaluate",
            json!({ "expression": call, "returnByValue": true }),
        )?;
        if let Some(e) = started.get("exceptionDetails") {
            bail!("starting dash.js: {e}");
        }
        let st = loop {
            std::thread::sleep(POLL);
            let st = state(cdp, session)?;
            if let Some(e) = &st.error {
                bail!("the player failed at {:.1} s of video: {e}", st.current_time);
            }
            if st.ended.is_some() {
                break st;
            }
            if Instant::now() > until {
                bail!(
                    "playback did not end within --max-duration {limit:?}: at {:.1} of {} s, {} \
                     segments downloaded, {} stalls",
                    st.current_time,
                    ladder.segments as f64 * CHUNK_S,
                    st.segments.len(),
                    st.stalls.len()
                );
            }
        };
        let (per_path, mptcp) = traffic.end(browser_plan.tb)?;
        Ok((st, per_path, mptcp))
    })
}

/// `workload dash --backend emu --browser chromium`.
pub fn run(setup: &Setup, args: &WorkloadArgs, browser: Browser) -> Result<Vec<DashBrowserResult>> {
    let Browser::Chromium = browser;
    let abr = args.abr.unwrap_or(Abr::Bola);
    let video_s = setup.video_s(args, 2.0 * CHUNK_S)?;
    let segments = (video_s / CHUNK_S).floor() as usize;
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("--browser chromium needs root to build the emulated testbed: {why}");
    }
    for program in ["chromium", "python3", "ffmpeg"] {
        if !browser::on_path(program) {
            bail!("dash --browser chromium needs `{program}` (not found in PATH)");
        }
    }
    let dashjs = dashjs_path();
    if !dashjs.is_file() {
        bail!(
            "dash.js not found at {}: install it with `npm install --prefix vendor/npm dashjs@{DASHJS_VERSION}` \
             in the workspace (as .ci/run does) or point FBDT_DASHJS at dash.all.min.js",
            dashjs.display()
        );
    }
    let routes: Vec<Route> = setup
        .schemes
        .iter()
        .map(|s| browser::route(s, setup))
        .collect::<Result<_>>()?;
    if routes.contains(&Route::Mptcp) && !browser::on_path("mptcpize") {
        bail!("the mptcp scheme runs the browser under `mptcpize run`: install it (apt-get install mptcpd)");
    }
    let fbdt = if routes.iter().any(Route::is_fbdt) {
        Some(fbdt_harness::process::fbdt_binary(None)?)
    } else {
        None
    };
    let ladder = ladder(segments, setup.scale)?;
    let limit = Duration::from_secs_f64(args.max_duration);
    let bar = fbdt_harness::progress::bar((setup.schemes.len() * setup.seeds.len()) as u64);
    bar.set_style(
        ProgressStyle::with_template("dash (chromium) [{bar:30}] {pos}/{len} playbacks, ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let mut version = None;
    let mut results = Vec::new();
    for (scheme, route) in setup.schemes.iter().zip(&routes) {
        let mut playbacks = Vec::new();
        for &seed in &setup.seeds {
            bar.set_message(format!("{scheme}, seed {seed}"));
            let work = tempfile::tempdir().context("a working directory")?;
            let dir = work.path();
            let www = dir.join("www");
            std::fs::create_dir_all(&www)?;
            std::fs::write(www.join("index.html"), PLAYER_HTML)?;
            std::fs::copy(&dashjs, www.join("dash.all.min.js"))
                .with_context(|| format!("copying {}", dashjs.display()))?;
            std::os::unix::fs::symlink(&ladder.dir, www.join("v"))?;
            let serve = ServePlan {
                versions: &[Http::H1],
                fbdt: fbdt.as_deref(),
                identity: None,
                www: &www,
                dir,
            };
            let ran = browser::on_testbed(setup, scheme, seed, |tb, children| {
                let mut srv = browser::start_servers(tb, route, &serve, children)?;
                let plan = BrowserPlan {
                    tb,
                    route,
                    proxy: srv.proxy,
                    work: dir,
                    extra: &["--autoplay-policy=no-user-gesture-required".to_string()],
                };
                let origin = srv.h1.clone().expect("HTTP/1.1 started");
                let played = play(&plan, &origin, abr, &ladder, limit);
                let stopped = srv.stop();
                children.check(dir)?;
                played.and_then(|p| stopped.map(|_| p))
            });
            let (st, per_path, mptcp) = match ran {
                Ok(r) => r,
                Err(e) => {
                    bar.finish_and_clear();
                    return Err(e);
                }
            };
            if mptcp == Some(0) {
                bar.finish_and_clear();
                bail!("scheme {scheme}, seed {seed}: the browser opened no MPTCP connection (mptcpize had no effect)");
            }
            version = version.or(st.version.clone());
            let mut p = judge(&st, &ladder, setup.scale, seed)
                .with_context(|| format!("scheme {scheme}, seed {seed}"))
                .inspect_err(|_| bar.finish_and_clear())?;
            p.per_path_bytes = per_path;
            p.mptcp_connections = mptcp;
            playbacks.push(p);
            bar.inc(1);
        }
        let n = playbacks.len() as f64;
        let mean = |f: &dyn Fn(&Playback) -> f64| playbacks.iter().map(f).sum::<f64>() / n;
        results.push(DashBrowserResult {
            summary: DashResult {
                scheme: scheme.clone(),
                qoe_lin: mean(&|p| p.qoe_lin),
                qoe_lin_per_chunk: mean(&|p| p.qoe_lin_per_chunk),
                rebuffer_ratio: mean(&|p| p.rebuffer_ratio),
                rebuffer_s: mean(&|p| p.rebuffer_s),
                startup_s: mean(&|p| p.startup_s),
                bitrate_mbps: mean(&|p| p.bitrate_mbps),
                switches: mean(&|p| p.switches as f64),
            },
            browser,
            abr,
            dashjs: String::new(),
            segments,
            segment_bytes: ladder.bytes,
            playbacks,
        });
    }
    bar.finish_and_clear();
    let version = version.unwrap_or_default();
    if version != DASHJS_VERSION {
        eprintln!("note: the page ran dash.js {version}, not the pinned {DASHJS_VERSION} (FBDT_DASHJS?)");
    }
    for r in &mut results {
        r.dashjs.clone_from(&version);
    }
    println!(
        "dash.js {version} ({abr:?}) in Chromium, {segments} × {CHUNK_S}-s segments of {:.1} … {:.1} Mbit/s, \
         scenario {} (scale {}, {} seeds)",
        ladder.bytes[0] as f64 * 8.0 / CHUNK_S / 1e6,
        ladder.bytes[5] as f64 * 8.0 / CHUNK_S / 1e6,
        setup.scenario.name,
        setup.scale,
        setup.seeds.len()
    );
    super::dash::print_table(results.iter().map(|r| &r.summary));
    Ok(results)
}

#[cfg(test)]
mod tests;
