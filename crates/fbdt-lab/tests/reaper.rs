//! The reaping launcher (`fbdt-lab __reap`): the CPU time of a process that leaves its
//! parent's tree counts as ours. Its own file: it reads this process's children's rusage,
//! which other tests' children would change.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// CPU seconds (user + system) of this process's reaped children so far.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) }, 0);
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(r.ru_utime) + secs(r.ru_stime)
}

/// A shell that starts a busy orphan (it double-forks away from the shell) and exits at
/// once; the orphan writes its own CPU time (`times`) to `out` when done. Returns the
/// orphan's CPU seconds and what this process's children's CPU grew by meanwhile.
fn orphan_cpu(through_reaper: bool, out: &Path) -> (f64, f64) {
    let _ = std::fs::remove_file(out);
    let orphan = format!(
        "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; times > {}",
        out.display()
    );
    let script = format!("(sh -c '{orphan}' &); exit 0");
    let mut cmd = if through_reaper {
        let mut c = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"));
        c.args(["__reap", "--", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    let before = children_cpu();
    assert!(cmd.status().unwrap().success());
    let until = Instant::now() + Duration::from_secs(30);
    // `times` writes once the orphan's loop is done; read it whole.
    let text = loop {
        let t = std::fs::read_to_string(out).unwrap_or_default();
        if t.lines().count() >= 2 {
            break t;
        }
        assert!(Instant::now() < until, "the orphan did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    // An orphan handed to init is reaped by init a moment after it exits.
    std::thread::sleep(Duration::from_millis(200));
    // "0m0.310000s 0m0.010000s": the shell's own user and system time.
    let own: f64 = text
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .map(|f| {
            let (m, s) = f.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum();
    (own, children_cpu() - before)
}

#[test]
fn an_orphans_cpu_counts_as_ours_through_the_reaper_which_passes_on_exit_codes() {
    let out = std::env::temp_dir().join(format!("fbdt-reaper-{}.txt", std::process::id()));
    let (orphan, gained) = orphan_cpu(true, &out);
    assert!(orphan > 0.02, "the orphan used {orphan} s: too little to tell");
    // Ticks are 10 ms; the launcher and the shell add a little of their own.
    assert!(gained >= orphan - 0.02, "orphan {orphan} s, counted {gained} s");
    // The control: started directly, the orphan's time goes to init, not to us.
    let (orphan, gained) = orphan_cpu(false, &out);
    assert!(gained < orphan / 2.0, "orphan {orphan} s, counted {gained} s");
    let _ = std::fs::remove_file(&out);

    // (In the same test: another test's children would change the rusage read above.)
    let status = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args(["__reap", "--", "sh", "-c", "exit 7"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(7));
    let status = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args(["__reap", "--", "sh", "-c", "kill -9 $$"])
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(128 + 9));
}
