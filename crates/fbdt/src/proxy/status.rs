//! The proxy's control socket (a unix socket, mode 0600) and `fbdt status`: per path its
//! state, rate, RTT and bytes, and the session's redundant bytes and open streams (with
//! `fbdt proxy --sessions N`, summed over the sessions).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

use fbdt_mux::Mux;
use fbdt_net::StatsHandle;

use super::upstream::Upstream;

/// How often rates are computed (each rate is the bytes of the last interval).
const SAMPLE: Duration = Duration::from_secs(1);

/// `$XDG_RUNTIME_DIR/fbdt-proxy.sock`, else `proxy.sock` in the key directory
/// (`~/.local/share/fbdt`, private to the user). Never a fixed name in /tmp: another user
/// could create it first.
pub fn default_socket() -> anyhow::Result<PathBuf> {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d).join("fbdt-proxy.sock")),
        _ => fbdt_net::secure::default_key_dir()
            .map(|d| d.join("proxy.sock"))
            .context("neither $XDG_RUNTIME_DIR nor $HOME is set: give --control PATH"),
    }
}

#[derive(Serialize, Clone, Debug, Default)]
pub struct Status {
    pub connected: bool,
    pub error: Option<String>,
    /// Sessions live (`fbdt proxy --sessions`); the figures below are their sums.
    pub sessions: usize,
    /// Each live session on its own, in the proxy's order.
    pub each_session: Vec<SessionSummary>,
    pub streams_open: usize,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub redundant_bytes_sent: u64,
    pub redundant_bytes_received: u64,
    pub paths: Vec<PathStatus>,
}

#[derive(Serialize, Clone, Debug, Default)]
pub struct SessionSummary {
    pub streams_open: usize,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

#[derive(Serialize, Clone, Debug, Default)]
pub struct PathStatus {
    pub index: usize,
    /// See [`path_state`]: up, stalled, probing or down; or joining (connected, the
    /// server's answer to its JOIN not yet verified: no data on it).
    pub state: &'static str,
    pub send_rate_bps: f64,
    pub receive_rate_bps: f64,
    pub srtt_ms: f64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub reconnects: u32,
}

/// Serves the status to every connection on `path`; the listener goes when the returned
/// guard drops (the socket file with it).
pub fn serve(path: &Path, up: Arc<Upstream>) -> anyhow::Result<SocketGuard> {
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        anyhow::bail!(
            "control socket {} is in use (another fbdt proxy?); give --control",
            path.display()
        );
    }
    let _ = std::fs::remove_file(path);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    // Created 0600 under a umask of 077, not chmodded after bind: no moment when another
    // user may connect. (The umask is the process's; nothing else creates files now.)
    // SAFETY: umask only swaps the process's file-mode mask.
    let old = unsafe { libc::umask(0o077) };
    let bound = UnixListener::bind(path);
    // SAFETY: as above, restoring the previous mask.
    unsafe { libc::umask(old) };
    let listener = bound.with_context(|| format!("control socket {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("chmod 0600 {}", path.display()))?;
    let rates = Arc::new(Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_rates(up.clone(), rates.clone()));
    let server = tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let s = {
                let r = rates.lock().map(|r| r.clone()).unwrap_or_default();
                snapshot(&up, &r)
            };
            tokio::spawn(async move {
                if let Ok(json) = serde_json::to_vec(&s) {
                    let _ = c.write_all(&json).await;
                }
            });
        }
    });
    Ok(SocketGuard {
        path: path.to_path_buf(),
        tasks: [sampler, server],
    })
}

pub struct SocketGuard {
    path: PathBuf,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One path's rates over the last [`SAMPLE`] interval.
#[derive(Clone, Copy, Debug, Default)]
struct PathRates {
    send_bps: f64,
    receive_bps: f64,
    /// Sent nothing in the interval while the session had unacknowledged bytes and
    /// another path sent.
    idle_while_others_move: bool,
}

/// Recomputes every path's rates once per [`SAMPLE`] into `latest`. Rates need an interval;
/// states and counters do not, so [`snapshot`] reads those fresh for every request: a
/// probe that lasts less than an interval still shows.
async fn sample_rates(up: Arc<Upstream>, latest: Arc<Mutex<Vec<PathRates>>>) {
    let mut prev: Option<(Instant, fbdt_net::SessionStats)> = None;
    loop {
        let Some((s, _, _)) = merged(&sessions(&up)) else {
            tokio::time::sleep(SAMPLE).await;
            continue;
        };
        let now = Instant::now();
        let dt = prev.as_ref().map_or(0.0, |(t, _)| now.duration_since(*t).as_secs_f64());
        let unacked = s.bytes_written > s.bytes_acked;
        let rates: Vec<(f64, f64)> = s
            .paths
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let before = prev
                    .as_ref()
                    .and_then(|(_, ps)| ps.paths.get(i))
                    .cloned()
                    .unwrap_or_default();
                if dt <= 0.0 {
                    return (0.0, 0.0);
                }
                let sent = p.bytes_sent.saturating_sub(before.bytes_sent) as f64 * 8.0 / dt;
                let recv = p.bytes_received.saturating_sub(before.bytes_received) as f64 * 8.0 / dt;
                (sent, recv)
            })
            .collect();
        let others_move = |i: usize| rates.iter().enumerate().any(|(j, r)| j != i && r.0 > 0.0);
        let paths = (0..rates.len())
            .map(|i| PathRates {
                send_bps: rates[i].0,
                receive_bps: rates[i].1,
                idle_while_others_move: rates[i].0 == 0.0 && unacked && others_move(i),
            })
            .collect();
        if let Ok(mut l) = latest.lock() {
            *l = paths;
        }
        prev = Some((now, s));
        tokio::time::sleep(SAMPLE).await;
    }
}

/// The session's status now, with the rates of the last sampled interval.
fn snapshot(up: &Upstream, rates: &[PathRates]) -> Status {
    // One reading of the session list: the sum and the list then count the same sessions.
    let links = sessions(up);
    let Some((s, error, streams_open)) = merged(&links) else {
        return Status::default();
    };
    let each_session: Vec<SessionSummary> = links
        .iter()
        .map(|(mux, stats)| {
            let s = stats.stats();
            SessionSummary {
                streams_open: mux.open_streams(),
                bytes_sent: s.bytes_written,
                bytes_received: s.bytes_delivered,
            }
        })
        .collect();
    let paths = s
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let r = rates.get(i).copied().unwrap_or_default();
            let state = if p.joining {
                "joining"
            } else {
                path_state(p.connected, p.probing, r.idle_while_others_move)
            };
            PathStatus {
                index: i,
                state,
                send_rate_bps: r.send_bps,
                receive_rate_bps: r.receive_bps,
                srtt_ms: f64::from(p.srtt_us) / 1000.0,
                bytes_sent: p.bytes_sent,
                bytes_received: p.bytes_received,
                reconnects: p.reconnects,
            }
        })
        .collect();
    Status {
        connected: error.is_none(),
        error,
        sessions: each_session.len(),
        each_session,
        streams_open,
        bytes_sent: s.bytes_written,
        bytes_received: s.bytes_delivered,
        redundant_bytes_sent: s.redundant_bytes_sent,
        redundant_bytes_received: s.redundant_bytes_received,
        paths,
    }
}

/// The proxy's live sessions (their mux and counters), as they are now.
fn sessions(up: &Upstream) -> Vec<(Mux, StatsHandle)> {
    up.status.lock().map(|l| l.clone()).unwrap_or_default()
}

/// The proxy's live sessions as one: counters summed per path index (the sessions share
/// the paths), a path connected only if it is in every session, joining or probing if it is
/// in any, its RTT the largest; the first session error; the open streams of all.
fn merged(links: &[(Mux, StatsHandle)]) -> Option<(fbdt_net::SessionStats, Option<String>, usize)> {
    let (first, rest) = links.split_first()?;
    let mut sum = first.1.stats();
    let mut error = first.1.error().or_else(|| first.0.closed());
    let mut streams = first.0.open_streams();
    for (mux, stats) in rest {
        let s = stats.stats();
        sum.bytes_written += s.bytes_written;
        sum.bytes_acked += s.bytes_acked;
        sum.bytes_delivered += s.bytes_delivered;
        sum.redundant_bytes_sent += s.redundant_bytes_sent;
        sum.redundant_bytes_received += s.redundant_bytes_received;
        for (i, p) in s.paths.iter().enumerate() {
            match sum.paths.get_mut(i) {
                Some(q) => {
                    q.connected &= p.connected;
                    q.joining |= p.joining;
                    q.probing |= p.probing;
                    q.bytes_sent += p.bytes_sent;
                    q.bytes_received += p.bytes_received;
                    q.srtt_us = q.srtt_us.max(p.srtt_us);
                    q.reconnects += p.reconnects;
                }
                None => sum.paths.push(p.clone()),
            }
        }
        error = error.or_else(|| stats.error().or_else(|| mux.closed()));
        streams += mux.open_streams();
    }
    Some((sum, error, streams))
}

/// A path's state: `down` (no connection; the runtime re-dials it), `probing` (a
/// connection is live and fresh ones are being dialled beside it because it looked
/// stalled), `stalled` (connected, sent nothing in the last interval while the session had
/// unacknowledged bytes and another path moved), `up` (connected, carrying or idle).
pub fn path_state(connected: bool, probing: bool, stalled: bool) -> &'static str {
    match (connected, probing, stalled) {
        (false, _, _) => "down",
        (true, true, _) => "probing",
        (true, false, true) => "stalled",
        (true, false, false) => "up",
    }
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The proxy's control socket (default as `fbdt proxy` chooses it).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Print the JSON the proxy sends.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: StatusArgs) -> anyhow::Result<()> {
    let path = match a.control {
        Some(p) => p,
        None => default_socket()?,
    };
    let mut c = UnixStream::connect(&path)
        .await
        .with_context(|| format!("control socket {} (is fbdt proxy running?)", path.display()))?;
    let mut text = String::new();
    c.read_to_string(&mut text).await?;
    if a.json {
        println!("{text}");
        return Ok(());
    }
    let s: serde_json::Value = serde_json::from_str(&text).context("the proxy's status is not JSON")?;
    let v = |k: &str| s.get(k).cloned().unwrap_or_default();
    println!(
        "session{}: {}  streams open: {}  sent {} B  received {} B  redundant sent {} B",
        match v("sessions").as_u64() {
            Some(n) if n > 1 => format!("s ({n}, summed)"),
            _ => String::new(),
        },
        if v("connected").as_bool() == Some(true) {
            "up".to_string()
        } else {
            format!("down ({})", v("error"))
        },
        v("streams_open"),
        v("bytes_sent"),
        v("bytes_received"),
        v("redundant_bytes_sent")
    );
    println!("path  state    send Mbit/s  recv Mbit/s  srtt ms  bytes sent  bytes recv  reconnects");
    for p in v("paths").as_array().into_iter().flatten() {
        let f = |k: &str| p.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0);
        println!(
            "{:<4}  {:<7}  {:>11.1}  {:>11.1}  {:>7.1}  {:>10}  {:>10}  {:>10}",
            f("index"),
            p.get("state").and_then(|x| x.as_str()).unwrap_or("?"),
            f("send_rate_bps") / 1e6,
            f("receive_rate_bps") / 1e6,
            f("srtt_ms"),
            f("bytes_sent"),
            f("bytes_received"),
            f("reconnects")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::path_state;

    #[test]
    fn path_states() {
        assert_eq!(path_state(false, false, false), "down");
        // A probe without a live connection is a re-dial: down.
        assert_eq!(path_state(false, true, true), "down");
        assert_eq!(path_state(true, true, false), "probing");
        assert_eq!(path_state(true, true, true), "probing");
        assert_eq!(path_state(true, false, true), "stalled");
        assert_eq!(path_state(true, false, false), "up");
    }
}
