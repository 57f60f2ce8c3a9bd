//! A one-process command run as its own campaign: the manifest `plan` would write goes into
//! the command's output folder, whose `cases/` then keeps each case's result as it finishes,
//! so an interrupted run can be resumed and any case can be looked at (or merged) alone.

use std::path::Path;

use anyhow::{bail, Result};
use fbdt_harness::campaign::{Manifest, Requeue};

/// What an earlier campaign left in `dir` besides its report.
fn remove_earlier(dir: &Path) -> Result<()> {
    let cases = dir.join("cases");
    if cases.is_dir() {
        std::fs::remove_dir_all(&cases).map_err(|e| anyhow::anyhow!("removing {}: {e}", cases.display()))?;
    }
    for f in [
        Manifest::path(dir),
        dir.join("campaign.json"),
        Requeue::txt_path(dir),
        Requeue::json_path(dir),
    ] {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => bail!("removing {}: {e}", f.display()),
        }
    }
    Ok(())
}

/// Makes `dir` the home of `manifest`. Without `resume` whatever an earlier campaign left
/// there goes first (a new run measures everything again); with it the folder must hold
/// this very campaign, whose finished cases are then kept, or none.
pub(crate) fn start(dir: &Path, manifest: Manifest, resume: bool) -> Result<Manifest> {
    let earlier = Manifest::path(dir).exists().then(|| Manifest::load(dir));
    match (resume, earlier) {
        (true, Some(Ok(old))) if old.hash == manifest.hash => {
            eprintln!(
                "--resume: continuing the campaign in {} (manifest {})",
                dir.display(),
                old.short_hash()
            );
        }
        (true, Some(Ok(old))) => bail!(
            "--resume: {} holds another campaign (manifest {}, planned by `{}`); this command \
             line or this build's plan differs — run without --resume to start over",
            dir.display(),
            old.short_hash(),
            old.planned_by.join(" ")
        ),
        (true, Some(Err(e))) => bail!(
            "--resume: {} holds a campaign this build cannot read ({e}); run without --resume to start over",
            dir.display()
        ),
        (true, None) => eprintln!("--resume: nothing to resume in {}; running every case", dir.display()),
        (false, _) => remove_earlier(dir)?,
    }
    manifest.write(dir)?;
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fbdt_harness::campaign::Case;

    fn manifest(values: &str) -> Manifest {
        let command: Vec<String> = ["sweep", "los", "--values", values].map(String::from).to_vec();
        Manifest::new("sweep", command.clone(), vec![Case::new("a", "los", "sim", command)])
    }

    #[test]
    fn a_new_run_clears_the_folder_and_resume_keeps_only_its_own_campaign() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        start(d, manifest("1"), false).unwrap();
        std::fs::write(Manifest::case_path(d, 0), "{}").unwrap();
        std::fs::write(d.join("campaign.json"), "{}").unwrap();
        std::fs::write(d.join("report.html"), "kept").unwrap();

        // Resuming the same campaign keeps its results.
        start(d, manifest("1"), true).unwrap();
        assert!(Manifest::case_path(d, 0).exists());
        // Resuming into another campaign's folder is refused and changes nothing.
        let e = start(d, manifest("2"), true).unwrap_err().to_string();
        assert!(e.contains("holds another campaign"), "{e}");
        assert!(Manifest::case_path(d, 0).exists());
        // A new run, of this campaign or another, starts from an empty folder of results.
        start(d, manifest("2"), false).unwrap();
        assert!(!Manifest::case_path(d, 0).exists() && !d.join("campaign.json").exists());
        assert_eq!(Manifest::load(d).unwrap().hash, manifest("2").hash);
        assert!(d.join("report.html").exists(), "the report is the merge's to replace");
        // Nothing to resume: every case runs.
        let fresh = d.join("fresh");
        start(&fresh, manifest("1"), true).unwrap();
        assert!(Manifest::path(&fresh).exists());
    }
}
