//! `--config FILE` for `fbdt proxy` and `fbdt serve`: a TOML file whose keys are the
//! command's long options (`listen = "127.0.0.1:1080"`, `path = ["…", "…"]`,
//! `token_file = "…"`, `transparent = true`). The file's settings become arguments placed
//! before the command line's own, so both add up (repeatable options) and clap checks
//! everything once; an error about a setting from the file names the file and its line.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Subcommands that take `--config`.
const COMMANDS: [&str; 2] = ["proxy", "serve"];

/// Where each option given by the file came from.
pub struct Source {
    file: PathBuf,
    /// Long option (`--token-file`) → line.
    lines: BTreeMap<String, usize>,
}

impl Source {
    /// The file and line of the option a clap error is about, if the file gave it.
    pub fn locate(&self, e: &clap::Error) -> Option<String> {
        let arg = match e.get(clap::error::ContextKind::InvalidArg)? {
            clap::error::ContextValue::String(s) => s.clone(),
            _ => return None,
        };
        let flag = arg.split([' ', '=']).next()?;
        let line = self.lines.get(flag)?;
        Some(format!("{}:{line}", self.file.display()))
    }
}

/// Replaces `--config FILE` after `proxy`/`serve` with the file's settings.
pub fn expand(args: Vec<OsString>) -> anyhow::Result<(Vec<OsString>, Option<Source>)> {
    let cmd_at = 1;
    if !args.get(cmd_at).is_some_and(|a| COMMANDS.iter().any(|c| a == c)) {
        return Ok((args, None));
    }
    let mut rest: Vec<OsString> = Vec::new();
    let mut file: Option<PathBuf> = None;
    let mut it = args[cmd_at + 1..].iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--config" {
            let f = it.next().context("--config needs a FILE")?;
            file = Some(PathBuf::from(f));
        } else if let Some(f) = s.strip_prefix("--config=") {
            file = Some(PathBuf::from(f));
        } else {
            rest.push(a.clone());
        }
    }
    let Some(file) = file else {
        return Ok((args, None));
    };
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let (from_file, lines) = settings(&file, &text)?;
    let mut out: Vec<OsString> = args[..=cmd_at].to_vec();
    out.extend(from_file.into_iter().map(OsString::from));
    out.extend(rest);
    Ok((out, Some(Source { file, lines })))
}

/// The arguments the file's keys stand for, and the line of each option.
fn settings(file: &Path, text: &str) -> anyhow::Result<(Vec<String>, BTreeMap<String, usize>)> {
    let table: BTreeMap<String, toml::Spanned<toml::Value>> =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{}: {}", file.display(), e.to_string().trim_end()))?;
    let line_of = |at: usize| text[..at.min(text.len())].matches('\n').count() + 1;
    let (mut args, mut lines) = (Vec::new(), BTreeMap::new());
    for (key, value) in table {
        let line = line_of(value.span().start);
        let flag = format!("--{}", key.replace('_', "-"));
        if flag == "--config" {
            bail!(
                "{}:{line}: a config file cannot name another (--config)",
                file.display()
            );
        }
        let items = match value.into_inner() {
            toml::Value::Array(a) => a,
            v => vec![v],
        };
        for v in items {
            match v {
                toml::Value::Boolean(true) => args.push(flag.clone()),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => args.extend([flag.clone(), s]),
                toml::Value::Integer(i) => args.extend([flag.clone(), i.to_string()]),
                toml::Value::Float(f) => args.extend([flag.clone(), f.to_string()]),
                other => bail!(
                    "{}:{line}: {key}: expected a string, number, boolean or a list of them, found {}",
                    file.display(),
                    other.type_str()
                ),
            }
        }
        lines.insert(flag, line);
    }
    Ok((args, lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_file_becomes_arguments_before_the_command_lines() {
        let text = "listen = \"127.0.0.1:1080\"\npath = [\"a\", \"b\"]\ntransparent = true\nnft_install = false\n";
        let (args, lines) = settings(Path::new("p.toml"), text).unwrap();
        assert_eq!(
            args,
            [
                "--listen",
                "127.0.0.1:1080",
                "--path",
                "a",
                "--path",
                "b",
                "--transparent"
            ]
        );
        assert_eq!(lines["--path"], 2);
        let dir = std::env::temp_dir().join(format!("fbdt-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.toml");
        std::fs::write(&f, text).unwrap();
        let (out, src) = expand(os(&["fbdt", "proxy", "--config", f.to_str().unwrap(), "--path", "c"])).unwrap();
        assert!(src.is_some());
        let out: Vec<String> = out.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(out[..2], ["fbdt", "proxy"]);
        assert_eq!(out[out.len() - 2..], ["--path", "c"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = settings(Path::new("p.toml"), "listen = \"x\"\npath = [\"a\"\n").unwrap_err();
        assert!(
            e.to_string().contains("p.toml") && e.to_string().contains("line 2"),
            "{e}"
        );
        let e = settings(Path::new("p.toml"), "listen = \"x\"\n\nallow = { a = 1 }\n").unwrap_err();
        assert!(e.to_string().starts_with("p.toml:3: allow"), "{e}");
    }

    #[test]
    fn commands_without_config_are_untouched() {
        let a = os(&["fbdt", "perf", "--config", "x"]);
        let (out, src) = expand(a.clone()).unwrap();
        assert_eq!(out, a);
        assert!(src.is_none());
    }
}
