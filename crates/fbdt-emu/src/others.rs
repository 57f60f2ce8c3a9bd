//! CPU time of work on the host that is not this run's: other programs compete with the
//! endpoints (and, unless it runs real-time, the emulator), so a run next to them measures
//! the host, not the protocol. "This run" is this process and its descendants, alive or
//! reaped (a reaped child's time is in its parent's `cutime`/`cstime`), and every process
//! inside one of this process's testbed namespaces with its descendants: a program started
//! there may leave our tree (Chromium's crash handler double-forks and is reparented to
//! init) and is still this run's.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;

/// Clock ticks per second (`/proc` times are in ticks).
pub(crate) fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// Seconds of CPU since boot: (the whole host in user, nice and system mode; this process
/// and its descendants). Interrupt and softirq time is left out on both sides (the kernel
/// cannot say whose packets it processed there).
pub(crate) fn snapshot() -> (f64, f64) {
    let tck = clk_tck();
    let host = host_task_jiffies(&std::fs::read_to_string("/proc/stat").unwrap_or_default()) as f64 / tck;
    (host, ours_ticks(std::process::id() as i32) as f64 / tck)
}

/// user + nice + system jiffies of the host's "cpu" line.
pub(crate) fn host_task_jiffies(proc_stat: &str) -> u64 {
    let Some(line) = proc_stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0;
    };
    line.split_whitespace()
        .skip(1)
        .take(3)
        .filter_map(|x| x.parse::<u64>().ok())
        .sum()
}

/// (ppid, utime + stime + cutime + cstime in clock ticks) from a /proc/<pid>/stat line.
pub(crate) fn parse_pid_stat(text: &str) -> Option<(i32, u64)> {
    // Fields after the command name (which may contain spaces and parentheses).
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    let ppid = f.get(1)?.parse::<i32>().ok()?;
    Some((ppid, num(11)? + num(12)? + num(13)? + num(14)?))
}

/// Inodes of the network namespaces this process's testbeds created (`fbdt-<pid>-…`).
fn our_namespaces() -> HashSet<u64> {
    let prefix = format!("fbdt-{}-", std::process::id());
    let Ok(rd) = std::fs::read_dir(crate::ns::NETNS_DIR) else {
        return HashSet::new();
    };
    rd.flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)))
        .filter_map(|e| std::fs::metadata(e.path()).ok().map(|m| m.ino()))
        .collect()
}

/// The inode of `pid`'s network namespace, from the `net:[inode]` link.
fn netns_inode(pid: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// Every process now: pid → (ppid, ticks as [`parse_pid_stat`] counts them). A process that
/// exits between listing and reading is simply not in it.
pub(crate) fn process_table() -> HashMap<i32, (i32, u64)> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    rd.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            Some((pid, parse_pid_stat(&stat)?))
        })
        .collect()
}

/// Ticks of `root` and every live descendant (each with its own reaped children), and of
/// the processes in our namespaces and theirs.
fn ours_ticks(root: i32) -> u64 {
    let namespaces = our_namespaces();
    let procs = process_table();
    let mut roots = vec![root];
    if !namespaces.is_empty() {
        roots.extend(
            procs
                .keys()
                .copied()
                .filter(|&p| netns_inode(p).is_some_and(|i| namespaces.contains(&i))),
        );
    }
    trees_ticks(&roots, &procs)
}

/// Ticks of the processes in the trees under `roots`, each counted once.
pub(crate) fn trees_ticks(roots: &[i32], procs: &HashMap<i32, (i32, u64)>) -> u64 {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &(ppid, _)) in procs {
        children.entry(ppid).or_default().push(pid);
    }
    let (mut seen, mut sum, mut stack) = (HashSet::new(), 0, roots.to_vec());
    while let Some(p) = stack.pop() {
        if !seen.insert(p) {
            continue;
        }
        sum += procs.get(&p).map_or(0, |x| x.1);
        if let Some(c) = children.get(&p) {
            stack.extend(c.iter().copied());
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_stat_with_a_parenthesised_name() {
        let line = "4242 (a (weird) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 30 12 5 3 20 0 1 0 99 0 0";
        assert_eq!(parse_pid_stat(line), Some((17, 30 + 12 + 5 + 3)));
        assert_eq!(parse_pid_stat("garbage"), None);
    }

    #[test]
    fn host_line_sums_user_nice_system() {
        assert_eq!(host_task_jiffies("cpu  100 7 50 800 50 3 4 10 0 0\n"), 157);
    }

    #[test]
    fn a_tree_counts_live_descendants_once() {
        // 1 → 10 → {11, 12 → 13}; 20 is someone else's.
        let procs: HashMap<i32, (i32, u64)> = [
            (10, (1, 5)),
            (11, (10, 7)),
            (12, (10, 1)),
            (13, (12, 2)),
            (20, (1, 100)),
        ]
        .into_iter()
        .collect();
        assert_eq!(trees_ticks(&[10], &procs), 15);
        assert_eq!(trees_ticks(&[12], &procs), 3);
        // A process found both in the tree and as a root of its own (in our namespace)
        // counts once; a reparented one (20, parent init) counts when it is a root.
        assert_eq!(trees_ticks(&[10, 12], &procs), 15);
        assert_eq!(trees_ticks(&[10, 20], &procs), 115);
    }
}
