//! An `fbdt[+key=value…]` scheme as flags of the `fbdt` binary: what the workloads that run
//! real applications through `fbdt serve` and `fbdt proxy` (rrul, Chromium's pages and
//! dash.js) pass to both ends, so `fbdt,fbdt+unsent=off` compares two configurations in one
//! run. An option the binaries have no flag for is refused by name, never dropped: the run
//! would otherwise measure the default under the option's label.

use anyhow::{bail, Result};
use fbdt_scenario::Scenario;

/// The options the binaries take, as a scheme names them (for the error message).
const TAKEN: &str = "cc, rtofloor, coupled, window, budget, unsent, wake, tls, sessions, plaintext";

/// The flags that run a scheme through the `fbdt serve`/`fbdt proxy` pair.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PairFlags {
    /// For both ends.
    pub both: Vec<String>,
    /// For `fbdt proxy` only (`sessions=N` → `--sessions N`).
    pub proxy: Vec<String>,
    /// `plaintext`: both ends without TLS (`--plaintext`, the server `--allow-anyone` on the
    /// testbed's private namespaces), to measure what TLS costs the pair; TLS otherwise.
    pub plaintext: bool,
}

/// The flags of `fbdt serve` and `fbdt proxy` that run scheme `name`; empty for the bare
/// `fbdt` (the binary's defaults: among them a 5-ms unsent budget, two sessions and TLS,
/// which the pair runs unless `+plaintext` says otherwise, so `+tls` adds nothing). Values
/// are checked as [`super::parse`] checks them. `sessions=N` is the proxy's alone (the
/// library has no sessions to pool) and `plaintext` the pair's alone (a library run is
/// plaintext unless `+tls`), so both are taken out before the rest is parsed.
pub fn flags(name: &str, scenario: &Scenario) -> Result<PairFlags> {
    let mut proxy = Vec::new();
    let mut kept = Vec::new();
    let mut plaintext = false;
    for part in name.trim().split('+') {
        if part == "plaintext" {
            plaintext = true;
            continue;
        }
        match part.strip_prefix("sessions=") {
            Some(v) => {
                // 1..=8: the range `fbdt proxy --sessions` takes (its `MAX_SESSIONS`).
                let n: usize = v.parse().ok().filter(|n| (1..=8).contains(n)).ok_or_else(|| {
                    anyhow::anyhow!("scheme `{name}`: sessions=`{v}`: expected a whole number from 1 to 8")
                })?;
                proxy = vec!["--sessions".to_string(), n.to_string()];
            }
            None => kept.push(part),
        }
    }
    if plaintext && kept.contains(&"tls") {
        bail!("scheme `{name}`: plaintext and tls contradict each other");
    }
    // Errors below name the scheme without its `sessions=` and `plaintext` parts.
    let both = both_flags(&kept.join("+"), scenario)?;
    Ok(PairFlags { both, proxy, plaintext })
}

fn both_flags(name: &str, scenario: &Scenario) -> Result<Vec<String>> {
    let (base, opts) = super::runtime_options(name, scenario)?;
    if base != "fbdt" && !base.starts_with("fbdt+") {
        bail!("scheme `{name}`: only fbdt[+option…] runs through `fbdt serve`/`fbdt proxy`");
    }
    super::parse(name, scenario, 0)?;
    let mut out = Vec::new();
    let mut refused = Vec::new();
    if !opts.congestion.is_empty() {
        // By path index: the proxy's i-th --path is the scenario's i-th path.
        out.extend(["--congestion".to_string(), opts.congestion.to_string()]);
    }
    if let Some(on) = opts.rto_floor {
        out.extend(["--rto-floor".to_string(), if on { "on" } else { "off" }.to_string()]);
    }
    match opts.coupling {
        fbdt_sim::Coupling::Off => {}
        fbdt_sim::Coupling::Lia if opts.coupled_when_shared => out.push("--coupled=shared".to_string()),
        fbdt_sim::Coupling::Lia => out.push("--coupled=always".to_string()),
        fbdt_sim::Coupling::Cubic => refused.push("coupled=cubic"),
    }
    if opts.eager_replacement {
        refused.push("replace");
    }
    if opts.write_batch.is_some() {
        refused.push("batch");
    }
    for part in base.split('+').skip(1) {
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        match key {
            "tls" => {}
            "window" if value != "paper" => out.extend(["--window".to_string(), value.to_string()]),
            "budget" => out.extend(["--window".to_string(), format!("budget={value}")]),
            "unsent" => out.extend(["--unsent-budget".to_string(), value.to_string()]),
            "wake" => out.extend(["--wake-copies".to_string(), value.to_string()]),
            "window" => refused.push("window=paper"),
            other => refused.push(other),
        }
    }
    if !refused.is_empty() {
        bail!(
            "scheme `{name}`: {} {} no flag on `fbdt serve`/`fbdt proxy`, so this workload cannot run it \
             (the binaries take: {TAKEN})",
            refused.join(", "),
            if refused.len() == 1 { "has" } else { "have" },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn los() -> Scenario {
        fbdt_scenario::builtin("los").expect("built-in")
    }

    #[test]
    fn options_with_a_flag_become_flags() {
        let s = los();
        let f = |n: &str| flags(n, &s).unwrap().both;
        assert!(f("fbdt").is_empty());
        assert!(f("fbdt+tls").is_empty());
        assert_eq!(f("fbdt+unsent=off"), ["--unsent-budget", "off"]);
        assert_eq!(f("fbdt+unsent=2.5"), ["--unsent-budget", "2.5"]);
        assert_eq!(f("fbdt+budget=2"), ["--window", "budget=2"]);
        assert_eq!(f("fbdt+window=64k"), ["--window", "64k"]);
        assert_eq!(f("fbdt+rtofloor=on"), ["--rto-floor", "on"]);
        assert_eq!(f("fbdt+rtofloor=off"), ["--rto-floor", "off"]);
        assert_eq!(f("fbdt+wake=off"), ["--wake-copies", "off"]);
        assert_eq!(f("fbdt+wake=30"), ["--wake-copies", "30"]);
        assert_eq!(f("fbdt+coupled"), ["--coupled=always"]);
        assert_eq!(f("fbdt+coupled=shared"), ["--coupled=shared"]);
        assert!(f("fbdt+coupled=off").is_empty());
        let wigig = s.path_index("wigig").unwrap();
        assert_eq!(f("fbdt+cc=wigig:bbr"), ["--congestion".to_string(), format!("{wigig}=bbr")]);
        assert_eq!(
            f("fbdt+unsent=off+rtofloor=on"),
            ["--rto-floor", "on", "--unsent-budget", "off"]
        );
    }

    #[test]
    fn sessions_go_to_the_proxy_alone() {
        let s = los();
        let f = flags("fbdt+sessions=2+unsent=off", &s).unwrap();
        assert_eq!(f.proxy, ["--sessions", "2"]);
        assert_eq!(f.both, ["--unsent-budget", "off"]);
        assert!(flags("fbdt", &s).unwrap().proxy.is_empty());
        for bad in ["fbdt+sessions=0", "fbdt+sessions=9", "fbdt+sessions=two"] {
            let e = format!("{:#}", flags(bad, &s).unwrap_err());
            assert!(e.contains("from 1 to 8") && e.contains(bad), "{e}");
        }
        // The library runs refuse it: a bulk run has no proxy to pool sessions in.
        assert!(super::super::parse("fbdt+sessions=2", &s, 0).is_err());
    }

    #[test]
    fn plaintext_takes_tls_off_the_pair_alone() {
        let s = los();
        assert!(!flags("fbdt", &s).unwrap().plaintext, "the pair runs TLS by default");
        let f = flags("fbdt+plaintext+unsent=off", &s).unwrap();
        assert!(f.plaintext);
        assert_eq!(f.both, ["--unsent-budget", "off"]);
        assert!(flags("fbdt+sessions=1+plaintext", &s).unwrap().plaintext);
        let e = format!("{:#}", flags("fbdt+plaintext+tls", &s).unwrap_err());
        assert!(e.contains("contradict"), "{e}");
        // A library run is plaintext already: the option means nothing there and is refused.
        assert!(super::super::parse("fbdt+plaintext", &s, 0).is_err());
    }

    #[test]
    fn options_without_a_flag_and_bad_values_are_refused_by_name() {
        let s = los();
        let err = |n: &str| format!("{:#}", flags(n, &s).unwrap_err());
        let e = err("fbdt+rto=0.5+seg=1k");
        assert!(e.contains("rto, seg have no flag"), "{e}");
        assert!(err("fbdt+replace=eager").contains("replace has no flag"));
        assert!(err("fbdt+batch=256k").contains("batch has no flag"));
        assert!(err("fbdt+window=paper").contains("window=paper has no flag"));
        assert!(err("fbdt+coupled=cubic").contains("coupled=cubic has no flag"));
        assert!(err("fbdt+unsent=0").contains("0.1..=10000"));
        assert!(err("fbdt+unsent=never").contains("unsent=`never`"));
        assert!(err("mp:minrtt").contains("only fbdt"));
        assert!(err("fbdtx").contains("only fbdt"));
    }
}
