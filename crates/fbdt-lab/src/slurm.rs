//! `fbdt-lab slurm submit|status DIR`: a campaign's cases as a Slurm job array (several
//! short cases packed into a task; testbed cases on whole nodes) and a merge job that runs
//! after every task succeeded (docs/campaigns.md).

use std::path::{Path, PathBuf};
use std::process::Command as Process;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use fbdt_harness::campaign::{write_atomic, write_json_atomic, CaseResult, Collected, Existing, Manifest, Requeue};
use serde::{Deserialize, Serialize};

#[derive(Subcommand, Debug)]
pub enum SlurmCommand {
    /// Write and submit the job array of DIR's cases not done yet, and a merge job that runs
    /// after all of them succeeded (--dependency=afterok); prints the job ids.
    Submit(SubmitArgs),
    /// Cases done, missing and unfaithful, and the campaign's jobs in squeue.
    Status {
        /// The campaign folder.
        dir: PathBuf,
    },
}

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// The campaign folder: on a filesystem every node shares.
    pub dir: PathBuf,
    /// Slurm partition of every job.
    #[arg(long)]
    pub partition: Option<String>,
    /// Node features the tasks need (sbatch --constraint).
    #[arg(long)]
    pub constraint: Option<String>,
    /// At most K array tasks at once.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_parallel: Option<u32>,
    /// A whole node per task (always so when the campaign has testbed cases: one node is one
    /// testbed); otherwise simulator tasks take one core each and may share a node.
    #[arg(long)]
    pub exclusive: bool,
    /// Cases per array task (clusters limit how fast array tasks start: pack short
    /// simulator cases).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub pack: u32,
    /// Only the cases listed in DIR/requeue.txt (written by `fbdt-lab merge --requeue`).
    #[arg(long)]
    pub requeue: bool,
    /// Write the scripts, submit nothing.
    #[arg(long)]
    pub script_only: bool,
}

/// One submission, kept in DIR/slurm/jobs.json.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Submission {
    array_job: String,
    merge_job: String,
    cases: Vec<usize>,
    script: PathBuf,
}

fn jobs_path(dir: &Path) -> PathBuf {
    dir.join("slurm").join("jobs.json")
}

fn load_jobs(dir: &Path) -> Result<Vec<Submission>> {
    let path = jobs_path(dir);
    match std::fs::read(&path) {
        Ok(t) => serde_json::from_slice(&t).with_context(|| format!("{}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(anyhow!("{}: {e}", path.display())),
    }
}

/// `s` quoted for bash.
fn quote(s: &Path) -> String {
    format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"))
}

/// The `#SBATCH` lines every job of the campaign shares.
fn common_lines(args: &SubmitArgs, cwd: &Path) -> String {
    let mut s = format!("#SBATCH --chdir={}\n#SBATCH --ntasks=1\n", cwd.display());
    if let Some(p) = &args.partition {
        s += &format!("#SBATCH --partition={p}\n");
    }
    if let Some(c) = &args.constraint {
        s += &format!("#SBATCH --constraint={c}\n");
    }
    s
}

/// The array script: task k runs cases `CASES[k*pack .. (k+1)*pack]`.
fn array_script(args: &SubmitArgs, m: &Manifest, cases: &[usize], exe: &Path, dir: &Path, cwd: &Path) -> String {
    let tasks = cases.len().div_ceil(args.pack as usize);
    let testbed = cases.iter().any(|&i| m.cases[i].is_testbed());
    let mut s = String::from("#!/bin/bash\n");
    s += &format!(
        "#SBATCH --job-name=fbdt-{}\n",
        &m.short_hash()[..8.min(m.short_hash().len())]
    );
    s += &format!(
        "#SBATCH --array=0-{}{}\n",
        tasks - 1,
        args.max_parallel.map_or(String::new(), |k| format!("%{k}"))
    );
    s += &format!("#SBATCH --output={}/slurm/logs/case-%A_%a.out\n", dir.display());
    s += &common_lines(args, cwd);
    if testbed || args.exclusive {
        // One node is one testbed: nothing else may take its cores while a case measures.
        s += "#SBATCH --exclusive\n";
    } else {
        s += "#SBATCH --cpus-per-task=1\n";
    }
    // A task lost with its node fails (NODE_FAIL) instead of being requeued by Slurm, which
    // sites set either way (JobRequeue): what a campaign runs again is then always what
    // `merge --requeue` lists, and `submit --requeue` runs it.
    s += "#SBATCH --no-requeue\n";
    s += &format!(
        "# fbdt-lab slurm submit: {} cases of campaign {} ({} `{}`), {} per task\n",
        cases.len(),
        m.short_hash(),
        m.cases.len(),
        m.kind,
        args.pack
    );
    s += "set -euo pipefail\n";
    s += &format!(
        "CASES=({})\n",
        cases.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" ")
    );
    s += &format!("PACK={}\n", args.pack);
    s += "mine=(\"${CASES[@]:$((SLURM_ARRAY_TASK_ID * PACK)):PACK}\")\n";
    s += "IFS=,\n";
    s += &format!("exec {} case {} --index \"${{mine[*]}}\"\n", quote(exe), quote(dir));
    s
}

fn merge_script(args: &SubmitArgs, m: &Manifest, exe: &Path, dir: &Path, cwd: &Path) -> String {
    let mut s = String::from("#!/bin/bash\n");
    s += &format!(
        "#SBATCH --job-name=fbdt-{}-merge\n",
        &m.short_hash()[..8.min(m.short_hash().len())]
    );
    s += &format!("#SBATCH --output={}/slurm/logs/merge-%j.out\n", dir.display());
    s += &common_lines(args, cwd);
    s += "#SBATCH --cpus-per-task=1\n";
    s += &format!("exec {} merge {}\n", quote(exe), quote(dir));
    s
}

/// Runs `sbatch --parsable ARGS`; the job id it prints.
fn sbatch(extra: &[String], script: &Path) -> Result<String> {
    let out = match Process::new("sbatch")
        .arg("--parsable")
        .args(extra)
        .arg(script)
        .output()
    {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "sbatch not found on PATH: submitting needs Slurm's client commands on this machine \
             (Debian: slurm-client). The script is {}: submit it with sbatch where Slurm is, or run \
             the cases here with `fbdt-lab case DIR`",
            script.display()
        ),
        Err(e) => bail!("running sbatch: {e}"),
    };
    if !out.status.success() {
        bail!(
            "sbatch {} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // `--parsable` prints `jobid` or `jobid;cluster`.
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        bail!("sbatch printed no job id: `{}`", text.trim());
    }
    Ok(id)
}

fn submit(args: SubmitArgs) -> Result<()> {
    let dir = args
        .dir
        .canonicalize()
        .with_context(|| format!("campaign folder {}", args.dir.display()))?;
    let m = Manifest::load(&dir).with_context(|| format!("campaign {}", dir.display()))?;
    let cases: Vec<usize> = if args.requeue {
        let v = Requeue::load_indices(&dir).context("--requeue (run `fbdt-lab merge DIR --requeue` first)")?;
        for &i in &v {
            m.case(i)?;
        }
        v
    } else {
        let mut v = Vec::new();
        for c in &m.cases {
            if !matches!(CaseResult::existing(&dir, &m, c.index)?, Existing::Done(_)) {
                v.push(c.index);
            }
        }
        v
    };
    if cases.is_empty() {
        println!(
            "nothing to submit: every case is done; `fbdt-lab merge {}` builds the report",
            dir.display()
        );
        return Ok(());
    }
    let exe = std::env::current_exe().context("the path of this fbdt-lab")?;
    let cwd = std::env::current_dir().context("the current folder")?;
    let earlier = load_jobs(&dir)?;
    let sub = dir.join("slurm").join(format!("submit-{}", earlier.len()));
    std::fs::create_dir_all(&sub).with_context(|| format!("creating {}", sub.display()))?;
    std::fs::create_dir_all(dir.join("slurm").join("logs")).context("creating the log folder")?;
    let array = sub.join("array.sh");
    let merge = sub.join("merge.sh");
    write_atomic(&array, array_script(&args, &m, &cases, &exe, &dir, &cwd).as_bytes())?;
    write_atomic(&merge, merge_script(&args, &m, &exe, &dir, &cwd).as_bytes())?;
    let tasks = cases.len().div_ceil(args.pack as usize);
    if args.script_only {
        println!(
            "wrote {} ({tasks} tasks for {} cases) and {}; submit: sbatch {0}, then sbatch --dependency=afterok:<id> {}",
            array.display(),
            cases.len(),
            merge.display(),
            merge.display()
        );
        return Ok(());
    }
    let array_job = sbatch(&[], &array)?;
    let merge_job = sbatch(&[format!("--dependency=afterok:{array_job}")], &merge)?;
    let mut jobs = earlier;
    jobs.push(Submission {
        array_job: array_job.clone(),
        merge_job: merge_job.clone(),
        cases: cases.clone(),
        script: array.clone(),
    });
    write_json_atomic(&jobs_path(&dir), &jobs)?;
    println!("array job {array_job}: {} cases in {tasks} tasks", cases.len());
    println!("merge job {merge_job}: after every task succeeded (afterok)");
    Ok(())
}

fn status(dir: &Path) -> Result<()> {
    let m = Manifest::load(dir).with_context(|| format!("campaign {}", dir.display()))?;
    let c = Collected::of(dir, &m)?;
    println!(
        "{}: {} cases, {} done, {} missing, {} unfaithful",
        dir.display(),
        m.cases.len(),
        c.done.len(),
        c.missing.len(),
        c.unfaithful.len()
    );
    let jobs = load_jobs(dir)?;
    let Some(last) = jobs.last() else {
        println!("not submitted to Slurm (`fbdt-lab slurm submit {}`)", dir.display());
        return Ok(());
    };
    println!(
        "last submission: array job {}, merge job {}",
        last.array_job, last.merge_job
    );
    let ids: Vec<&str> = jobs
        .iter()
        .flat_map(|j| [j.array_job.as_str(), j.merge_job.as_str()])
        .collect();
    match Process::new("squeue")
        .args(["-h", "-j", &ids.join(","), "-o", "%i %T %r"])
        .output()
    {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            if text.trim().is_empty() {
                println!("squeue: none of the campaign's jobs is pending or running");
            } else {
                for line in text.lines() {
                    println!("squeue: {line}");
                }
            }
        }
        Ok(o) => println!("squeue failed: {}", String::from_utf8_lossy(&o.stderr).trim()),
        Err(_) => println!("squeue not found on PATH: the queue is not shown"),
    }
    Ok(())
}

pub fn run(cmd: SlurmCommand) -> Result<()> {
    match cmd {
        SlurmCommand::Submit(args) => submit(args),
        SlurmCommand::Status { dir } => status(&dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fbdt_harness::campaign::Case;

    fn manifest(backend: &str, n: usize) -> Manifest {
        let cases = (0..n)
            .map(|i| Case::new(&format!("c{i}"), "los", backend, vec!["run".into(), "los".into()]))
            .collect();
        Manifest::new("paper", vec!["paper".into()], cases)
    }

    fn args(pack: u32, exclusive: bool) -> SubmitArgs {
        SubmitArgs {
            dir: "/c".into(),
            partition: Some("lab".into()),
            constraint: None,
            max_parallel: Some(4),
            exclusive,
            pack,
            requeue: false,
            script_only: true,
        }
    }

    #[test]
    fn simulator_cases_share_nodes_and_pack_testbed_cases_take_whole_nodes() {
        let m = manifest("sim", 5);
        let s = array_script(
            &args(2, false),
            &m,
            &[0, 1, 2, 4],
            Path::new("/bin/lab"),
            Path::new("/c"),
            Path::new("/w"),
        );
        assert!(s.contains("#SBATCH --array=0-1%4\n"), "{s}");
        assert!(
            s.contains("#SBATCH --cpus-per-task=1\n") && !s.contains("--exclusive"),
            "{s}"
        );
        assert!(s.contains("CASES=(0 1 2 4)\nPACK=2\n"), "{s}");
        assert!(
            s.contains("#SBATCH --partition=lab\n#") || s.contains("#SBATCH --partition=lab\n"),
            "{s}"
        );
        assert!(s.contains("exec '/bin/lab' case '/c' --index \"${mine[*]}\""), "{s}");
        let m = manifest("emu", 3);
        let s = array_script(
            &args(1, false),
            &m,
            &[0, 1, 2],
            Path::new("/bin/lab"),
            Path::new("/c"),
            Path::new("/w"),
        );
        assert!(
            s.contains("#SBATCH --exclusive\n") && s.contains("--array=0-2%4"),
            "{s}"
        );
        let s = merge_script(
            &args(1, false),
            &m,
            Path::new("/bin/lab"),
            Path::new("/c'x"),
            Path::new("/w"),
        );
        assert!(s.contains("exec '/bin/lab' merge '/c'\\''x'"), "{s}");
    }
}
