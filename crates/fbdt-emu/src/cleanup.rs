//! Cleanup on every exit path: a registry of live namespaces (for the signal handler),
//! and removal of leftovers of crashed runs by name prefix.

use std::sync::{Mutex, OnceLock};

use serde::Serialize;

use crate::ns::{self, NS_PREFIX};

static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

pub(crate) fn register(names: &[&str]) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(names.iter().map(|s| s.to_string()));
}

pub(crate) fn unregister(names: &[&str]) {
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|n| !names.contains(&n.as_str()));
}

/// Kills the processes in, and deletes, every namespace of every testbed still alive in
/// this process. For signal handlers of programs that install their own (call it, then
/// exit). Returns the namespaces removed.
pub fn cleanup_registered() -> Vec<String> {
    let names: Vec<String> = std::mem::take(&mut *LIVE.lock().unwrap_or_else(|e| e.into_inner()));
    names.into_iter().filter(|n| ns::destroy(n)).collect()
}

static HANDLER: OnceLock<bool> = OnceLock::new();

/// Installs a SIGINT/SIGTERM/SIGHUP handler that removes every live testbed of this process
/// and exits with status 130. [`crate::Testbed::start`] calls it; it is a no-op when this
/// process already has a handler installed through the `ctrlc` crate (then that program
/// must call [`cleanup_registered`] itself). Returns whether ours is installed.
pub fn install_signal_handler() -> bool {
    *HANDLER.get_or_init(|| {
        ctrlc::set_handler(|| {
            let removed = cleanup_registered();
            eprintln!("fbdt-emu: interrupted; removed {} namespace(s)", removed.len());
            std::process::exit(130);
        })
        .is_ok()
    })
}

/// What [`clean_leftovers`] removed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CleanReport {
    pub namespaces: Vec<String>,
    /// Namespaces left alone because the process that made them is still running.
    pub skipped_live: Vec<String>,
}

/// The pid encoded in a namespace name `fbdt-<pid>-…`.
pub(crate) fn owner_pid(name: &str) -> Option<i32> {
    name.strip_prefix(NS_PREFIX)?.split('-').next()?.parse().ok()
}

fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks existence/permission.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Removes namespaces (and the processes in them) left by crashed testbed runs: every
/// `fbdt-<pid>-…` namespace whose creating process is gone, or all of them with `all`.
/// Never touches namespaces of this process's live testbeds.
pub fn clean_leftovers(all: bool) -> CleanReport {
    let mine: Vec<String> = LIVE.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let me = std::process::id() as i32;
    let mut r = CleanReport::default();
    for n in ns::list_namespaces(NS_PREFIX) {
        if mine.contains(&n) {
            continue;
        }
        let owner = owner_pid(&n);
        let stale = match owner {
            Some(p) => p != me && !alive(p),
            None => false,
        };
        if all || stale {
            if ns::destroy(&n) {
                r.namespaces.push(n);
            }
        } else {
            r.skipped_live.push(n);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn owner_pid_parses() {
        assert_eq!(super::owner_pid("fbdt-1234-0-cli"), Some(1234));
        assert_eq!(super::owner_pid("fbdt-x-0-cli"), None);
        assert_eq!(super::owner_pid("other-1-0"), None);
    }
}
