//! `fbdt`: measure and move bytes over FBDT (one TCP connection per path).

/// A line on stderr that never fails the caller: with stderr closed (a supervisor gone)
/// `eprintln!` would panic and end a server's accept loop. Formatted first and written with
/// one system call (stderr is unbuffered: `writeln!` would write each piece on its own, and
/// lines of two threads could interleave).
macro_rules! log {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($t)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}
pub(crate) use log;

mod allow;
mod config;
mod cpu;
mod dial;
mod files;
mod load;
mod perf;
mod proxy;
mod security;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "fbdt",
    version,
    about = "FBDT: one reliable byte stream striped over N TCP connections (one per interface)",
    after_help = "\
Examples (one machine, no root: loopback addresses are distinct paths):
  fbdt perf --server --listen 127.0.0.1:5201
  fbdt perf --path 127.0.0.2=127.0.0.1:5201 --path 127.0.0.3=127.0.0.1:5201 --time 10
  fbdt perf --path 127.0.0.2=127.0.0.1:5201 --transport tcp --time 10 --json

Two machines (client with Wi-Fi and Ethernet, server 10.0.0.1). Every path is TLS 1.3; the
server prints its key's fingerprint, the client pins it (or trusts on first use via
~/.local/share/fbdt/known_hosts):
  server$ fbdt perf --server --listen 0.0.0.0:5201
  client$ fbdt perf --path %wlan0=10.0.0.1:5201 --path %eth0=10.0.0.1:5201 --pin sha256:… --time 30
Benchmarks without TLS: --plaintext on both ends.

Files:
  server$ fbdt recv --listen 0.0.0.0:5300 --output big.iso --token-file t
  client$ fbdt send big.iso --path 192.168.1.20=10.0.0.1:5300 --path 10.1.0.20=10.0.0.1:5300 --token-file t

Any application (SOCKS5 / HTTP proxy on the client, destinations dialled by the server):
  server$ fbdt serve --listen 0.0.0.0:5400 --token-file t
  client$ fbdt proxy --listen 127.0.0.1:1080 --path %wlan0=10.0.0.1:5400 --path %eth0=10.0.0.1:5400 \
              --pin sha256:… --token-file t
  client$ curl -x socks5h://127.0.0.1:1080 https://example.com/;  fbdt status

Tunnel to one service (server side: each session reaches a TCP service):
  server$ fbdt serve --listen 0.0.0.0:5400 --forward 127.0.0.1:22

Logs: RUST_LOG=fbdt_net=debug fbdt …"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Throughput test, iperf3-shaped (FBDT, plain TCP or kernel MPTCP).
    Perf(perf::PerfArgs),
    /// Receive one stream into a file (or stdout) and print its SHA-256.
    Recv(files::RecvArgs),
    /// Send a file (or stdin) over FBDT; the receiver's SHA-256 is checked against ours.
    Send(files::SendArgs),
    /// Server side of a tunnel: splice every FBDT session to a new TCP connection.
    Serve(serve::ServeArgs),
    /// Client side of a tunnel: a local SOCKS5 / HTTP proxy (and transparent redirect)
    /// whose connections are streams of one FBDT session to `fbdt serve`.
    Proxy(proxy::ProxyArgs),
    /// Live per-path statistics of a running `fbdt proxy` (its control socket).
    Status(proxy::status::StatusArgs),
    /// Load generator: many sessions against a `perf --server` (loopback), JSON report.
    Load(load::LoadArgs),
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, no backtrace (even with RUST_BACKTRACE set): these are ordinary
            // errors, not bugs.
            eprintln!("fbdt: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by ": ", skipping a cause whose text the line already
/// holds (an OS error both wrapped and quoted by its context is printed once).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run() -> anyhow::Result<()> {
    fbdt_net::keep_freed_memory();
    raise_fd_limit();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let (args, source) = config::expand(std::env::args_os().collect())?;
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => match source.as_ref().and_then(|s| s.locate(&e)) {
            Some(at) => {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                anyhow::bail!("{at}: {}", first.trim_start_matches("error: "))
            }
            None => e.exit(),
        },
    };
    // `perf` runs on one thread per process, as iperf3 does: it then measures what the
    // transport costs per byte, not hand-offs between worker threads (on loopback with 2
    // cores: ~15% less CPU per GiB, 10-15% more goodput, for FBDT and TCP alike). The
    // others keep worker threads for hashing and forwarding beside the session's driver.
    let rt = match cli.cmd {
        Cmd::Perf(_) => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        _ => tokio::runtime::Builder::new_multi_thread().enable_all().build()?,
    };
    rt.block_on(async {
        match cli.cmd {
            Cmd::Perf(a) => perf::run(a).await,
            Cmd::Recv(a) => files::recv(a).await,
            Cmd::Send(a) => files::send(a).await,
            Cmd::Serve(a) => serve::serve(a).await,
            Cmd::Load(a) => load::run(a).await,
            Cmd::Proxy(a) => proxy::run(a).await,
            Cmd::Status(a) => proxy::status::run(a).await,
        }
    })
}

/// Raises the soft file-descriptor limit to the hard one: a server holds one descriptor
/// per path of every session (the server's connection cap stays under the limit).
fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Settings shared by the subcommands.
#[derive(clap::Args, Clone, Debug)]
pub struct NetArgs {
    /// TCP congestion control: one for every path (`cubic`, `bbr`, `reno`, …), per path by
    /// index (`0=cubic,1=bbr`), or `auto` (BBR while a path's losses come without RTT
    /// inflation, the default controller otherwise); default: the system's.
    #[arg(long, value_name = "PLAN", value_parser = parse_congestion)]
    pub congestion: Option<fbdt_net::CongestionPlan>,
    /// Lower each connection's RTO floor to about twice its RTT plus 40 ms (TCP_RTO_MIN_US,
    /// Linux ≥ 6.15) instead of the system's 200 ms.
    #[arg(long)]
    pub rto_floor: bool,
    #[command(flatten)]
    pub security: security::SecurityArgs,
    /// Server: most sessions at once (further HELLOs are refused).
    #[arg(long, value_name = "N", default_value_t = fbdt_net::NetConfig::default().max_sessions)]
    pub max_sessions: usize,
    /// FBDT transmission window for the data this end sends: `budget=<ms>` (the default,
    /// 0.5: windows the paths drain in that long, lane ends meeting by expected arrival —
    /// low in-order delay), `auto` (the earlier throughput-first window, 2 × summed rate ×
    /// longest RTT), or a fixed size (`64k`, `4m`).
    #[arg(long, value_name = "MODE")]
    pub window: Option<fbdt_core::WindowConfig>,
    /// Wake this end's reader at every packet instead of once the frame it is reading can
    /// complete (SO_RCVLOWAT, plaintext paths): the old behaviour, for comparisons.
    #[arg(long)]
    pub wake_per_packet: bool,
    /// How much written data may wait before FBDT schedules it: what the paths drain in
    /// this many ms (at least two windows), as TCP_NOTSENT_LOWAT bounds a socket's unsent
    /// bytes; a stream relayed beside a bulk one then waits milliseconds, not seconds.
    /// `off`: the whole 32 MiB send buffer may fill (the earlier behaviour).
    #[arg(long, value_name = "MS|off", default_value = "5", value_parser = parse_ms_or_off)]
    pub unsent_budget: MsOrOff,
    /// Once every path has been idle this many ms, the first 128 KiB sent next also go to a
    /// second free path until the first ACK, so a radio waking from power save does not
    /// hold a short transfer (docs/workloads.md, "Wake copies"). `off`: never copy.
    #[arg(long, value_name = "MS|off", value_parser = parse_ms_or_off,
          default_value_t = MsOrOff(Some(fbdt_core::fbdt::DEFAULT_WAKE_COPIES_AFTER)))]
    pub wake_copies: MsOrOff,
}

/// A time in milliseconds (0.1 ms to 10 s), or `off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MsOrOff(Option<fbdt_core::Duration>);

impl std::fmt::Display for MsOrOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("off"),
            Some(d) => write!(f, "{}", d.as_secs_f64() * 1e3),
        }
    }
}

fn parse_ms_or_off(s: &str) -> Result<MsOrOff, String> {
    if s == "off" {
        return Ok(MsOrOff(None));
    }
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && (0.1..=10_000.0).contains(&ms) => {
            Ok(MsOrOff(Some(fbdt_core::Duration::from_secs_f64(ms / 1e3))))
        }
        _ => Err(format!("`{s}`: expected milliseconds in 0.1..=10000, or `off`")),
    }
}

fn parse_congestion(s: &str) -> Result<fbdt_net::CongestionPlan, fbdt_net::CongestionError> {
    let plan = fbdt_net::CongestionPlan::parse(s, &[])?;
    plan.validate()?;
    Ok(plan)
}

impl NetArgs {
    fn config(&self, security: fbdt_net::Security) -> fbdt_net::NetConfig {
        let mut cfg = fbdt_net::NetConfig {
            congestion: self.congestion.clone().unwrap_or_default(),
            rto_floor: self.rto_floor,
            security,
            max_sessions: self.max_sessions,
            recv_lowat: !self.wake_per_packet,
            ..fbdt_net::NetConfig::default()
        };
        if let Some(fbdt) = cfg.core.fbdt_mut() {
            if let Some(window) = self.window {
                fbdt.window = window;
            }
            fbdt.unsent_budget = self.unsent_budget.0;
            fbdt.wake_copies_after = self.wake_copies.0;
        }
        cfg
    }
    /// A client's settings: TLS trusting the server as the options say, or plaintext.
    pub fn client_config(&self) -> anyhow::Result<fbdt_net::NetConfig> {
        Ok(self.config(self.security.client()?))
    }
    /// A server's settings: TLS with its stored or given key, or plaintext.
    pub fn server_config(&self) -> anyhow::Result<fbdt_net::NetConfig> {
        Ok(self.config(self.security.server()?))
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn window_modes_parse_and_nonsense_is_refused() {
        use fbdt_core::{Duration, WindowConfig};
        let parse_window = |v: &str| v.parse::<WindowConfig>();
        let budget = WindowConfig::budget(Duration::from_micros(500));
        assert_eq!(parse_window("budget=0.5"), Ok(budget));
        assert_eq!(parse_window("auto"), Ok(WindowConfig::auto()));
        assert_eq!(parse_window("64k"), Ok(WindowConfig::Fixed(65536)));
        assert_eq!(parse_window("4M"), Ok(WindowConfig::Fixed(4 << 20)));
        for bad in [
            "budget=0",
            "budget=-1",
            "budget=inf",
            "fast",
            "99999999999999999999m",
            "",
        ] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wake_copies_default_to_the_core_and_take_ms_or_off() {
        use clap::Parser;
        use fbdt_core::Duration;
        #[derive(Parser)]
        struct Args {
            #[command(flatten)]
            net: super::NetArgs,
        }
        let wake = |flags: &[&str]| -> Result<Option<Duration>, String> {
            let args = Args::try_parse_from(["fbdt", "--plaintext"].iter().chain(flags))
                .map_err(|e| e.to_string())?;
            let cfg = args.net.client_config().map_err(|e| e.to_string())?;
            Ok(cfg.core.fbdt().expect("fbdt scheme").wake_copies_after)
        };
        assert_eq!(wake(&[]), Ok(Some(fbdt_core::fbdt::DEFAULT_WAKE_COPIES_AFTER)));
        assert_eq!(wake(&["--wake-copies", "off"]), Ok(None));
        assert_eq!(wake(&["--wake-copies", "30"]), Ok(Some(Duration::from_millis(30))));
        for bad in ["0", "-5", "never", "20000"] {
            let e = wake(&[&format!("--wake-copies={bad}")]).unwrap_err();
            assert!(e.contains("0.1..=10000"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_os_error_quoted_by_its_context_is_printed_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let e = anyhow::Error::new(io).context(format!(
            "cannot open x: {}",
            std::io::Error::from_raw_os_error(libc::ENOENT)
        ));
        let line = super::one_line(&e);
        assert_eq!(line.matches("No such file").count(), 1, "{line}");
    }
}
