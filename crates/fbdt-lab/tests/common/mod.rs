//! What the campaign tests share: running fbdt-lab, reading JSON, and comparing results
//! apart from the fields that say when, how long, where or by which command they ran.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

pub fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs fbdt-lab, which must succeed; its stderr.
pub fn ok(args: &[&str]) -> String {
    let o = lab(args);
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "fbdt-lab {}: {stderr}", args.join(" "));
    stderr
}

pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `v` without the wall-clock, host and command-line fields.
pub fn steady(mut v: serde_json::Value) -> serde_json::Value {
    const VOLATILE: [&str; 6] = ["wall_s", "started", "command_line", "cores", "kernel", "jobs"];
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for k in VOLATILE {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut v);
    v
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Runs `fbdt-lab <command> <args> <out_flag> <one>` (the one-process command writing `one`)
/// and `fbdt-lab plan <command> <args> <plan_extra> --out <dir>` (the same as a campaign).
pub fn one_process_and_plan(command: &str, args: &str, out_flag: &str, one: &Path, plan_extra: &[&str], dir: &Path) {
    let args: Vec<&str> = args.split_whitespace().collect();
    let mut a = vec![command];
    a.extend(&args);
    a.extend([out_flag, p(one)]);
    ok(&a);
    let mut a = vec!["plan", command];
    a.extend(&args);
    a.extend(plan_extra);
    a.extend(["--out", p(dir)]);
    ok(&a);
}

/// A scratch folder, the one-process output `one` in it and the campaign folder.
pub fn scratch(one: &str) -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (one, dir) = (tmp.path().join(one), tmp.path().join("campaign"));
    (tmp, one, dir)
}

/// The words of `text`, then `more`: a command line.
pub fn words<'a>(text: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    text.split_whitespace().chain(more.iter().copied()).collect()
}
