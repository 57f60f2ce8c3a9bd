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

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use fbdt_emu::{Side, Testbed};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::metrics::{summarise, Summary};
use super::setup::{Browser, Setup, WorkloadArgs};
use super::web::{generate, page, PageSpec};
use fbdt_harness::process::Children;
use fbdt_harness::process::{FBDT_PORT, HTTP_PORT, PROXY_PORT};

/// The paper's gap between page loads.
const GAP: Duration = Duration::from_secs(1);
/// Longest wait for one DevTools answer (the browser is busy at most with one page).
const CALL_LIMIT: Duration = Duration::from_secs(30);
/// After the load event, how long the first contentful paint may take to be reported.
const PAINT_LIMIT: Duration = Duration::from_secs(5);
/// How long the browser may take to close before its process group is killed.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
/// The smallest PNG this file writes: signature 8 + IHDR 25 + IDAT 25 + padding chunk 12
/// + IEND 12 bytes. Smaller objects become stylesheets.
const PNG_MIN: u64 = 82;
/// A script that counts itself when it runs; padded to its size in a comment.
const SCRIPT_CODE: &str = "window.fbdtRan=(window.fbdtRan||0)+1;";

/// How a scheme reaches the server.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Route {
    /// Through `fbdt proxy` (SOCKS5) and `fbdt serve`.
    Fbdt,
    /// Straight to this path's server address: its connected route takes that radio.
    Tcp(usize),
    /// Browser and server under `mptcpize run`; subflows by the testbed's endpoints.
    Mptcp,
}

/// The HTTP version a page is served with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Http {
    /// python3's http.server, plain HTTP/1.1 (Chromium opens up to six connections).
    H1,
    /// hyper's HTTP/2 over TLS (h2.rs): one connection.
    H2,
}

impl Http {
    fn parse(v: &str) -> Result<Self> {
        match v.trim() {
            "1.1" => Ok(Http::H1),
            "2" => Ok(Http::H2),
            other => bail!("--http `{other}`: expected 1.1 or 2"),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Http::H1 => "1.1",
            Http::H2 => "2",
        }
    }

    /// What Navigation/Resource Timing's `nextHopProtocol` must say.
    fn alpn(self) -> &'static str {
        match self {
            Http::H1 => "http/1.1",
            Http::H2 => "h2",
        }
    }
}

/// The page server's port for HTTP/2 (TLS).
const H2_PORT: u16 = 8443;

pub(super) fn route(scheme: &str, setup: &Setup) -> Result<Route> {
    if scheme == "fbdt" {
        return Ok(Route::Fbdt);
    }
    if scheme == "mptcp" {
        return Ok(Route::Mptcp);
    }
    if let Some(name) = scheme.strip_prefix("tcp:") {
        if let Some(i) = setup.scenario.paths.iter().position(|p| p.name == name) {
            return Ok(Route::Tcp(i));
        }
    }
    bail!(
        "--browser chromium runs the schemes fbdt (through fbdt proxy), tcp:<path> and mptcp, \
         not `{scheme}`"
    )
}

/// Is `program` an executable file in `$PATH`?
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// What kind of subresource an object is, by its place in the page (one stylesheet and two
/// scripts in every eight objects, the rest images) — objects too small for a PNG or a
/// counting script are stylesheets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectKind {
    Stylesheet,
    Script,
    Image,
}

impl ObjectKind {
    fn of(index: usize, bytes: u64) -> Self {
        let wanted = match index % 8 {
            0 => ObjectKind::Stylesheet,
            1 | 2 => ObjectKind::Script,
            _ => ObjectKind::Image,
        };
        match wanted {
            ObjectKind::Image if bytes < PNG_MIN => ObjectKind::Stylesheet,
            ObjectKind::Script if bytes < SCRIPT_CODE.len() as u64 + 4 => ObjectKind::Stylesheet,
            k => k,
        }
    }

    fn extension(self) -> &'static str {
        match self {
            ObjectKind::Stylesheet => "css",
            ObjectKind::Script => "js",
            ObjectKind::Image => "png",
        }
    }
}

/// One generated page on disk: what the browser must get.
#[derive(Debug)]
pub struct PageFiles {
    /// URL path of the HTML, from the server's root.
    pub url_path: String,
    pub html_bytes: u64,
    /// URL path of every object (from the server's root) and its size.
    pub objects: Vec<(String, u64)>,
    pub scripts: usize,
    pub images: usize,
    pub stylesheets: usize,
}

/// `n` lowercase letters from `rng` (padding that can sit in any comment or chunk).
fn letters(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rng.fill_bytes(&mut v);
    for b in &mut v {
        *b = b'a' + *b % 26;
    }
    v
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Adler-32 (RFC 1950) of a few bytes.
fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + u32::from(x)) % 65521;
        b = (b + a) % 65521;
    }
    (b << 16) | a
}

/// A valid 1×1 grey PNG of exactly `bytes` (≥ `PNG_MIN`): the pixel in an uncompressed
/// deflate block, the rest in a private ancillary chunk (`fbDt`) decoders skip.
fn png(bytes: u64, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    // width 1, height 1, depth 8, greyscale, deflate, no filter variants, no interlace
    png_chunk(&mut out, b"IHDR", &[0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0]);
    let raw = [0u8, rng.gen::<u8>()]; // filter type 0, the grey value
                                      // zlib header (0x78 0x01: 32 KiB window, check bits) + one final stored block of 2 bytes
    let mut z = vec![0x78, 0x01, 0x01, 0x02, 0x00, 0xfd, 0xff];
    z.extend_from_slice(&raw);
    z.extend_from_slice(&adler32(&raw).to_be_bytes());
    png_chunk(&mut out, b"IDAT", &z);
    let pad = (bytes as usize).saturating_sub(out.len() + 12 + 12);
    png_chunk(&mut out, b"fbDt", &letters(rng, pad));
    png_chunk(&mut out, b"IEND", &[]);
    out
}

/// A text object of exactly `bytes`: a comment of seeded letters, after the counting code
/// for a script.
fn text_object(kind: ObjectKind, bytes: u64, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let bytes = bytes as usize;
    let code = if kind == ObjectKind::Script { SCRIPT_CODE } else { "" };
    if bytes < code.len() + 4 {
        return vec![b' '; bytes];
    }
    let mut v = code.as_bytes().to_vec();
    v.extend_from_slice(b"/*");
    v.extend(letters(rng, bytes - code.len() - 4));
    v.extend_from_slice(b"*/");
    v
}

/// Writes `spec`'s page for `seed` under `root/<page>-<seed>/`: the objects of
/// [`generate`]'s sizes (× `scale`) and the HTML that asks for them all.
pub fn write_page(root: &Path, spec: &PageSpec, scale: f64, seed: u64) -> Result<PageFiles> {
    let sizes = generate(spec, scale, seed);
    write_page_of(root, spec.name, &sizes, seed)
}

fn write_page_of(root: &Path, name: &str, sizes: &[u64], seed: u64) -> Result<PageFiles> {
    let dir_name = format!("{name}-{seed}");
    let dir = root.join(&dir_name);
    std::fs::create_dir_all(dir.join("o")).with_context(|| format!("creating {}", dir.display()))?;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6272_6f77_7365_7221);
    let (mut head, mut body) = (String::new(), String::new());
    let mut files = PageFiles {
        url_path: format!("/{dir_name}/index.html"),
        html_bytes: 0,
        objects: Vec::new(),
        scripts: 0,
        images: 0,
        stylesheets: 0,
    };
    for (i, &bytes) in sizes.iter().enumerate() {
        let kind = ObjectKind::of(i, bytes);
        let file = format!("o/{i}.{}", kind.extension());
        let content = match kind {
            ObjectKind::Image => png(bytes, &mut rng),
            k => text_object(k, bytes, &mut rng),
        };
        debug_assert_eq!(content.len() as u64, bytes);
        std::fs::write(dir.join(&file), &content)?;
        match kind {
            ObjectKind::Stylesheet => {
                files.stylesheets += 1;
                head.push_str(&format!("<link rel=\"stylesheet\" href=\"{file}\">\n"));
            }
            ObjectKind::Script => {
                files.scripts += 1;
                head.push_str(&format!("<script defer src=\"{file}\"></script>\n"));
            }
            ObjectKind::Image => {
                files.images += 1;
                body.push_str(&format!(
                    "<img src=\"{file}\" width=\"32\" height=\"32\" alt=\"{i}\">\n"
                ));
            }
        }
        files.objects.push((format!("/{dir_name}/{file}"), bytes));
    }
    // The resource timing buffer holds 250 entries by default; cnn and amazon have more.
    // An inline icon keeps the browser from asking for /favicon.ico, which is no object.
    let html = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{name} (seed {seed})</title>\n\
         <link rel=\"icon\" href=\"data:,\">\n\
         <script>performance.setResourceTimingBufferSize(100000);</script>\n{head}</head>\n\
         <body><h1>{name}</h1><p>A synthetic page of {} objects (fbdt-lab, seed {seed}).</p>\n\
         {body}</body></html>\n",
        sizes.len()
    );
    files.html_bytes = html.len() as u64;
    std::fs::write(dir.join("index.html"), html)?;
    Ok(files)
}

/// A pipe whose two ends are closed on exec.
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills the two-element array with two new descriptors we now own.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One headless Chromium (under the reaping launcher) driven over `--remote-debugging-pipe`;
/// killed with its process group (the launcher's, by its PID) when dropped.
pub(super) struct Cdp {
    child: Child,
    to_browser: File,
    from_browser: Receiver<Value>,
    next_id: u64,
    /// Messages read while waiting for something else.
    pending: Vec<Value>,
}

impl Cdp {
    /// Starts `cmd` (the browser, with `--remote-debugging-pipe`) with the pipes on fds 3
    /// (commands in) and 4 (answers and events out).
    fn launch(mut cmd: Command, log: &Path) -> Result<Self> {
        let (cmd_r, cmd_w) = pipe()?;
        let (ev_r, ev_w) = pipe()?;
        let (r, w) = (cmd_r.as_raw_fd(), ev_w.as_raw_fd());
        let err = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        // SAFETY: only async-signal-safe calls (fcntl, dup2) between fork and exec. The two
        // ends are first copied to 10+ so that moving them to 3 and 4 cannot overwrite each
        // other; the copies and the originals are close-on-exec, 3 and 4 are not.
        unsafe {
            cmd.pre_exec(move || {
                let r2 = libc::fcntl(r, libc::F_DUPFD_CLOEXEC, 10);
                let w2 = libc::fcntl(w, libc::F_DUPFD_CLOEXEC, 10);
                if r2 < 0 || w2 < 0 || libc::dup2(r2, 3) < 0 || libc::dup2(w2, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .context("starting chromium")?;
        drop((cmd_r, ev_w));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = File::from(ev_r);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(reader);
            loop {
                let mut msg = Vec::new();
                match reader.read_until(0, &mut msg) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        if msg.last() == Some(&0) {
                            msg.pop();
                        }
                        if let Ok(v) = serde_json::from_slice::<Value>(&msg) {
                            if tx.send(v).is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
        Ok(Cdp {
            child,
            to_browser: File::from(cmd_w),
            from_browser: rx,
            next_id: 0,
            pending: Vec::new(),
        })
    }

    fn recv(&mut self, until: Instant, waiting_for: &str) -> Result<Value> {
        match self
            .from_browser
            .recv_timeout(until.saturating_duration_since(Instant::now()))
        {
            Ok(v) => Ok(v),
            Err(RecvTimeoutError::Timeout) => bail!("chromium: no {waiting_for} in time"),
            Err(RecvTimeoutError::Disconnected) => {
                bail!("chromium closed its DevTools pipe (waiting for {waiting_for})")
            }
        }
    }

    /// Sends one command (to the page's session, or to the browser) and waits for its result.
    pub(super) fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = Value::from(s);
        }
        let mut bytes = serde_json::to_vec(&msg)?;
        bytes.push(0);
        self.to_browser
            .write_all(&bytes)
            .with_context(|| format!("sending {method} to chromium"))?;
        let until = Instant::now() + CALL_LIMIT;
        loop {
            let v = self.recv(until, &format!("answer to {method}"))?;
            if v["id"].as_u64() == Some(id) {
                if let Some(e) = v.get("error") {
                    bail!("chromium: {method}: {e}");
                }
                return Ok(v["result"].clone());
            }
            self.pending.push(v);
        }
    }

    /// Waits for the event `method` of `session`.
    pub(super) fn event(&mut self, session: &str, method: &str, until: Instant) -> Result<Value> {
        let is = |v: &Value| v["method"] == method && v["sessionId"] == session;
        if let Some(i) = self.pending.iter().position(is) {
            return Ok(self.pending.remove(i));
        }
        loop {
            let v = self.recv(until, method)?;
            if is(&v) {
                return Ok(v);
            }
        }
    }

    /// With the network domain on and the cache off, navigates `session` to `url` and waits
    /// (until `until`) for its load event.
    pub(super) fn open(&mut self, session: &str, url: &str, until: Instant, limit: Duration) -> Result<()> {
        let s = Some(session);
        self.call(s, "Network.enable", json!({}))?;
        self.call(s, "Network.setCacheDisabled", json!({ "cacheDisabled": true }))?;
        let nav = self.call(s, "Page.navigate", json!({ "url": url }))?;
        if let Some(e) = nav.get("errorText").and_then(Value::as_str) {
            bail!("navigating to {url}: {e}");
        }
        self.event(session, "Page.loadEventFired", until)
            .with_context(|| format!("loading {url} within {limit:?}"))?;
        Ok(())
    }

    /// Asks the browser to close, then ends its whole process group.
    pub(super) fn close(mut self) {
        let _ = self.call(None, "Browser.close", json!({}));
        let until = Instant::now() + CLOSE_LIMIT;
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        // The group is the launcher's own (process_group(0)), shared by the browser and its
        // helpers: they die with it.
        // SAFETY: kill(2) on the process group we created for this child.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
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

/// Where and how one fresh browser runs.
pub(super) struct BrowserPlan<'a> {
    pub(super) tb: &'a Testbed,
    pub(super) route: &'a Route,
    /// `fbdt`: the SOCKS5 proxy the browser uses.
    pub(super) proxy: Option<SocketAddr>,
    /// Where its profile (`profile-<n>`) and log (`chromium-<n>.log`) go.
    pub(super) work: &'a Path,
    /// More command-line switches.
    pub(super) extra: &'a [String],
}

/// Starts a fresh headless Chromium (new profile; under `mptcpize run` for `mptcp`; through
/// the proxy for `fbdt`) in the client namespace, opens one page attached over DevTools
/// (Page domain enabled) and runs `body` with the browser and the page's session; closes
/// the browser and removes its profile after. An error carries the browser's last log lines.
pub(super) fn with_browser<T>(
    plan: &BrowserPlan,
    n: usize,
    body: impl FnOnce(&mut Cdp, &str) -> Result<T>,
) -> Result<T> {
    let profile = plan.work.join(format!("profile-{n}"));
    // Through the lab's reaping launcher: Chromium's helpers outlive the browser, and
    // reaped by init their CPU would count as another program's (fbdt_emu::reaper).
    let lab = std::env::current_exe().context("locating fbdt-lab")?;
    let mut cmd = plan.tb.command(Side::Client, &lab.to_string_lossy());
    cmd.args(["__reap", "--"]);
    if *plan.route == Route::Mptcp {
        cmd.args(["mptcpize", "run"]);
    }
    cmd.arg("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--mute-audio",
        "--window-size=1280,800",
        "--remote-debugging-pipe",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    match plan.proxy {
        Some(p) => cmd.arg(format!("--proxy-server=socks5://{p}")),
        None => cmd.arg("--no-proxy-server"),
    };
    cmd.args(plan.extra);
    cmd.arg("about:blank");
    let log = plan.work.join(format!("chromium-{n}.log"));
    let result = (|| {
        let mut cdp = Cdp::launch(cmd, &log)?;
        let target = cdp.call(None, "Target.createTarget", json!({ "url": "about:blank" }))?;
        let target = target["targetId"]
            .as_str()
            .ok_or_else(|| anyhow!("no targetId"))?
            .to_string();
        let attached = cdp.call(
            None,
            "Target.attachToTarget",
            json!({ "targetId": target, "flatten": true }),
        )?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no sessionId"))?
            .to_string();
        cdp.call(Some(&session), "Page.enable", json!({}))?;
        let out = body(&mut cdp, &session)?;
        cdp.close();
        Ok(out)
    })();
    let _ = std::fs::remove_dir_all(&profile);
    result.map_err(|e: anyhow::Error| {
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        let last: Vec<&str> = tail.lines().rev().take(3).collect();
        if last.is_empty() {
            e
        } else {
            e.context(format!("chromium's last words: {}", last.join(" | ")))
        }
    })
}

/// The page servers and proxy of one run, and how to stop the HTTP/2 server's thread.
pub(super) struct Servers {
    /// `http://…` (HTTP/1.1) and `https://…` (HTTP/2) origins, where started.
    pub(super) h1: Option<String>,
    h2: Option<String>,
    pub(super) proxy: Option<SocketAddr>,
    h2_stop: Option<tokio::sync::oneshot::Sender<()>>,
    h2_thread: Option<std::thread::JoinHandle<fbdt_emu::Result<Result<()>>>>,
}

impl Servers {
    /// Stops the HTTP/2 server; its error, if it had one.
    pub(super) fn stop(&mut self) -> Result<()> {
        drop(self.h2_stop.take());
        match self.h2_thread.take().map(|t| t.join()) {
            None | Some(Ok(Ok(Ok(())))) => Ok(()),
            Some(Ok(Ok(Err(e)))) => Err(e.context("the HTTP/2 page server")),
            Some(Ok(Err(e))) => Err(anyhow!("the HTTP/2 page server could not enter its namespace: {e}")),
            Some(Err(_)) => Err(anyhow!("the HTTP/2 page server panicked")),
        }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// What to serve, from where, in one run.
pub(super) struct ServePlan<'a> {
    pub(super) versions: &'a [Http],
    /// The fbdt binary, for an `fbdt` scheme.
    pub(super) fbdt: Option<&'a Path>,
    /// HTTP/2's certificate.
    pub(super) identity: Option<&'a super::h2::Identity>,
    /// The served directory.
    pub(super) www: &'a Path,
    /// The run's working directory (logs, the proxy's control socket).
    pub(super) dir: &'a Path,
}

/// Starts the page servers `plan`'s versions need (and for `fbdt` the proxy pair) on `tb`.
pub(super) fn start_servers(tb: &Testbed, route: &Route, plan: &ServePlan, children: &mut Children) -> Result<Servers> {
    let (www, dir) = (plan.www, plan.dir);
    let paths = tb.paths().to_vec();
    let server_ip = match route {
        Route::Tcp(i) => paths[*i].server_ip,
        _ => paths[0].server_ip,
    };
    let mut servers = Servers {
        h1: None,
        h2: None,
        proxy: None,
        h2_stop: None,
        h2_thread: None,
    };
    let mut allow = Vec::new();
    if plan.versions.contains(&Http::H1) {
        let mut http = match route {
            Route::Mptcp => {
                let mut c = tb.command(Side::Server, "mptcpize");
                c.args(["run", "python3"]);
                c
            }
            _ => tb.command(Side::Server, "python3"),
        };
        // python3's `http.server` serves with ThreadingHTTPServer; -p keeps connections
        // alive.
        http.args([
            "-m",
            "http.server",
            "-p",
            "HTTP/1.1",
            "--bind",
            "0.0.0.0",
            "--directory",
        ])
        .arg(www)
        .arg(HTTP_PORT.to_string());
        children.spawn("http", http, &dir.join("http.log"))?;
        let origin = SocketAddr::from((server_ip, HTTP_PORT));
        fbdt_harness::process::wait_listening(tb, Side::Server, origin, children, dir)?;
        servers.h1 = Some(format!("http://{origin}"));
        allow.push(origin);
    }
    if plan.versions.contains(&Http::H2) {
        let files = super::h2::load_files(www)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let mptcp = *route == Route::Mptcp;
        let id = plan.identity.context("HTTP/2 needs a certificate")?.clone();
        servers.h2_stop = Some(stop_tx);
        servers.h2_thread = Some(tb.spawn_in(Side::Server, move || {
            super::h2::serve(H2_PORT, mptcp, &id, files, stop_rx)
        })?);
        let origin = SocketAddr::from((server_ip, H2_PORT));
        let up = fbdt_harness::process::wait_listening(tb, Side::Server, origin, children, dir);
        if let Err(e) = up {
            return Err(servers.stop().err().unwrap_or(e));
        }
        servers.h2 = Some(format!("https://{origin}"));
        allow.push(origin);
    }
    if *route != Route::Fbdt {
        return Ok(servers);
    }
    let fbdt = plan.fbdt.expect("the fbdt binary was found for an fbdt scheme");
    let (security, serve_security) = fbdt_harness::process::security_args(dir, false)?;
    let mut serve = tb.command(Side::Server, &fbdt.display().to_string());
    serve.args(["serve", "--listen", &format!("0.0.0.0:{FBDT_PORT}")]);
    for a in &allow {
        serve.args(["--allow", &a.to_string()]);
    }
    serve.args(&serve_security);
    children.spawn("serve", serve, &dir.join("serve.log"))?;
    fbdt_harness::process::wait_listening(
        tb,
        Side::Server,
        SocketAddr::from((server_ip, FBDT_PORT)),
        children,
        dir,
    )?;
    let proxy_addr = SocketAddr::from((paths[0].client_ip, PROXY_PORT));
    let mut proxy = tb.command(Side::Client, &fbdt.display().to_string());
    proxy.args(["proxy", "--listen", &proxy_addr.to_string()]);
    for p in &paths {
        proxy.args(["--path", &format!("{}={}:{FBDT_PORT}", p.client_ip, p.server_ip)]);
    }
    proxy.arg("--control").arg(dir.join("proxy.sock")).args(&security);
    children.spawn("proxy", proxy, &dir.join("proxy.log"))?;
    fbdt_harness::process::wait_listening(tb, Side::Client, proxy_addr, children, dir)?;
    servers.proxy = Some(proxy_addr);
    Ok(servers)
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
pub(super) fn on_testbed<T>(
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
    let fbdt = if routes.contains(&Route::Fbdt) {
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
mod tests {
    use super::*;

    #[test]
    fn generated_objects_have_their_sizes_and_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = [1, 40, 81, 82, 83, 5000, 20, 100_000, 300];
        let files = write_page_of(dir.path(), "t", &sizes, 7).unwrap();
        assert_eq!(files.objects.len(), sizes.len());
        for ((path, bytes), want) in files.objects.iter().zip(sizes) {
            assert_eq!(*bytes, want);
            let on_disk = std::fs::read(dir.path().join(path.trim_start_matches('/'))).unwrap();
            assert_eq!(on_disk.len() as u64, want, "{path}");
            if path.ends_with(".png") {
                assert!(on_disk.starts_with(b"\x89PNG\r\n\x1a\n"));
                assert!(on_disk.ends_with(&[0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xae, 0x42, 0x60, 0x82]));
            }
        }
        assert_eq!(files.scripts + files.images + files.stylesheets, sizes.len());
        let html = std::fs::read_to_string(dir.path().join("t-7/index.html")).unwrap();
        assert_eq!(html.len() as u64, files.html_bytes);
        // Deterministic from the seed.
        let again = tempfile::tempdir().unwrap();
        write_page_of(again.path(), "t", &sizes, 7).unwrap();
        for (path, _) in &files.objects {
            let p = path.trim_start_matches('/');
            assert_eq!(
                std::fs::read(dir.path().join(p)).unwrap(),
                std::fs::read(again.path().join(p)).unwrap()
            );
        }
    }

    #[test]
    fn adler32_matches_rfc1950_example() {
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
    }

    fn timings(files: &PageFiles) -> PageTimings {
        PageTimings {
            load_event_end: 100.0,
            dom_content_loaded: 50.0,
            fcp: Some(40.0),
            html_bytes: files.html_bytes,
            protocol: "http/1.1".into(),
            scripts_ran: files.scripts,
            images_decoded: files.images,
            stylesheets: files.stylesheets,
            resources: files
                .objects
                .iter()
                .map(|(p, b)| RequestTiming {
                    name: p.clone(),
                    start_ms: 1.0,
                    request_ms: 2.0,
                    first_byte_ms: 3.0,
                    end_ms: 4.0,
                    bytes: *b,
                    protocol: "http/1.1".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_missing_or_short_object_fails_the_load() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_page_of(dir.path(), "t", &[100, 200, 300, 400], 1).unwrap();
        verify(&timings(&files), &files, "http/1.1").unwrap();
        assert!(verify(&timings(&files), &files, "h2").is_err());
        let mut t = timings(&files);
        t.resources.pop();
        assert!(verify(&t, &files, "http/1.1")
            .unwrap_err()
            .to_string()
            .contains("never fetched"));
        let mut t = timings(&files);
        t.resources[0].bytes -= 1;
        assert!(verify(&t, &files, "http/1.1").is_err());
        let mut t = timings(&files);
        t.scripts_ran = 0;
        assert!(verify(&t, &files, "http/1.1").is_err());
    }
}
