//! Every command's `--help`, compared with the snapshots in `tests/help/`: a refactor that
//! changes a command, a flag or its text fails here. After a deliberate change, write the
//! new snapshots with `FBDT_LAB_HELP_UPDATE=1 cargo test -p fbdt-lab --test help` and
//! review their diff.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn help(words: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_fbdt-lab"))
        .args(words)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{words:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands a help text lists under "Commands:" (without `help`).
fn subcommands(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| l.trim_end() != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   ")) // wrapped descriptions
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/help")
}

fn file_name(words: &[String]) -> String {
    if words.is_empty() {
        "fbdt-lab.txt".into()
    } else {
        format!("fbdt-lab_{}.txt", words.join("_"))
    }
}

#[test]
fn every_commands_help_matches_its_snapshot() {
    let update = std::env::var_os("FBDT_LAB_HELP_UPDATE").is_some();
    let dir = snapshot_dir();
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = BTreeSet::new();
    let mut differ = Vec::new();
    while let Some(words) = todo.pop() {
        let text = help(&words);
        for c in subcommands(&text) {
            let mut next = words.clone();
            next.push(c);
            todo.push(next);
        }
        let name = file_name(&words);
        let path = dir.join(&name);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            differ.push(name.clone());
        }
        seen.insert(name);
    }
    assert!(seen.len() > 10, "found only {seen:?}");
    let stored: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        stored, seen,
        "commands without a snapshot, or snapshots without a command"
    );
    assert!(differ.is_empty(), "--help differs from tests/help/ for {differ:?}");
}
