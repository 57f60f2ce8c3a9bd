//! Built-in scenarios: the TOML files under scenarios/ compiled into the binary, so
//! `fbdt-lab run los` works from any directory.

use crate::model::Scenario;
use crate::parse;

macro_rules! builtin_files {
    ($($name:literal),* $(,)?) => {
        const FILES: &[(&str, &str)] = &[
            $(($name, include_str!(concat!("../../../scenarios/", $name, ".toml")))),*
        ];
    };
}

builtin_files!(
    "tc-normal",
    "tc-loss-wigig",
    "tc-delay-wigig",
    "los",
    "nlos",
    "mobility",
    "blockage",
    "scan-wifi",
    "contention-wifi",
    "contention-airtime",
    "rats4",
    "rats4-loss1",
    "rats4-loss2",
    "cotag-corr-pos",
    "cotag-corr-zero",
    "cotag-corr-neg",
    "shared-bottleneck",
    "tc-bursty",
);

pub fn builtin_names() -> Vec<&'static str> {
    FILES.iter().map(|(n, _)| *n).collect()
}

/// The TOML text of a built-in, e.g. to copy it as a starting point.
pub fn builtin_text(name: &str) -> Option<&'static str> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

pub fn builtin(name: &str) -> Option<Scenario> {
    let text = builtin_text(name)?;
    // The origin mirrors the file's place in the repository, so messages point at it and the
    // scenario name comes out as the file stem.
    let origin = format!("scenarios/{name}.toml");
    // Every built-in is parsed by the tests; failing here is a bug in this crate, not input.
    Some(parse::from_toml_str(text, &origin).unwrap_or_else(|e| panic!("built-in scenario is invalid: {e}")))
}
