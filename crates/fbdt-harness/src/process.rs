//! Programs the lab starts around a testbed run: children killed when dropped, waiting
//! until a server listens inside a namespace, finding the `fbdt` binary.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fbdt_emu::{Side, Testbed};

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
