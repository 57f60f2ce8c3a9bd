//! Scheme names as users type them: `fbdt[+key=value…]`, `tcp:<path>`; later `mptcp`, `mp:<scheduler>`.

use anyhow::{anyhow, bail, Context, Result};
use fbdt_core::{Config, WindowConfig};
use fbdt_scenario::Scenario;

#[derive(Clone, Debug)]
pub enum Scheme {
    Fbdt(Box<Config>),
    Tcp { path: usize },
}

/// Parses `"fbdt+rto=0.5+window=64k"`, `"tcp:wifi"`, … against the scenario's paths.
pub fn parse(name: &str, scenario: &Scenario, seed: u64) -> Result<Scheme> {
    let name = name.trim();
    if let Some(path) = name.strip_prefix("tcp:") {
        let idx = scenario.path_index(path).ok_or_else(|| {
            let known: Vec<&str> = scenario.paths.iter().map(|p| p.name.as_str()).collect();
            anyhow!(
                "scheme `{name}`: scenario `{}` has no path `{path}` (paths: {})",
                scenario.name,
                known.join(", ")
            )
        })?;
        return Ok(Scheme::Tcp { path: idx });
    }
    let mut parts = name.split('+');
    match parts.next() {
        Some("fbdt") => {
            let mut cfg = Config {
                seed,
                ..Config::default()
            };
            for opt in parts {
                apply_option(&mut cfg, opt).with_context(|| format!("scheme `{name}`"))?;
            }
            cfg.validate().map_err(|e| anyhow!("scheme `{name}`: {e}"))?;
            Ok(Scheme::Fbdt(Box::new(cfg)))
        }
        Some("mptcp") => {
            bail!("scheme `mptcp` (kernel MPTCP) runs only on the emulated testbed (--backend emu)")
        }
        Some(s) if s.starts_with("mp:") => {
            bail!("scheme `{name}`: the userspace MPTCP schedulers are not built yet")
        }
        _ => bail!("unknown scheme `{name}`: expected fbdt[+option=value…] or tcp:<path>"),
    }
}

/// Parses sizes like `64k`, `16m`, `1448`.
fn bytes(v: &str) -> Result<usize> {
    let v = v.to_ascii_lowercase();
    let (num, mult) = match v.strip_suffix('k') {
        Some(n) => (n, 1024),
        None => match v.strip_suffix('m') {
            Some(n) => (n, 1024 * 1024),
            None => (v.as_str(), 1),
        },
    };
    let n: usize = num
        .parse()
        .map_err(|_| anyhow!("`{v}` is not a byte count (e.g. 1448, 64k, 16m)"))?;
    n.checked_mul(mult).ok_or_else(|| anyhow!("`{v}` is too large"))
}

fn apply_option(cfg: &mut Config, opt: &str) -> Result<()> {
    let (key, value) = opt
        .split_once('=')
        .ok_or_else(|| anyhow!("option `{opt}` must be key=value"))?;
    match key {
        "rto" => {
            cfg.redundancy_wait = value.parse().map_err(|_| anyhow!("rto=`{value}` is not a number"))?;
        }
        "window" => match value {
            "auto" => cfg.window = Config::default().window,
            "paper" => {
                let paper = Config::paper();
                cfg.window = paper.window;
                cfg.segment_size = paper.segment_size;
            }
            v => cfg.window = WindowConfig::Fixed(bytes(v)?),
        },
        "seg" => cfg.segment_size = bytes(value)?,
        "rcvbuf" => cfg.recv_buffer = bytes(value)?,
        "sndbuf" => cfg.send_buffer = bytes(value)?,
        "factor" => match &mut cfg.window {
            WindowConfig::Auto { factor, .. } => {
                *factor = value.parse().map_err(|_| anyhow!("factor=`{value}` is not a number"))?
            }
            WindowConfig::Fixed(_) => bail!("factor applies to window=auto only"),
        },
        _ => bail!("unknown option `{key}` (known: rto, window, seg, rcvbuf, sndbuf, factor)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        fbdt_scenario::builtin("los").expect("built-in")
    }

    #[test]
    fn parses_fbdt_options_and_tcp_paths() {
        let s = scenario();
        match parse("fbdt+rto=0.5+window=64k+seg=1448", &s, 3).unwrap() {
            Scheme::Fbdt(c) => {
                assert_eq!(c.redundancy_wait, 0.5);
                assert_eq!(c.window, WindowConfig::Fixed(65536));
                assert_eq!(c.segment_size, 1448);
                assert_eq!(c.seed, 3);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse("tcp:wigig", &s, 1).unwrap(), Scheme::Tcp { path: 1 }));
    }

    #[test]
    fn bad_schemes_say_what_is_wrong() {
        let s = scenario();
        let err = |n: &str| format!("{:#}", parse(n, &s, 1).unwrap_err());
        assert!(err("tcp:lte").contains("no path `lte`"));
        assert!(err("fbdt+rto").contains("key=value"));
        assert!(err("fbdt+rto=-1").contains("redundancy_wait"));
        assert!(err("fbdt+window=1").contains("window"));
        assert!(err("quic").contains("unknown scheme"));
        assert!(err("mptcp").contains("emulated"));
    }
}
