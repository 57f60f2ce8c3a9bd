//! TOML text → validated `Scenario`, with every error pointing at a file and line.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use crate::error::{Origin, ScenarioError};
use crate::limits::MAX_SCENARIO_BYTES;
use crate::mahimahi;
use crate::model::{Bottleneck, Event, EventKind, PathSpec, RateSpec, Scenario};
use crate::validate::{self, Invalid, Loc};

pub(crate) const DEFAULT_DURATION_S: f64 = 30.0;
pub(crate) const DEFAULT_SEED: u64 = 1;
pub(crate) const DEFAULT_CC: &str = "cubic";

fn default_duration() -> f64 {
    DEFAULT_DURATION_S
}
fn default_seed() -> u64 {
    DEFAULT_SEED
}
fn default_cc() -> String {
    DEFAULT_CC.to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default = "default_duration")]
    duration_s: f64,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default = "default_cc")]
    congestion_control: String,
    #[serde(default)]
    path: Vec<PathSpec>,
    #[serde(default)]
    event: Vec<RawEvent>,
    #[serde(default)]
    reference: BTreeMap<String, f64>,
    bottleneck: Option<Bottleneck>,
}

/// Events are flat tables (`kind = "outage"` beside its fields); serde cannot combine a
/// flattened tagged enum with deny_unknown_fields, so the kind's fields are checked by hand.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvent {
    at_s: f64,
    path: String,
    kind: String,
    duration_s: Option<f64>,
    mbps: Option<f64>,
    loss: Option<f64>,
    delay_ms: Option<f64>,
    factor: Option<f64>,
    stations: Option<f64>,
    load: Option<f64>,
    txop_ms: Option<f64>,
    every_s: Option<f64>,
    until_s: Option<f64>,
}

/// Only where each table is, to turn a `Loc` into a line.
#[derive(Deserialize, Default)]
struct Skeleton {
    #[serde(default)]
    path: Vec<Spanned<IgnoredAny>>,
    #[serde(default)]
    event: Vec<Spanned<IgnoredAny>>,
    reference: Option<Spanned<IgnoredAny>>,
    bottleneck: Option<Spanned<IgnoredAny>>,
}

const KINDS: &str = "outage, rate, loss, delay, scan, rate_factor, contention";

/// A station count as written; anything that is not a whole number in range maps to a value
/// validation refuses (0 or `u32::MAX`).
fn stations_count(v: f64) -> u32 {
    if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
        v as u32
    } else {
        u32::MAX
    }
}

fn event_from_raw(j: usize, r: RawEvent) -> Result<Event, Invalid> {
    let fields = [
        ("duration_s", r.duration_s),
        ("mbps", r.mbps),
        ("loss", r.loss),
        ("delay_ms", r.delay_ms),
        ("factor", r.factor),
        ("stations", r.stations),
        ("load", r.load),
    ];
    let wanted: &[&str] = match r.kind.as_str() {
        "outage" | "scan" => &["duration_s"],
        "rate" => &["mbps"],
        "loss" => &["loss"],
        "delay" => &["delay_ms"],
        "rate_factor" => &["factor", "duration_s"],
        "contention" => &["stations", "load", "duration_s"],
        other => {
            return Err(Invalid {
                loc: Loc::Event(j, "kind"),
                message: format!("unknown event kind `{other}` (kinds: {KINDS})"),
            })
        }
    };
    for (key, v) in fields {
        if wanted.contains(&key) && v.is_none() {
            return Err(Invalid {
                loc: Loc::Event(j, "kind"),
                message: format!("a `{}` event needs `{key}`", r.kind),
            });
        }
    }
    for (key, v) in fields {
        if !wanted.contains(&key) && v.is_some() {
            return Err(Invalid {
                loc: Loc::Event(j, key),
                message: format!(
                    "`{key}` does not apply to a `{}` event (it takes: {})",
                    r.kind,
                    wanted.join(", ")
                ),
            });
        }
    }
    if r.txop_ms.is_some() && r.kind != "contention" {
        return Err(Invalid {
            loc: Loc::Event(j, "txop_ms"),
            message: format!("`txop_ms` does not apply to a `{}` event (only to contention)", r.kind),
        });
    }
    let get = |k: &str| fields.iter().find(|f| f.0 == k).and_then(|f| f.1).unwrap_or(f64::NAN);
    let kind = match r.kind.as_str() {
        "outage" => EventKind::Outage {
            duration_s: get("duration_s"),
        },
        "scan" => EventKind::Scan {
            duration_s: get("duration_s"),
        },
        "rate" => EventKind::Rate { mbps: get("mbps") },
        "loss" => EventKind::Loss { loss: get("loss") },
        "delay" => EventKind::Delay {
            delay_ms: get("delay_ms"),
        },
        "contention" => EventKind::Contention {
            // Out-of-range counts (negative, fractional, huge) become 0 or u32::MAX here and
            // are refused by validation with the file's line.
            stations: stations_count(get("stations")),
            load: get("load"),
            txop_ms: r.txop_ms.unwrap_or(crate::contention::DEFAULT_TXOP_MS),
            duration_s: get("duration_s"),
        },
        _ => EventKind::RateFactor {
            factor: get("factor"),
            duration_s: get("duration_s"),
        },
    };
    Ok(Event {
        at_s: r.at_s,
        path: r.path,
        kind,
        every_s: r.every_s,
        until_s: r.until_s,
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Offset of `key = …` (bare or quoted) inside `range`, skipping text after a `#` on the line.
fn find_key(text: &str, range: Range<usize>, key: &str) -> Option<usize> {
    let hay = text.get(range.clone())?;
    let quoted = format!("\"{key}\"");
    for pat in [key, quoted.as_str()] {
        for (pos, _) in hay.match_indices(pat) {
            let before = hay[..pos].chars().next_back();
            let boundary = before.is_none_or(|c| c.is_whitespace() || c == '{' || c == ',');
            let after = hay[pos + pat.len()..].trim_start_matches([' ', '\t']);
            let line_start = hay[..pos].rfind('\n').map_or(0, |i| i + 1);
            let commented = hay[line_start..pos].contains('#');
            if boundary && after.starts_with('=') && !commented {
                return Some(range.start + pos);
            }
        }
    }
    None
}

fn line_for(text: &str, skel: &Skeleton, loc: &Loc) -> Option<usize> {
    let table = |list: &[Spanned<IgnoredAny>], i: usize, key: &str| {
        let span = list.get(i).or(list.last())?.span();
        Some(line_of(text, find_key(text, span.clone(), key).unwrap_or(span.start)))
    };
    match loc {
        Loc::Path(i, key) => table(&skel.path, *i, key),
        Loc::Event(j, key) => table(&skel.event, *j, key),
        Loc::Bottleneck(key) => {
            let span = skel.bottleneck.as_ref()?.span();
            Some(line_of(text, find_key(text, span.clone(), key).unwrap_or(span.start)))
        }
        Loc::Reference(key) => {
            let span = skel.reference.as_ref()?.span();
            Some(line_of(text, find_key(text, span.clone(), key).unwrap_or(span.start)))
        }
        Loc::Top(key) => {
            // Top-level keys come before the first table.
            let first_table = [
                skel.path.first(),
                skel.event.first(),
                skel.reference.as_ref(),
                skel.bottleneck.as_ref(),
            ]
                .into_iter()
                .flatten()
                .map(|s| s.span().start)
                .min()
                .unwrap_or(text.len());
            find_key(text, 0..first_table, key).map(|o| line_of(text, o))
        }
    }
}

fn stem(origin: &str) -> String {
    Path::new(origin)
        .file_stem()
        .map_or_else(|| origin.to_string(), |s| s.to_string_lossy().into_owned())
}

pub(crate) fn from_toml_str(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
    let at = |line| Origin {
        file: origin.to_string(),
        line,
    };
    if text.len() as u64 > MAX_SCENARIO_BYTES {
        return Err(ScenarioError::Invalid {
            at: at(None),
            message: format!("larger than {MAX_SCENARIO_BYTES} bytes"),
        });
    }
    let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError::Syntax {
        at: at(e.span().map(|s| line_of(text, s.start))),
        message: e.message().trim_end().to_string(),
    })?;
    let skel: Skeleton = toml::from_str(text).unwrap_or_default();
    let invalid = |e: Invalid| ScenarioError::Invalid {
        at: at(line_for(text, &skel, &e.loc)),
        message: e.message,
    };

    let events = raw
        .event
        .into_iter()
        .enumerate()
        .map(|(j, r)| event_from_raw(j, r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(invalid)?;
    let mut s = Scenario {
        name: raw.name.unwrap_or_else(|| stem(origin)),
        description: raw.description,
        duration_s: raw.duration_s,
        seed: raw.seed,
        congestion_control: raw.congestion_control,
        paths: raw.path,
        events,
        reference: raw.reference,
        bottleneck: raw.bottleneck,
    };
    validate::validate(&s, true).map_err(invalid)?;

    // A trace named in a file is found next to that file, wherever the binary runs from.
    let base_dir = Path::new(origin).parent().map(Path::to_path_buf).unwrap_or_default();
    for (i, p) in s.paths.iter_mut().enumerate() {
        if let RateSpec::Trace { file, .. } = &mut p.rate {
            let resolved: PathBuf = if Path::new(file).is_absolute() {
                PathBuf::from(&*file)
            } else {
                base_dir.join(&*file)
            };
            mahimahi::read(&resolved).map_err(|e| match e {
                ScenarioError::Io { path, source } => invalid(Invalid {
                    loc: Loc::Path(i, "file"),
                    message: format!("cannot read trace {}: {source}", path.display()),
                }),
                other => other,
            })?;
            *file = resolved.to_string_lossy().into_owned();
        }
    }
    Ok(s)
}

pub(crate) fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
    use std::io::Read;
    let io = |source| ScenarioError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_SCENARIO_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    from_toml_str(&text, &path.display().to_string())
}
