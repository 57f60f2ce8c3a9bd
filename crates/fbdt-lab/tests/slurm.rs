//! A real single-node Slurm (slurmctld, slurmd and munged started here, with their own
//! configuration, key, socket and state in a temporary folder, stopped by PID at the end)
//! runs a 24-case simulator campaign as a job array: one task is cancelled, so the merge
//! job never runs; `merge --requeue` lists its cases, `slurm submit --requeue` runs them
//! and the merge job then writes the sweep the one-process command writes (apart from
//! wall-clock and host fields). Then the same campaign again loses its node while a task
//! runs (slurmd and the task's processes killed, slurmd restarted): `merge --requeue` lists
//! what the task had not finished and `slurm submit --requeue` completes the merge. Root
//! only, and only where Slurm and munge are installed (CI installs them); otherwise skipped
//! with the reason printed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{json, lab, one_process_and_plan, p, scratch, steady};

/// Generous: only a hang ends a wait this long (nothing here is timed).
const HANG: Duration = Duration::from_secs(900);

fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (the test runs slurmd, which starts jobs as their users)".into());
    }
    for tool in [
        "slurmctld",
        "slurmd",
        "munged",
        "mungekey",
        "sbatch",
        "squeue",
        "scancel",
        "scontrol",
        "sinfo",
    ] {
        let found = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).any(|d| d.join(tool).is_file()))
            .unwrap_or(false)
            || Path::new("/usr/sbin").join(tool).is_file();
        if !found {
            return Some(format!(
                "`{tool}` is not installed (Debian: apt-get install slurm-wlm munge)"
            ));
        }
    }
    None
}

fn tool(name: &str) -> Command {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.is_file() {
        Command::new(sbin)
    } else {
        Command::new(name)
    }
}

/// The daemons, stopped by PID (TERM, then KILL) however the test ends.
struct Cluster {
    dir: tempfile::TempDir,
    conf: PathBuf,
    daemons: Vec<(String, Child)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: signalling our own child by its PID.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let until = Instant::now() + Duration::from_secs(15);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `slurmd -C`'s value of `key` (the node's real CPUs and memory).
fn node_value(config: &str, key: &str) -> String {
    config
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("slurmd -C printed no {key}: {config}"))
        .to_string()
}

impl Cluster {
    fn start() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["munge", "state", "spool", "log"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let key = d.join("munge/munge.key");
        let o = tool("mungekey").arg("-c").arg("-k").arg(&key).output().unwrap();
        assert!(o.status.success(), "mungekey: {}", String::from_utf8_lossy(&o.stderr));
        let socket = d.join("munge/socket");
        let mut cluster = Cluster {
            conf: d.join("slurm.conf"),
            daemons: Vec::new(),
            dir,
        };
        let d = cluster.dir.path().to_path_buf();
        let log = |name: &str| Stdio::from(std::fs::File::create(d.join("log").join(name)).unwrap());
        let munged = tool("munged")
            .args(["-F", "-f"])
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", d.join("munge/pid").display()))
            .arg(format!("--log-file={}", d.join("log/munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()))
            .stdout(log("munged.out"))
            .stderr(log("munged.err"))
            .spawn()
            .unwrap();
        cluster.daemons.push(("munged".into(), munged));
        let until = Instant::now() + HANG;
        while !socket.exists() {
            assert!(Instant::now() < until, "munged made no socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        let node = String::from_utf8(tool("slurmd").arg("-C").output().unwrap().stdout).unwrap();
        let conf = format!(
            "ClusterName=fbdt-test\nSlurmctldHost=localhost\nSlurmctldPort={}\nSlurmdPort={}\n\
             SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={sock}\nStateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd.log\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nMpiDefault=none\nReturnToService=2\n\
             NodeName=localhost NodeHostname=localhost CPUs={cpus} RealMemory={mem} State=UNKNOWN\n\
             PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            free_port(),
            free_port(),
            sock = socket.display(),
            d = d.display(),
            cpus = node_value(&node, "CPUs"),
            mem = node_value(&node, "RealMemory"),
        );
        std::fs::write(&cluster.conf, conf).unwrap();
        cluster.spawn("slurmctld");
        cluster.spawn("slurmd");
        cluster.wait_idle();
        cluster
    }

    /// Starts slurmctld or slurmd in the foreground, logging into the cluster's folder.
    fn spawn(&mut self, name: &str) {
        let args: &[&str] = if name == "slurmd" { &["-D", "-N", "localhost"] } else { &["-D"] };
        // Appended to: a restarted daemon keeps the earlier lines.
        let log = |file: String| {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.path().join("log").join(file))
                .unwrap();
            Stdio::from(f)
        };
        let child = tool(name)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .stdout(log(format!("{name}.out")))
            .stderr(log(format!("{name}.err")))
            .spawn()
            .unwrap();
        self.daemons.push((name.into(), child));
    }

    /// Waits until the node is up and idle (nothing may be submitted before).
    fn wait_idle(&self) {
        let until = Instant::now() + HANG;
        loop {
            let state = self.run("sinfo", &["-h", "-o", "%t"]);
            if state.trim() == "idle" {
                return;
            }
            assert!(
                Instant::now() < until,
                "the node never came up: `{state}`; {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The node is lost as in a reboot: slurmd and the running task's processes (its
    /// slurmstepd and the `fbdt-lab case` it runs, frozen mid-task before) are killed by PID,
    /// and the controller is told the node is down — what it concludes by itself after
    /// SlurmdTimeout (300 s by default; a short one would mark a slow CI node down
    /// spuriously). Then slurmd starts again and the node returns (ReturnToService=2).
    fn lose_node(&mut self, task: &[i32]) {
        let i = self.daemons.iter().position(|(n, _)| n == "slurmd").unwrap();
        let (_, mut slurmd) = self.daemons.remove(i);
        slurmd.kill().unwrap();
        slurmd.wait().unwrap();
        for &pid in task {
            // SAFETY: killing processes of this test's own job by PID.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.run(
            "scontrol",
            &["update", "NodeName=localhost", "State=DOWN", "Reason=lost in a reboot (test)"],
        );
        self.spawn("slurmd");
        self.wait_idle();
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for name in ["slurmctld.log", "slurmd.log", "slurmctld.err", "slurmd.err"] {
            let text = std::fs::read_to_string(self.dir.path().join("log").join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            s += &format!(
                "\n--- {name}\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        s
    }

    /// A Slurm client command against this cluster; its stdout.
    fn run(&self, name: &str, args: &[&str]) -> String {
        let o = tool(name).args(args).env("SLURM_CONF", &self.conf).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// fbdt-lab with SLURM_CONF set; must succeed; its stdout.
    fn lab(&self, args: &[&str]) -> String {
        let o = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "fbdt-lab {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Waits until no task of `job` is pending or running.
    /// Waits until Slurm says `merge`'s dependency can never be met (a task of its array
    /// failed or was cancelled), then cancels it.
    fn cancel_unsatisfiable(&self, merge: &str) {
        let until = Instant::now() + HANG;
        loop {
            let reason = self.run("squeue", &["-h", "-j", merge, "-o", "%r"]);
            if reason.contains("DependencyNeverSatisfied") {
                break;
            }
            assert!(Instant::now() < until, "merge job {merge}: `{reason}`{}", self.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
        self.run("scancel", &[merge]);
    }

    fn wait_gone(&self, job: &str) {
        let until = Instant::now() + HANG;
        while !self.run("squeue", &["-h", "-j", job, "-o", "%i %T"]).trim().is_empty() {
            assert!(Instant::now() < until, "job {job} never ended{}", self.logs());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// `job`'s JobState.
    fn state(&self, job: &str) -> String {
        let text = self.run("scontrol", &["show", "job", job]);
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix("JobState="))
            .unwrap_or("unknown")
            .to_string()
    }
}

/// The job ids `fbdt-lab slurm submit` printed: (array, merge).
fn job_ids(stdout: &str) -> (String, String) {
    let id = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split(':').next())
            .unwrap_or_else(|| panic!("no `{prefix}` in {stdout}"))
            .trim()
            .to_string()
    };
    (id("array job "), id("merge job "))
}

#[test]
fn a_campaign_runs_as_a_job_array_a_cancelled_task_is_requeued_and_the_merge_matches() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP: single-node Slurm test: {why}");
        return;
    }
    let cluster = Cluster::start();
    let (_tmp, one, dir) = scratch("one.json");
    let sweep = "los --over seed --values 1..12/1 --schemes fbdt,tcp:wifi --duration 0.5";
    one_process_and_plan("sweep", sweep, "--json", &one, &[], &dir);

    // 24 cases, two per task, two tasks at a time: the last task is still pending when it
    // is cancelled, so the merge job's dependency can never be met.
    let out = cluster.lab(&["slurm", "submit", p(&dir), "--pack", "2", "--max-parallel", "2"]);
    assert!(out.contains("24 cases in 12 tasks"), "{out}");
    let (array, merge) = job_ids(&out);
    cluster.run("scancel", &[&format!("{array}_11")]);
    cluster.wait_gone(&array);
    cluster.cancel_unsatisfiable(&merge);
    let status = cluster.lab(&["slurm", "status", p(&dir)]);
    assert!(status.contains("24 cases, 22 done, 2 missing"), "{status}");

    let o = lab(&["merge", p(&dir), "--requeue"]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read_to_string(dir.join("requeue.txt")).unwrap(), "22\n23\n");
    let out = cluster.lab(&["slurm", "submit", p(&dir), "--requeue"]);
    assert!(out.contains("2 cases in 2 tasks"), "{out}");
    let (array, merge) = job_ids(&out);
    cluster.wait_gone(&array);
    cluster.wait_gone(&merge);
    assert_eq!(cluster.state(&merge), "COMPLETED", "{}", cluster.logs());

    assert_eq!(steady(json(&dir.join("sweep.json"))), steady(json(&one)));
    let stamps = json(&dir.join("campaign.json"));
    assert_eq!(stamps["complete"], true);
    for s in stamps["stamps"].as_array().unwrap() {
        assert!(s["host"]["slurm_job"].is_string(), "{s}");
        assert_eq!(s["verdict"]["label"], "simulator");
    }

    // The same campaign again, and its node is lost while a task runs.
    let dir = dir.with_file_name("lost-node");
    let plan = format!("plan sweep {sweep} --out {}", p(&dir));
    common::ok(&plan.split_whitespace().collect::<Vec<_>>());
    let mut cluster = cluster;
    lost_node_requeued(&mut cluster, &dir, &one);
    drop(cluster);
}

/// `pid`'s parent and command name, from /proc.
fn parent_and_name(pid: i32) -> Option<(i32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let ppid = stat[close + 2..].split_whitespace().nth(1)?.parse().ok()?;
    Some((ppid, stat[open + 1..close].to_string()))
}

/// The `fbdt-lab case <dir> --index …` process a task of `dir`'s campaign runs, if one runs
/// now, and the cases it runs.
fn case_process(dir: &Path) -> Option<(i32, Vec<usize>)> {
    let exe = env!("CARGO_BIN_EXE_fbdt-lab");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.len() < 5 || args[0] != exe || args[1] != "case" || args[2] != p(dir) || args[3] != "--index" {
            return None;
        }
        let indices = args[4].split(',').map(|i| i.parse().ok()).collect::<Option<Vec<usize>>>()?;
        Some((pid, indices))
    })
}

/// 24 cases in two tasks of 12, one at a time. The first task is frozen (SIGSTOP, by PID)
/// as soon as its process is seen, so the loss strikes mid-task whatever the host's speed;
/// the node is lost; the task fails (NODE_FAIL: the array asks Slurm not to requeue) and
/// the merge job's dependency can never be met. `merge --requeue` lists the cases the lost
/// task did not finish, `slurm submit --requeue` runs them, and the merge job's sweep is
/// the one-process sweep.
fn lost_node_requeued(cluster: &mut Cluster, dir: &Path, one: &Path) {
    let out = cluster.lab(&["slurm", "submit", p(dir), "--pack", "12", "--max-parallel", "1"]);
    assert!(out.contains("24 cases in 2 tasks"), "{out}");
    let (array, merge) = job_ids(&out);
    let until = Instant::now() + HANG;
    let mut polls = 0u64;
    let (frozen, indices) = loop {
        if let Some((pid, indices)) = case_process(dir) {
            // SAFETY: signalling this test's own job's process by its PID.
            if unsafe { libc::kill(pid, libc::SIGSTOP) } == 0 {
                break (pid, indices);
            }
        }
        polls += 1;
        if polls % 50 == 0 {
            assert!(
                !cluster.run("squeue", &["-h", "-j", &array]).trim().is_empty(),
                "every task of {array} ended before one was seen running{}",
                cluster.logs()
            );
        }
        assert!(Instant::now() < until, "no task of {array} was seen running{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(10));
    };
    // The task is the case process and the slurmstepd that started it (the array script
    // exec's the case).
    let stepd = parent_and_name(frozen)
        .map(|(parent, _)| parent)
        .filter(|&parent| parent_and_name(parent).is_some_and(|(_, name)| name.starts_with("slurmstepd")))
        .unwrap_or_else(|| panic!("the task's process {frozen} was not started by a slurmstepd"));
    let task = [stepd, frozen];
    // What the frozen task had not written yet is lost with the node.
    let lost: Vec<usize> = indices
        .iter()
        .copied()
        .filter(|i| !dir.join(format!("cases/{i}.json")).exists())
        .collect();
    assert!(!lost.is_empty(), "the task {indices:?} was frozen after its last case");
    cluster.lose_node(&task);

    // The other task runs on the returned node; the lost one never completes.
    cluster.wait_gone(&array);
    cluster.cancel_unsatisfiable(&merge);
    let o = lab(&["merge", p(dir), "--requeue"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    let listed: Vec<usize> = std::fs::read_to_string(dir.join("requeue.txt"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    // Exactly the lost task's cases it had not written when it froze.
    assert_eq!(listed, lost, "{stderr}");
    assert!(
        stderr.contains(&format!("{} missing", lost.len())) && stderr.contains("not run yet"),
        "{stderr}"
    );
    let out = cluster.lab(&["slurm", "submit", p(dir), "--requeue"]);
    assert!(out.contains(&format!("{} cases in {} tasks", lost.len(), lost.len())), "{out}");
    let (array, merge) = job_ids(&out);
    cluster.wait_gone(&array);
    cluster.wait_gone(&merge);
    assert_eq!(cluster.state(&merge), "COMPLETED", "{}", cluster.logs());
    assert_eq!(steady(json(&dir.join("sweep.json"))), steady(json(one)));
    assert_eq!(json(&dir.join("campaign.json"))["complete"], true);
}
