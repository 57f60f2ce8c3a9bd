//! `fbdt-lab plan` + `case` + `merge` give what the one-process command gives (apart from
//! wall-clock and host fields), cases are skipped when done and refused when corrupt or
//! from another manifest, and an incomplete campaign is reported, not merged.

mod common;

use common::{json, lab, ok, one_process_and_plan, p, scratch, steady, words};

#[test]
fn a_sweep_campaign_merges_to_the_one_process_sweep_and_its_cases_are_checked() {
    let (tmp, one, dir) = scratch("one.json");
    let sweep = "los --over seed --values 1..3/1 --schemes fbdt,tcp:wifi --duration 0.5";
    one_process_and_plan("sweep", sweep, "--json", &one, &[], &dir);
    let m = json(&dir.join("manifest.json"));
    assert_eq!(m["cases"].as_array().unwrap().len(), 6);
    assert_eq!(m["cases"][1]["label"], "seed=1 tcp:wifi");

    // Incomplete: merge lists what is missing and fails; --requeue writes the list.
    ok(&["case", p(&dir), "--index", "0-2"]);
    let o = lab(&["merge", p(&dir), "--requeue"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(stderr.contains("missing 3 (seed=2 tcp:wifi): not run yet"), "{stderr}");
    assert!(stderr.contains("incomplete: 3 of 6 cases missing (3,4,5)"), "{stderr}");
    assert_eq!(std::fs::read_to_string(dir.join("requeue.txt")).unwrap(), "3\n4\n5\n");
    assert!(!dir.join("sweep.json").exists());

    // The rest, all at once: the done ones are skipped.
    let stderr = ok(&["case", p(&dir)]);
    assert!(
        stderr.contains("case 0 (seed=1 fbdt): done already, skipped"),
        "{stderr}"
    );
    ok(&["merge", p(&dir)]);
    assert_eq!(steady(json(&dir.join("sweep.json"))), steady(json(&one)));
    let stamps = json(&dir.join("campaign.json"));
    assert_eq!(stamps["complete"], true);
    assert_eq!(stamps["stamps"][5]["verdict"]["label"], "simulator");
    assert!(stamps["stamps"][0]["host"]["cores"].as_u64().unwrap() >= 1);

    // A corrupt result is refused and run again; so is one of another campaign.
    let case1 = dir.join("cases/1.json");
    std::fs::write(&case1, "{\"manifest_hash\": \"trunc").unwrap();
    let stderr = ok(&["case", p(&dir), "--index", "1"]);
    assert!(
        stderr.contains("refusing") && stderr.contains("not a case result"),
        "{stderr}"
    );
    json(&case1);
    let other = tmp.path().join("other");
    ok(&words(
        "plan sweep los --over seed --values 9 --schemes tcp:wifi --duration 0.5 --out",
        &[p(&other)],
    ));
    ok(&["case", p(&other)]);
    std::fs::copy(other.join("cases/0.json"), dir.join("cases/0.json")).unwrap();
    let o = lab(&["merge", p(&dir)]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("written for another manifest"));
    let stderr = ok(&["case", p(&dir), "--index", "0"]);
    assert!(
        stderr.contains("another manifest") && stderr.contains("running the case again"),
        "{stderr}"
    );
    ok(&["merge", p(&dir)]);
    assert_eq!(steady(json(&dir.join("sweep.json"))), steady(json(&one)));

    // Planning a different campaign into the folder is refused; bad input is an error.
    let o = lab(&words("plan sweep los --over seed --values 7 --out", &[p(&dir)]));
    assert!(String::from_utf8_lossy(&o.stderr).contains("another campaign"));
    let o = lab(&["case", p(&dir), "--index", "99"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("case 99 is not in this campaign"));
    let o = lab(&["merge", p(&tmp.path().join("none"))]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("manifest.json"));
}

/// The throughput suite and the workloads section (simulator), one case per scenario and
/// per workload scenario, merged to the one-process `paper`'s summary.json, per-scenario
/// JSON and workloads.json.
#[test]
fn a_paper_campaign_merges_to_the_one_process_summary() {
    let (_tmp, one, dir) = scratch("one");
    let paper = "--backend sim --quick --scenarios los,tc-delay-wigig --duration 1 --workload-scenarios los,blockage";
    one_process_and_plan("paper", paper, "--out", &one, &[], &dir);
    let m = json(&dir.join("manifest.json"));
    let labels: Vec<&str> = m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["los", "tc-delay-wigig", "workloads los", "workloads blockage"]);
    ok(&["case", p(&dir), "--index", "3,1"]);
    ok(&["case", p(&dir), "--index", "0,2"]);
    ok(&["merge", p(&dir)]);
    assert_eq!(
        steady(json(&dir.join("summary.json"))),
        steady(json(&one.join("summary.json")))
    );
    for f in ["los.json", "tc-delay-wigig.json", "workloads.json"] {
        assert_eq!(steady(json(&dir.join(f))), steady(json(&one.join(f))), "{f}");
    }
    let w = json(&dir.join("workloads.json"));
    assert_eq!(w["tables"].as_array().unwrap().len(), 10, "5 workloads × 2 scenarios");
    assert!(dir.join("report.html").exists() && dir.join("bars-fig3b.png").exists());
    let stamps = json(&dir.join("campaign.json"));
    assert_eq!(stamps["stamps"].as_array().unwrap().len(), 4);
    assert_eq!(stamps["stamps"][3]["verdict"]["label"], "simulator");
}

/// The one-process `paper` is its own campaign: the manifest and each case's result in
/// --out, beside the report. An interrupted run resumed with --resume runs only the cases
/// it lacks and ends with the same report; --resume into another campaign is refused, and a
/// run without it measures everything again.
#[test]
fn an_interrupted_paper_resumes_where_it_stopped() {
    let (_tmp, out, _) = scratch("paper");
    let paper = words("paper --backend sim --quick --scenarios los,blockage --duration 1 --skip-workloads --out", &[p(&out)]);
    ok(&paper);
    let m = json(&out.join("manifest.json"));
    assert_eq!(m["kind"], "paper");
    assert_eq!(m["cases"].as_array().unwrap().len(), 2);
    let stamps = json(&out.join("campaign.json"));
    assert_eq!(stamps["complete"], true);
    assert_eq!(stamps["stamps"][1]["label"], "blockage");
    let first = steady(json(&out.join("summary.json")));
    let case0 = std::fs::read_to_string(out.join("cases/0.json")).unwrap();

    // As if stopped during blockage: its case result and JSON absent.
    std::fs::remove_file(out.join("cases/1.json")).unwrap();
    std::fs::remove_file(out.join("blockage.json")).unwrap();
    let stderr = ok(&[&paper[..], &["--resume"]].concat());
    assert!(stderr.contains("continuing the campaign"), "{stderr}");
    assert!(
        stderr.contains("[1/8] los") && stderr.contains("--resume continues, skipped"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("skipped").count(), 1, "blockage runs again: {stderr}");
    assert_eq!(std::fs::read_to_string(out.join("cases/0.json")).unwrap(), case0, "los kept");
    assert!(out.join("blockage.json").exists());
    assert_eq!(steady(json(&out.join("summary.json"))), first, "the simulator is deterministic");
    // The folder is a campaign like any other: `merge` rebuilds the same report from it.
    ok(&["merge", p(&out)]);
    assert_eq!(steady(json(&out.join("summary.json"))), first);

    // Another command line is another campaign: --resume refuses it; without --resume the
    // folder's earlier results go and every case runs.
    let other = words("paper --backend sim --quick --scenarios los --duration 1 --skip-workloads --out", &[p(&out)]);
    let o = lab(&[&other[..], &["--resume"]].concat());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && stderr.contains("holds another campaign"), "{stderr}");
    assert_eq!(std::fs::read_to_string(out.join("cases/0.json")).unwrap(), case0);
    let stderr = ok(&other);
    assert!(!stderr.contains("skipped"), "{stderr}");
    assert_eq!(json(&out.join("manifest.json"))["cases"].as_array().unwrap().len(), 1);
    assert!(!out.join("cases/1.json").exists());
}

#[test]
fn a_fault_campaign_in_parts_merges_to_the_one_process_campaign() {
    let (_tmp, one, dir) = scratch("one.json");
    let faults = "los --runs 5 --schemes fbdt --duration 5";
    one_process_and_plan("faults", faults, "--json", &one, &["--per-case", "2"], &dir);
    assert_eq!(json(&dir.join("manifest.json"))["cases"].as_array().unwrap().len(), 3);
    ok(&["case", p(&dir)]);
    ok(&["merge", p(&dir)]);
    assert_eq!(steady(json(&dir.join("faults.json"))), steady(json(&one)));
}

#[test]
fn slurm_submit_without_sbatch_says_so_and_script_only_writes_the_scripts() {
    let (_tmp, _, dir) = scratch("unused");
    ok(&words(
        "plan sweep los --over seed --values 1,2 --duration 0.5 --out",
        &[p(&dir)],
    ));
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args(["slurm", "submit", p(&dir), "--pack", "2"])
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("sbatch not found on PATH"),
        "{stderr}"
    );
    ok(&["slurm", "submit", p(&dir), "--script-only", "--exclusive"]);
    let script = std::fs::read_to_string(dir.join("slurm/submit-0/array.sh")).unwrap();
    assert!(
        script.contains("#SBATCH --array=0-1\n") && script.contains("#SBATCH --exclusive\n"),
        "{script}"
    );
    let o = lab(&["slurm", "status", p(&dir)]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("2 cases, 0 done, 2 missing") && stdout.contains("not submitted"),
        "{stdout}"
    );
}
