//! Crates whose import circles were opened (issue 38) stay without one: the repository's
//! checker (`tools/import_circles.py`, docs/architecture.md) over them. Skips, saying why,
//! where python3 is missing.

use std::path::Path;
use std::process::Command;

/// The crates kept free of import circles: every crate of the workspace since the last two
/// (fbdt's main.rs ↔ its commands, fbdt-core's `wire/` mod.rs ↔ frames) were opened.
const OPENED: &[&str] = &[
    "cotag",
    "cotag-net",
    "fbdt",
    "fbdt-core",
    "fbdt-emu",
    "fbdt-font",
    "fbdt-harness",
    "fbdt-lab",
    "fbdt-mux",
    "fbdt-net",
    "fbdt-scenario",
    "fbdt-sim",
    "fbdt-workload",
    "jpoc",
];

#[test]
fn opened_crates_have_no_import_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = match Command::new("python3")
        .arg(root.join("tools/import_circles.py"))
        .arg("--check")
        .args(OPENED)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            eprintln!("SKIP: cannot run python3 ({e})");
            return;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("no circle").count(), OPENED.len(), "{text}");
}
