//! `fbdt-lab app`: a real application through `fbdt proxy` (client namespace) and
//! `fbdt serve` (server namespace) over the emulated radios of a scenario, beside the same
//! download over each radio alone. The file comes from a real HTTP server (python3's
//! http.server) in the server namespace and is fetched by curl; its SHA-256 is checked, and
//! every read is timed so the longest gap in delivery (a radio cut mid-download, as in the
//! `blockage` scenario) is measured. Needs root, curl, python3 and the `fbdt` binary.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use fbdt_emu::{Side, Testbed, TestbedOptions};
use fbdt_scenario::Scenario;
use indicatif::ProgressBar;
use rand::{RngCore, SeedableRng};
use serde::Serialize;
use sha2::{Digest, Sha256};

const HTTP_PORT: u16 = 8080;
const FBDT_PORT: u16 = 5400;
const PROXY_PORT: u16 = 1080;
/// How long the servers and the proxy may take to listen.
const READY_LIMIT: Duration = Duration::from_secs(10);
/// Largest file `--seconds` may ask for.
const MAX_FILE: u64 = 4 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum App {
    /// curl through the SOCKS5 front end (--socks5-hostname).
    CurlSocks,
    /// curl through the HTTP proxy front end (absolute-URI requests).
    CurlHttp,
}

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

#[derive(Debug, Serialize)]
pub struct AppReport {
    pub scenario: String,
    pub app: App,
    pub scale: f64,
    pub encryption: &'static str,
    pub file_bytes: u64,
    pub proxy: Download,
    pub direct: Vec<DirectDownload>,
    /// Proxy goodput ÷ the best radio's alone.
    pub proxy_over_best_direct: Option<f64>,
    pub meta: crate::report::Meta,
}

/// Children started in the testbed's namespaces, killed (by PID) when dropped.
struct Children(Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    fn spawn(&mut self, what: &str, mut cmd: Command, log: &Path) -> Result<()> {
        let err = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        self.0.push((what.to_string(), child));
        Ok(())
    }

    /// Fails with the log of any child that already ended.
    fn check(&mut self, logs: &Path) -> Result<()> {
        for (what, c) in &mut self.0 {
            if let Some(status) = c.try_wait()? {
                let log = std::fs::read_to_string(logs.join(format!("{what}.log"))).unwrap_or_default();
                bail!("{what} ended ({status}): {}", log.trim());
            }
        }
        Ok(())
    }
}

fn fbdt_binary(given: Option<&Path>) -> Result<PathBuf> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("locating fbdt-lab")?
            .with_file_name("fbdt"),
    };
    if !path.is_file() {
        bail!(
            "the fbdt binary is not at {} (build it: cargo build --release -p fbdt, or pass --fbdt)",
            path.display()
        );
    }
    Ok(path)
}

/// Waits until something accepts TCP connections at `addr` from inside `side`.
fn wait_listening(tb: &Testbed, side: Side, addr: SocketAddr, children: &mut Children, logs: &Path) -> Result<()> {
    let start = Instant::now();
    loop {
        let up = tb.run_in(side, || {
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })?;
        if up {
            return Ok(());
        }
        children.check(logs)?;
        if start.elapsed() > READY_LIMIT {
            bail!("nothing listens at {addr} after {READY_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
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
        per_path_bytes: before
            .iter()
            .zip(&after)
            .map(|(b, a)| (a.name.clone(), a.client.rx_bytes.saturating_sub(b.client.rx_bytes)))
            .collect(),
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

pub fn run(args: AppArgs) -> Result<()> {
    if let Some(why) = fbdt_emu::skip_reason() {
        bail!("fbdt-lab app needs root to build the emulated testbed: {why}");
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 600.0) {
        bail!("--seconds must be in (0, 600], got {}", args.seconds);
    }
    let fbdt = fbdt_binary(args.fbdt.as_deref())?;
    let scenario = Scenario::load(&args.scenario)?;
    let bar = ProgressBar::new(0);
    let (scale, _) = crate::emu_backend::scale_of(&scenario, args.scale, &bar)?;
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

    let mut tb = Testbed::start(&spec, &TestbedOptions::default()).context("starting the testbed")?;
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

    let mut security: Vec<String> = Vec::new();
    let mut serve_security: Vec<String> = Vec::new();
    if args.plaintext {
        security.push("--plaintext".into());
        serve_security.extend(["--plaintext".into(), "--allow-anyone".into()]);
    } else {
        let key_dir = dir.join("key");
        let identity = fbdt_net::ServerIdentity::load_or_generate(&key_dir).context("generating the server key")?;
        let token = dir.join("token");
        let mut t = [0u8; 16];
        rand::rngs::OsRng.fill_bytes(&mut t);
        std::fs::write(&token, t.iter().map(|b| format!("{b:02x}")).collect::<String>())?;
        let token = token.display().to_string();
        security.extend([
            "--pin".into(),
            identity.fingerprint(),
            "--token-file".into(),
            token.clone(),
        ]);
        serve_security.extend([
            "--key-dir".into(),
            key_dir.display().to_string(),
            "--token-file".into(),
            token,
        ]);
    }
    let mut serve = tb.command(Side::Server, &fbdt.display().to_string());
    serve
        .args(["serve", "--listen", &format!("0.0.0.0:{FBDT_PORT}")])
        .args(["--allow", &format!("{server0}:{HTTP_PORT}")])
        .args(&serve_security);
    children.spawn("serve", serve, &dir.join("serve.log"))?;
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

    let proxy_addr = SocketAddr::from((client0, PROXY_PORT));
    let mut proxy = tb.command(Side::Client, &fbdt.display().to_string());
    proxy.args(["proxy", "--listen", &proxy_addr.to_string()]);
    for p in &paths {
        proxy.args(["--path", &format!("{}={}:{FBDT_PORT}", p.client_ip, p.server_ip)]);
    }
    proxy.arg("--control").arg(dir.join("proxy.sock")).args(&security);
    children.spawn("proxy", proxy, &dir.join("proxy.log"))?;
    wait_listening(&tb, Side::Client, proxy_addr, &mut children, dir)?;

    let url = |ip: Ipv4Addr| format!("http://{ip}:{HTTP_PORT}/file");
    let via = match args.app {
        App::CurlSocks => vec!["--socks5-hostname".to_string(), proxy_addr.to_string()],
        App::CurlHttp => vec!["-x".to_string(), format!("http://{proxy_addr}")],
    };
    bar.set_length(file_bytes);
    bar.set_message("through fbdt proxy");
    let proxy_dl = fetch(&tb, &[via, vec![url(server0)]].concat(), &expected, &bar)
        .and_then(|d| children.check(dir).map(|_| d))
        .context("the download through the proxy")?;
    say(&format!("through fbdt proxy ({:?})", args.app), &proxy_dl);
    let mut direct = Vec::new();
    for p in &paths {
        bar.set_position(0);
        let curl = vec!["--interface".to_string(), p.client_ip.to_string(), url(p.server_ip)];
        let d = fetch(&tb, &curl, &expected, &bar).with_context(|| format!("the direct download over {}", p.name))?;
        say(&format!("{} alone", p.name), &d);
        direct.push(DirectDownload {
            path: p.name.clone(),
            download: d,
        });
    }
    bar.finish_and_clear();
    drop(children);
    tb.stop();

    let best = direct.iter().map(|d| d.download.goodput_mbps).fold(0.0, f64::max);
    let report = AppReport {
        scenario: scenario.name.clone(),
        app: args.app,
        scale,
        encryption: if args.plaintext { "none" } else { "tls13" },
        file_bytes,
        proxy_over_best_direct: (best > 0.0).then(|| proxy_dl.goodput_mbps / best),
        proxy: proxy_dl,
        direct,
        meta: crate::report::Meta::here(),
    };
    if let Some(r) = report.proxy_over_best_direct {
        println!("proxy ÷ best radio alone: {r:.3}");
    }
    if let Some(path) = &args.json {
        crate::run::write_json(path, &report)?;
        eprintln!("wrote {}", path.display());
    }
    let corrupt: Vec<&str> = std::iter::once(("proxy", &report.proxy))
        .chain(report.direct.iter().map(|d| (d.path.as_str(), &d.download)))
        .filter(|(_, d)| !d.sha256_ok || d.bytes != file_bytes)
        .map(|(n, _)| n)
        .collect();
    if !corrupt.is_empty() {
        return Err(anyhow!("content differs from the served file: {}", corrupt.join(", ")));
    }
    Ok(())
}
