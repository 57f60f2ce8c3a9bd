//! What a browser run talks to: the page servers (python3's http.server for HTTP/1.1, h2.rs's
//! for HTTP/2 over TLS) and, for `fbdt`, the `fbdt serve`/`fbdt proxy` pair; which route a
//! scheme takes to them.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use fbdt_emu::{Side, Testbed};
use fbdt_harness::process::{Children, FBDT_PORT, HTTP_PORT, PROXY_PORT};
use fbdt_harness::scheme::binary::PairFlags;

use crate::setup::Setup;

/// How a scheme reaches the server.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// Through `fbdt proxy` (SOCKS5) and `fbdt serve`, started with these flags (the
    /// scheme's options, `fbdt_harness::scheme::binary::flags`).
    Fbdt(PairFlags),
    /// Straight to this path's server address: its connected route takes that radio.
    Tcp(usize),
    /// Browser and server under `mptcpize run`; subflows by the testbed's endpoints.
    Mptcp,
}

/// The HTTP version a page is served with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http {
    /// python3's http.server, plain HTTP/1.1 (Chromium opens up to six connections).
    H1,
    /// hyper's HTTP/2 over TLS (h2.rs): one connection.
    H2,
}

impl Http {
    pub fn parse(v: &str) -> Result<Self> {
        match v.trim() {
            "1.1" => Ok(Http::H1),
            "2" => Ok(Http::H2),
            other => bail!("--http `{other}`: expected 1.1 or 2"),
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Http::H1 => "1.1",
            Http::H2 => "2",
        }
    }

    /// What Navigation/Resource Timing's `nextHopProtocol` must say.
    pub fn alpn(self) -> &'static str {
        match self {
            Http::H1 => "http/1.1",
            Http::H2 => "h2",
        }
    }
}

/// The page server's port for HTTP/2 (TLS).
const H2_PORT: u16 = 8443;

impl Route {
    pub fn is_fbdt(&self) -> bool {
        matches!(self, Route::Fbdt(_))
    }
}

pub fn route(scheme: &str, setup: &Setup) -> Result<Route> {
    if scheme == "fbdt" || scheme.starts_with("fbdt+") {
        return Ok(Route::Fbdt(fbdt_harness::scheme::binary::flags(scheme, &setup.scenario)?));
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
        "this workload runs the schemes fbdt[+option…] (through fbdt proxy), tcp:<path> and \
         mptcp, not `{scheme}`"
    )
}

/// The page servers and proxy of one run, and how to stop the HTTP/2 server's thread.
pub struct Servers {
    /// `http://…` (HTTP/1.1) and `https://…` (HTTP/2) origins, where started.
    pub h1: Option<String>,
    pub h2: Option<String>,
    pub proxy: Option<SocketAddr>,
    h2_stop: Option<tokio::sync::oneshot::Sender<()>>,
    h2_thread: Option<std::thread::JoinHandle<fbdt_emu::Result<Result<()>>>>,
}

impl Servers {
    /// Stops the HTTP/2 server; its error, if it had one.
    pub fn stop(&mut self) -> Result<()> {
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
pub struct ServePlan<'a> {
    pub versions: &'a [Http],
    /// The fbdt binary, for an `fbdt` scheme.
    pub fbdt: Option<&'a Path>,
    /// HTTP/2's certificate.
    pub identity: Option<&'a crate::h2::Identity>,
    /// The served directory.
    pub www: &'a Path,
    /// The run's working directory (logs, the proxy's control socket).
    pub dir: &'a Path,
}

/// Starts the page servers `plan`'s versions need (and for `fbdt` the proxy pair) on `tb`.
pub fn start_servers(tb: &Testbed, route: &Route, plan: &ServePlan, children: &mut Children) -> Result<Servers> {
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
        let files = crate::h2::load_files(www)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let mptcp = *route == Route::Mptcp;
        let id = plan.identity.context("HTTP/2 needs a certificate")?.clone();
        servers.h2_stop = Some(stop_tx);
        servers.h2_thread = Some(tb.spawn_in(Side::Server, move || {
            crate::h2::serve(H2_PORT, mptcp, &id, files, stop_rx)
        })?);
        let origin = SocketAddr::from((server_ip, H2_PORT));
        let up = fbdt_harness::process::wait_listening(tb, Side::Server, origin, children, dir);
        if let Err(e) = up {
            return Err(servers.stop().err().unwrap_or(e));
        }
        servers.h2 = Some(format!("https://{origin}"));
        allow.push(origin);
    }
    let Route::Fbdt(flags) = route else {
        return Ok(servers);
    };
    let fbdt = plan.fbdt.expect("the fbdt binary was found for an fbdt scheme");
    servers.proxy = Some(start_fbdt_pair(tb, &allow, fbdt, flags, dir, children)?);
    Ok(servers)
}

/// `fbdt serve` in the server namespace (serving the origins `allow`) and `fbdt proxy`
/// (SOCKS5) in the client's, over every path, TLS with a pinned key and a token (plaintext
/// if `flags` say so), with `flags` (the scheme's options); the proxy's address.
pub fn start_fbdt_pair(
    tb: &Testbed,
    allow: &[SocketAddr],
    fbdt: &Path,
    flags: &PairFlags,
    dir: &Path,
    children: &mut Children,
) -> Result<SocketAddr> {
    let paths = tb.paths().to_vec();
    let server_ip = paths[0].server_ip;
    let (security, serve_security) = fbdt_harness::process::security_args(dir, flags.plaintext)?;
    let mut serve = tb.command(Side::Server, &fbdt.display().to_string());
    serve.args(["serve", "--listen", &format!("0.0.0.0:{FBDT_PORT}")]);
    for a in allow {
        serve.args(["--allow", &a.to_string()]);
    }
    serve.args(&serve_security).args(&flags.both);
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
    proxy
        .arg("--control")
        .arg(dir.join("proxy.sock"))
        .args(&security)
        .args(&flags.both)
        .args(&flags.proxy);
    children.spawn("proxy", proxy, &dir.join("proxy.log"))?;
    fbdt_harness::process::wait_listening(tb, Side::Client, proxy_addr, children, dir)?;
    Ok(proxy_addr)
}
