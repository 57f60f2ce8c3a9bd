//! The DevTools client: one headless Chromium, started fresh for each load in the client
//! namespace ([`with_browser`]), driven over `--remote-debugging-pipe` (fds 3 and 4,
//! NUL-terminated JSON) by [`Cdp`].

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
use serde_json::{json, Value};

use super::servers::Route;

/// Longest wait for one DevTools answer (the browser is busy at most with one page).
const CALL_LIMIT: Duration = Duration::from_secs(30);
/// How long the browser may take to close before its process group is killed.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);

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
pub struct Cdp {
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
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
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
    pub fn event(&mut self, session: &str, method: &str, until: Instant) -> Result<Value> {
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
    pub fn open(&mut self, session: &str, url: &str, until: Instant, limit: Duration) -> Result<()> {
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
    pub fn close(mut self) {
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

/// Where and how one fresh browser runs.
pub struct BrowserPlan<'a> {
    pub tb: &'a Testbed,
    pub route: &'a Route,
    /// `fbdt`: the SOCKS5 proxy the browser uses.
    pub proxy: Option<SocketAddr>,
    /// Where its profile (`profile-<n>`) and log (`chromium-<n>.log`) go.
    pub work: &'a Path,
    /// More command-line switches.
    pub extra: &'a [String],
}

/// Starts a fresh headless Chromium (new profile; under `mptcpize run` for `mptcp`; through
/// the proxy for `fbdt`) in the client namespace, opens one page attached over DevTools
/// (Page domain enabled) and runs `body` with the browser and the page's session; closes
/// the browser and removes its profile after. An error carries the browser's last log lines.
pub fn with_browser<T>(plan: &BrowserPlan, n: usize, body: impl FnOnce(&mut Cdp, &str) -> Result<T>) -> Result<T> {
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
