//! A launcher that stays the parent of everything a program leaves behind.
//!
//! The fidelity monitors count as "this run" the lab and its descendants, alive or reaped
//! (others.rs). A program whose helpers outlive it (Chromium's renderers and utility
//! processes exit after the browser) or double-fork away from it hands them to init, which
//! reaps them: their CPU time then leaves this run's account and shows up as "other
//! programs", and every browser run was flagged for it. Run through [`run_reaping`], the
//! program's orphans are re-parented to the launcher instead (a child subreaper), which
//! reaps them, so their time lands in its `cutime` and, once the lab reaps the launcher,
//! in the lab's.

use std::ffi::OsString;
use std::io;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long orphans may live on after the program exits before the launcher ends them.
/// Chromium's helpers quit within a few hundred ms of the browser; one that lingers longer
/// is stuck, and waiting for it would hold the caller up.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(2);

/// Runs `program` with `args` as a child subreaper, reaps every descendant that ends up
/// ours, and returns the exit code to pass on: the program's own, or 128 + the signal that
/// ended it. Descendants still alive [`ORPHAN_GRACE`] after the program ended are killed
/// and reaped. File descriptors above 2 are handed to the program and then closed here, so
/// a pipe the caller shares with the program sees EOF when the program's side is gone.
pub fn run_reaping(program: &OsString, args: &[OsString]) -> io::Result<i32> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let child = Command::new(program).args(args).spawn()?;
    let main = child.id() as libc::pid_t;
    // SAFETY: closes descriptors 3 and up of this process; std's own are re-opened per use.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    let mut code = None;
    let mut grace_ends: Option<Instant> = None;
    loop {
        // Blocking until the program ends, then polling so the grace can run out.
        let flags = if grace_ends.is_none() { 0 } else { libc::WNOHANG };
        let mut status = 0;
        // SAFETY: waitpid with a valid status pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, flags) };
        if pid < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => break,
                _ => return Err(e),
            }
        }
        if pid == main {
            code = Some(exit_code(status));
            grace_ends = Some(Instant::now() + ORPHAN_GRACE);
        }
        if pid == 0 {
            // Past the grace, again at every poll: a killed orphan's own children come to
            // us in turn.
            if grace_ends.is_some_and(|t| Instant::now() >= t) {
                kill_children();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    Ok(code.unwrap_or(1))
}

fn exit_code(status: libc::c_int) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        1
    }
}

/// SIGKILLs every process whose parent is this one (the orphans we adopted).
fn kill_children() {
    let me = std::process::id() as i32;
    for (pid, (ppid, _)) in super::others::process_table() {
        if ppid == me {
            // SAFETY: kill(2) on a child of ours; it cannot be reaped (and its PID reused)
            // before we wait for it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
