//! Programs the lab starts around a testbed run: children killed when dropped, waiting
//! until a server listens inside a namespace, finding the `fbdt` binary, their ports and
//! security options, and what each radio carried meanwhile.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fbdt_emu::{Side, Testbed};
use rand::RngCore;

/// How long the servers and the proxy may take to listen.
pub const READY_LIMIT: Duration = Duration::from_secs(10);

/// Children started in the testbed's namespaces, killed (by PID) when dropped.
pub struct Children(pub Vec<(String, Child)>);

impl Drop for Children {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Children {
    pub fn spawn(&mut self, what: &str, mut cmd: Command, log: &Path) -> Result<()> {
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
    pub fn check(&mut self, logs: &Path) -> Result<()> {
        for (what, c) in &mut self.0 {
            if let Some(status) = c.try_wait()? {
                let log = std::fs::read_to_string(logs.join(format!("{what}.log"))).unwrap_or_default();
                bail!("{what} ended ({status}): {}", log.trim());
            }
        }
        Ok(())
    }
}

pub fn fbdt_binary(given: Option<&Path>) -> Result<PathBuf> {
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
pub fn wait_listening(tb: &Testbed, side: Side, addr: SocketAddr, children: &mut Children, logs: &Path) -> Result<()> {
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

/// Ports of the programs around an application run on the testbed: the origin HTTP
/// server, `fbdt serve` and `fbdt proxy`.
pub const HTTP_PORT: u16 = 8080;
pub const FBDT_PORT: u16 = 5400;
pub const PROXY_PORT: u16 = 1080;

/// Bytes each radio's client end received between two counter readings.
pub fn received(
    before: &[fbdt_emu::PathCounters],
    after: &[fbdt_emu::PathCounters],
) -> std::collections::BTreeMap<String, u64> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| (a.name.clone(), a.client.rx_bytes.saturating_sub(b.client.rx_bytes)))
        .collect()
}

/// The options of `fbdt proxy` and of `fbdt serve` for one run: plaintext (anyone allowed),
/// or TLS 1.3 with a server key generated in `dir`, its pinned fingerprint and a fresh token.
pub fn security_args(dir: &Path, plaintext: bool) -> Result<(Vec<String>, Vec<String>)> {
    let mut security: Vec<String> = Vec::new();
    let mut serve_security: Vec<String> = Vec::new();
    if plaintext {
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
    Ok((security, serve_security))
}
