//! `fbdt`: measure and move bytes over FBDT (one TCP connection per path).


#[macro_use]
mod log;

mod allow;
mod config;
mod cpu;
mod dial;
mod files;
mod load;
mod net_args;
mod perf;
mod proxy;
mod security;
mod serve;
mod splice;

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
        // With stderr gone (a supervisor's pipe closed) a failed write is reported with
        // `eprintln!`, which panics in whatever task logged: a server would lose the
        // session that logged a warning. Lost log lines are dropped instead, as `log!` does.
        .log_internal_errors(false)
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


#[cfg(test)]
mod tests {
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
