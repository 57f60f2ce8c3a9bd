//! Helpers for tests that run `fbdt serve` and `fbdt proxy` as processes on loopback.
#![allow(dead_code)] // each test file uses a part

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use rand::{Rng, SeedableRng};

/// The token the test servers require and their clients prove.
pub const TOKEN: &str = "fbdt-test-token";

/// A child process, killed when the test ends however it ends; its stderr lines are kept.
pub struct Proc {
    child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts `fbdt ARGS`, reads stderr lines until one satisfies `ready`, and keeps
    /// reading the rest in the background (a full pipe would block the process).
    pub fn start(args: &[&str], ready: impl Fn(&str) -> bool) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fbdt"));
        cmd.args(args);
        Proc::spawn(cmd, args, ready)
    }

    /// As [`Proc::start`], inside network namespace `ns` (`ip netns exec`, which execs
    /// fbdt: the child is fbdt itself).
    pub fn start_in(ns: &str, args: &[&str], ready: impl Fn(&str) -> bool) -> Proc {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_fbdt")]).args(args);
        Proc::spawn(cmd, args, ready)
    }

    /// As [`Proc::start`], for any command (`args` only name it in a panic).
    pub fn spawn(mut cmd: Command, args: &[&str], ready: impl Fn(&str) -> bool) -> Proc {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        loop {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                panic!("fbdt {args:?} exited early; said: {:?}", log.lock().unwrap());
            }
            log.lock().unwrap().push(line.trim_end().to_string());
            if ready(&line) {
                break;
            }
        }
        let bg = log.clone();
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                bg.lock().unwrap().push(line);
            }
        });
        Proc { child, log }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn said(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// A plaintext `fbdt perf --server` on an ephemeral loopback port with `extra` arguments,
/// run under `wrapper` (e.g. `prlimit --nofile=1024:1024`, which execs it; empty: directly):
/// the process, its FBDT address and its kernel-TCP address (from its first line).
pub fn perf_server(wrapper: &[&str], extra: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let mut args = vec!["perf", "--server", "--listen", "127.0.0.1:0", "--plaintext"];
    args.extend_from_slice(extra);
    let mut cmd = match wrapper.split_first() {
        Some((program, before)) => {
            let mut c = Command::new(program);
            c.args(before).arg(env!("CARGO_BIN_EXE_fbdt"));
            c
        }
        None => Command::new(env!("CARGO_BIN_EXE_fbdt")),
    };
    cmd.args(&args);
    let server = Proc::spawn(cmd, &args, |_| true);
    let line = server.lines()[0].clone();
    let fbdt = line
        .split('[')
        .nth(1)
        .and_then(|r| r.split(']').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no FBDT address in the first line {line:?}"));
    let tcp = line
        .rsplit(' ')
        .next()
        .and_then(|a| a.trim().parse().ok())
        .unwrap_or_else(|| panic!("no TCP address at the end of the first line {line:?}"));
    (server, fbdt, tcp)
}

/// A fresh temporary directory (removed when dropped).
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("fbdt-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fingerprint the server printed.
pub fn pin_of(p: &Proc) -> String {
    p.lines()
        .iter()
        .flat_map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
        .find(|w| w.starts_with("sha256:"))
        .expect("no fingerprint printed")
}

/// `n` pseudo-random bytes from `seed` (both ends of a test make the same ones).
pub fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; n];
    rng.fill(&mut v[..]);
    v
}
