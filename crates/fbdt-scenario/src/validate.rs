//! Checks a `Scenario` against the limits. Problems are reported with a `Loc` (which table and
//! key) so the TOML front end can turn it into a line number; `schedule()` reuses the same
//! checks for scenarios built in code.

use std::collections::HashSet;

use crate::events;
use crate::limits::*;
use crate::model::{EventKind, PathSpec, RateSpec, Scenario};
use crate::model::Bottleneck;

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Loc {
    Top(&'static str),
    /// Path index and key within its table.
    Path(usize, &'static str),
    /// Event index and key within its table.
    Event(usize, &'static str),
    Reference(String),
    /// A key of the `[bottleneck]` table.
    Bottleneck(&'static str),
}

#[derive(Debug, Clone)]
pub(crate) struct Invalid {
    pub loc: Loc,
    pub message: String,
}

type Check = Result<(), Invalid>;

fn bad(loc: Loc, message: impl Into<String>) -> Invalid {
    Invalid {
        loc,
        message: message.into(),
    }
}

/// `lo <= v <= hi` (or `< hi` when `open_hi`), finite.
fn range(loc: Loc, key: &str, v: f64, lo: f64, hi: f64, open_hi: bool) -> Check {
    let close = if open_hi { ")" } else { "]" };
    if !v.is_finite() {
        return Err(bad(loc, format!("`{key}` must be a finite number, got {v}")));
    }
    if v < lo || v > hi || (open_hi && v >= hi) {
        return Err(bad(loc, format!("`{key}` must be in [{lo}, {hi}{close}, got {v}")));
    }
    Ok(())
}

/// Strictly positive and at most `hi`.
fn positive(loc: Loc, key: &str, v: f64, hi: f64) -> Check {
    if !v.is_finite() || v <= 0.0 || v > hi {
        return Err(bad(loc, format!("`{key}` must be > 0 and <= {hi}, got {v}")));
    }
    Ok(())
}

fn ident(loc: Loc, what: &str, s: &str, max: usize, extra: &[char]) -> Check {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || extra.contains(&c);
    if s.is_empty() || s.len() > max || !s.chars().all(ok_char) {
        let extra: String = extra.iter().collect();
        return Err(bad(
            loc,
            format!("{what} `{s}` must be 1..={max} characters from A-Z a-z 0-9 and `{extra}`"),
        ));
    }
    Ok(())
}

/// `strict_times`: events must start inside the file's own duration (a file check; a caller
/// that shortens the run later just gets the later events clipped).
pub(crate) fn validate(s: &Scenario, strict_times: bool) -> Check {
    ident(Loc::Top("name"), "scenario name", &s.name, MAX_NAME, &['-', '_', '.'])?;
    if s.description.len() > MAX_DESCRIPTION {
        return Err(bad(
            Loc::Top("description"),
            format!("`description` is longer than {MAX_DESCRIPTION} bytes"),
        ));
    }
    positive(Loc::Top("duration_s"), "duration_s", s.duration_s, MAX_DURATION_S)?;
    let cc = &s.congestion_control;
    if cc.is_empty()
        || cc.len() > MAX_CC_NAME
        || !cc
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(bad(
            Loc::Top("congestion_control"),
            format!(
                "`congestion_control` `{cc}` must be a Linux congestion-control name (1..={MAX_CC_NAME} of a-z 0-9 _)"
            ),
        ));
    }
    if s.paths.is_empty() {
        return Err(bad(Loc::Top("path"), "no paths: add at least one [[path]] table"));
    }
    if s.paths.len() > MAX_PATHS {
        return Err(bad(
            Loc::Path(MAX_PATHS, "name"),
            format!("more than {MAX_PATHS} paths"),
        ));
    }
    if s.events.len() > MAX_EVENTS {
        return Err(bad(
            Loc::Event(MAX_EVENTS, "kind"),
            format!("more than {MAX_EVENTS} events"),
        ));
    }
    let mut names = HashSet::new();
    for (i, p) in s.paths.iter().enumerate() {
        if !names.insert(p.name.as_str()) {
            return Err(bad(Loc::Path(i, "name"), format!("duplicate path name `{}`", p.name)));
        }
        path(i, p, s.duration_s)?;
    }
    markov_pairs(s)?;
    for j in 0..s.events.len() {
        event(j, s, strict_times)?;
    }
    overlaps(s)?;
    bottleneck(s)?;
    for (key, v) in &s.reference {
        if key.is_empty() || key.len() > MAX_NAME {
            return Err(bad(
                Loc::Reference(key.clone()),
                format!("reference key `{key}` must be 1..={MAX_NAME} characters"),
            ));
        }
        range(Loc::Reference(key.clone()), key, *v, 0.0, MAX_RATE_MBPS, false)?;
    }
    Ok(())
}

fn path(i: usize, p: &PathSpec, duration_s: f64) -> Check {
    ident(Loc::Path(i, "name"), "path name", &p.name, MAX_PATH_NAME, &['-', '_'])?;
    range(
        Loc::Path(i, "delay_ms"),
        "delay_ms",
        p.delay_ms,
        0.0,
        MAX_DELAY_MS,
        false,
    )?;
    range(Loc::Path(i, "loss"), "loss", p.loss, 0.0, 1.0, true)?;
    if p.queue_packets == 0 || p.queue_packets > MAX_QUEUE_PACKETS {
        return Err(bad(
            Loc::Path(i, "queue_packets"),
            format!(
                "`queue_packets` must be in [1, {MAX_QUEUE_PACKETS}], got {}",
                p.queue_packets
            ),
        ));
    }
    if let Some(r) = &p.radio {
        positive(
            Loc::Path(i, "idle_timeout_ms"),
            "idle_timeout_ms",
            r.idle_timeout_ms,
            MAX_RADIO_MS,
        )?;
        range(Loc::Path(i, "wake_ms"), "wake_ms", r.wake_ms, 0.0, MAX_RADIO_MS, false)?;
    }
    if let Some(b) = &p.bursts {
        positive(Loc::Path(i, "every_ms"), "every_ms", b.every_ms, MAX_RADIO_MS)?;
        positive(Loc::Path(i, "hold_ms"), "hold_ms", b.hold_ms, MAX_RADIO_MS)?;
        if b.hold_ms >= b.every_ms {
            return Err(bad(
                Loc::Path(i, "hold_ms"),
                format!(
                    "`hold_ms` ({}) must be shorter than `every_ms` ({}): a path that holds for a whole period never delivers",
                    b.hold_ms, b.every_ms
                ),
            ));
        }
    }
    rate(i, &p.rate, duration_s)
}

fn step_budget(i: usize, key: &'static str, duration_s: f64, step_s: f64) -> Check {
    if duration_s / step_s > MAX_STEPS_PER_PATH as f64 {
        return Err(bad(
            Loc::Path(i, key),
            format!("`{key}` = {step_s} gives more than {MAX_STEPS_PER_PATH} steps in {duration_s} s"),
        ));
    }
    Ok(())
}

fn rate(i: usize, r: &RateSpec, duration_s: f64) -> Check {
    let at = |k| Loc::Path(i, k);
    let mbps = |k: &'static str, v: f64| range(at(k), k, v, 0.0, MAX_RATE_MBPS, false);
    match r {
        RateSpec::Constant { mbps: v } => mbps("mbps", *v),
        RateSpec::Steps { steps, period_s } => {
            if steps.is_empty() || steps.len() > MAX_RATE_STEPS {
                return Err(bad(
                    at("steps"),
                    format!("`steps` must have 1..={MAX_RATE_STEPS} entries"),
                ));
            }
            if steps[0].at_s != 0.0 {
                return Err(bad(
                    at("steps"),
                    format!("the first step must be at_s = 0, got {}", steps[0].at_s),
                ));
            }
            let mut prev = f64::NEG_INFINITY;
            for st in steps {
                range(at("steps"), "at_s", st.at_s, 0.0, MAX_DURATION_S, false)?;
                mbps("steps", st.mbps)?;
                if st.at_s <= prev {
                    return Err(bad(
                        at("steps"),
                        format!("step times must increase: {} after {prev}", st.at_s),
                    ));
                }
                prev = st.at_s;
            }
            if let Some(period) = *period_s {
                positive(at("period_s"), "period_s", period, MAX_DURATION_S)?;
                if period <= prev {
                    return Err(bad(
                        at("period_s"),
                        format!("`period_s` ({period}) must exceed the last step's at_s ({prev})"),
                    ));
                }
                let cycles = (duration_s / period).ceil();
                if cycles * steps.len() as f64 > MAX_STEPS_PER_PATH as f64 {
                    return Err(bad(
                        at("period_s"),
                        format!("the repeated steps exceed {MAX_STEPS_PER_PATH} steps in {duration_s} s"),
                    ));
                }
            }
            Ok(())
        }
        RateSpec::Random {
            min_mbps,
            max_mbps,
            step_s,
        } => {
            mbps("min_mbps", *min_mbps)?;
            mbps("max_mbps", *max_mbps)?;
            if min_mbps > max_mbps {
                return Err(bad(
                    at("max_mbps"),
                    format!("`max_mbps` ({max_mbps}) is below `min_mbps` ({min_mbps})"),
                ));
            }
            range(at("step_s"), "step_s", *step_s, MIN_STEP_S, MAX_DURATION_S, false)?;
            step_budget(i, "step_s", duration_s, *step_s)
        }
        RateSpec::Alternating {
            high_min_mbps,
            high_max_mbps,
            high_s,
            low_min_mbps,
            low_max_mbps,
            low_s,
            step_s,
            ..
        } => {
            for (k, v) in [
                ("high_min_mbps", high_min_mbps),
                ("high_max_mbps", high_max_mbps),
                ("low_min_mbps", low_min_mbps),
                ("low_max_mbps", low_max_mbps),
            ] {
                mbps(k, *v)?;
            }
            if high_min_mbps > high_max_mbps {
                return Err(bad(at("high_max_mbps"), "`high_max_mbps` is below `high_min_mbps`"));
            }
            if low_min_mbps > low_max_mbps {
                return Err(bad(at("low_max_mbps"), "`low_max_mbps` is below `low_min_mbps`"));
            }
            range(at("high_s"), "high_s", *high_s, MIN_STEP_S, MAX_DURATION_S, false)?;
            range(at("low_s"), "low_s", *low_s, MIN_STEP_S, MAX_DURATION_S, false)?;
            range(at("step_s"), "step_s", *step_s, MIN_STEP_S, MAX_DURATION_S, false)?;
            // Each dwell starts a fresh sample, so short dwells add steps too.
            step_budget(i, "step_s", duration_s, step_s.min(high_s.min(*low_s)))
        }
        RateSpec::Markov {
            high_mean_mbps,
            high_sd_mbps,
            low_mean_mbps,
            low_sd_mbps,
            flip_p,
            correlation,
            pair,
            step_s,
        } => {
            for (k, v) in [
                ("high_mean_mbps", high_mean_mbps),
                ("high_sd_mbps", high_sd_mbps),
                ("low_mean_mbps", low_mean_mbps),
                ("low_sd_mbps", low_sd_mbps),
            ] {
                mbps(k, *v)?;
            }
            // Above 1/2 the joint chain cannot keep each path's flip rate at `flip_p` for
            // every correlation (see sample::markov_pair); a flip rate above 1/2 is also an
            // anti-persistent channel, not a fading one.
            range(at("flip_p"), "flip_p", *flip_p, 0.0, 0.5, false)?;
            range(at("correlation"), "correlation", *correlation, -1.0, 1.0, false)?;
            if pair.is_none() && *correlation != 0.0 {
                return Err(bad(
                    at("correlation"),
                    "`correlation` needs `pair` (the path whose chain this one is correlated with)",
                ));
            }
            range(at("step_s"), "step_s", *step_s, MIN_STEP_S, MAX_DURATION_S, false)?;
            step_budget(i, "step_s", duration_s, *step_s)
        }
        RateSpec::Trace { file, bin_ms } => {
            if file.is_empty() {
                return Err(bad(at("file"), "`file` is empty"));
            }
            range(at("bin_ms"), "bin_ms", *bin_ms, MIN_BIN_MS, MAX_BIN_MS, false)?;
            step_budget(i, "bin_ms", duration_s, bin_ms / 1000.0)
        }
    }
}

/// The chain parameters two paired Markov paths must share.
fn markov_chain(r: &RateSpec) -> Option<(f64, f64, f64, Option<&str>)> {
    match r {
        RateSpec::Markov {
            flip_p,
            correlation,
            step_s,
            pair,
            ..
        } => Some((*flip_p, *correlation, *step_s, pair.as_deref())),
        _ => None,
    }
}

/// Paired Markov paths name each other and share one chain.
fn markov_pairs(s: &Scenario) -> Check {
    for (i, p) in s.paths.iter().enumerate() {
        let Some((flip, corr, step, Some(other))) = markov_chain(&p.rate) else {
            continue;
        };
        let at = Loc::Path(i, "pair");
        let Some(j) = s.path_index(other) else {
            let known: Vec<&str> = s.paths.iter().map(|p| p.name.as_str()).collect();
            return Err(bad(
                at,
                format!("`pair` names unknown path `{other}` (paths: {})", known.join(", ")),
            ));
        };
        if j == i {
            return Err(bad(at, "`pair` names the path itself"));
        }
        match markov_chain(&s.paths[j].rate) {
            Some((f2, c2, s2, Some(back))) if back == p.name => {
                if (f2, c2, s2) != (flip, corr, step) {
                    return Err(bad(
                        at,
                        format!(
                            "paired paths `{}` and `{other}` share one chain: `flip_p`, `correlation` and `step_s` must be equal (got {flip}/{corr}/{step} and {f2}/{c2}/{s2})",
                            p.name
                        ),
                    ));
                }
            }
            _ => {
                return Err(bad(
                    at,
                    format!(
                        "`pair` = \"{other}\": that path must be a `markov` model with `pair` = \"{}\"",
                        p.name
                    ),
                ))
            }
        }
    }
    Ok(())
}

fn event(j: usize, s: &Scenario, strict_times: bool) -> Check {
    let ev = &s.events[j];
    let at = |k| Loc::Event(j, k);
    if s.path_index(&ev.path).is_none() {
        let known: Vec<&str> = s.paths.iter().map(|p| p.name.as_str()).collect();
        return Err(bad(
            at("path"),
            format!("event names unknown path `{}` (paths: {})", ev.path, known.join(", ")),
        ));
    }
    range(at("at_s"), "at_s", ev.at_s, 0.0, MAX_DURATION_S, false)?;
    if strict_times && ev.at_s >= s.duration_s {
        return Err(bad(
            at("at_s"),
            format!(
                "event at {} s starts at or after the end of the run ({} s)",
                ev.at_s, s.duration_s
            ),
        ));
    }
    match ev.kind {
        EventKind::Outage { duration_s } | EventKind::Scan { duration_s } => {
            positive(at("duration_s"), "duration_s", duration_s, MAX_DURATION_S)?
        }
        EventKind::RateFactor { factor, duration_s } => {
            range(at("factor"), "factor", factor, 0.0, MAX_RATE_FACTOR, false)?;
            positive(at("duration_s"), "duration_s", duration_s, MAX_DURATION_S)?
        }
        EventKind::Contention {
            stations,
            load,
            txop_ms,
            duration_s,
        } => {
            use crate::contention::{MAX_STATIONS, MAX_TXOP_MS};
            if !(1..=MAX_STATIONS).contains(&stations) {
                return Err(bad(
                    at("stations"),
                    format!("stations must be a whole number in 1..={MAX_STATIONS}"),
                ));
            }
            range(at("load"), "load", load, 0.0, 1.0, false)?;
            range(at("txop_ms"), "txop_ms", txop_ms, 0.0, MAX_TXOP_MS, false)?;
            positive(at("duration_s"), "duration_s", duration_s, MAX_DURATION_S)?
        }
        EventKind::Rate { mbps } => range(at("mbps"), "mbps", mbps, 0.0, MAX_RATE_MBPS, false)?,
        EventKind::Loss { loss } => range(at("loss"), "loss", loss, 0.0, 1.0, true)?,
        EventKind::Delay { delay_ms } => range(at("delay_ms"), "delay_ms", delay_ms, 0.0, MAX_DELAY_MS, false)?,
    }
    if let Some(every) = ev.every_s {
        let Some(d) = ev.kind.duration_s() else {
            return Err(bad(
                at("every_s"),
                format!(
                    "a `{}` event cannot repeat; use a `steps` rate model with period_s for periodic changes",
                    ev.kind.name()
                ),
            ));
        };
        positive(at("every_s"), "every_s", every, MAX_DURATION_S)?;
        if d >= every {
            return Err(bad(
                at("every_s"),
                format!("`every_s` ({every}) must exceed `duration_s` ({d}), or the repeats overlap"),
            ));
        }
    }
    if let Some(until) = ev.until_s {
        range(at("until_s"), "until_s", until, 0.0, MAX_DURATION_S, false)?;
        if until <= ev.at_s {
            return Err(bad(
                at("until_s"),
                format!("`until_s` ({until}) must be after `at_s` ({})", ev.at_s),
            ));
        }
    }
    Ok(())
}

/// Two outages (or scans, or rate factors) on one path at once have no single meaning.
fn overlaps(s: &Scenario) -> Check {
    for p in &s.paths {
        let mut inst =
            events::expand(&s.events, &p.name, s.duration_s).map_err(|(j, m)| bad(Loc::Event(j, "every_s"), m))?;
        inst.retain(|x| x.kind.duration_s().is_some());
        inst.sort_by(|a, b| a.kind.name().cmp(b.kind.name()).then(a.start.total_cmp(&b.start)));
        for w in inst.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            if a.kind.name() == b.kind.name() && b.start < a.end {
                let (first, second) = if a.event <= b.event { (a, b) } else { (b, a) };
                return Err(bad(
                    Loc::Event(second.event, "at_s"),
                    format!(
                        "this {} on path `{}` ({} s to {} s) overlaps the one from event #{} ({} s to {} s)",
                        second.kind.name(),
                        p.name,
                        second.start,
                        second.end,
                        first.event + 1,
                        first.start,
                        first.end
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The `[bottleneck]` table: known, distinct paths, a rate, a queue and a bounded number of
/// competing flows.
fn bottleneck(s: &Scenario) -> Check {
    let Some(b): Option<&Bottleneck> = s.bottleneck.as_ref() else {
        return Ok(());
    };
    let at = Loc::Bottleneck;
    if b.paths.is_empty() {
        return Err(bad(at("paths"), "`paths` must name at least one path that joins the shared link"));
    }
    let mut seen = HashSet::new();
    for name in &b.paths {
        if s.path_index(name).is_none() {
            let known: Vec<&str> = s.paths.iter().map(|p| p.name.as_str()).collect();
            return Err(bad(
                at("paths"),
                format!("`paths` names unknown path `{name}` (paths: {})", known.join(", ")),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(bad(at("paths"), format!("`paths` names `{name}` twice")));
        }
    }
    positive(at("rate_mbps"), "rate_mbps", b.rate_mbps, MAX_RATE_MBPS)?;
    if b.queue_packets == 0 || b.queue_packets > MAX_QUEUE_PACKETS {
        return Err(bad(
            at("queue_packets"),
            format!("`queue_packets` must be in [1, {MAX_QUEUE_PACKETS}], got {}", b.queue_packets),
        ));
    }
    if b.competing_tcp > MAX_COMPETING_TCP {
        return Err(bad(
            at("competing_tcp"),
            format!("`competing_tcp` must be at most {MAX_COMPETING_TCP}, got {}", b.competing_tcp),
        ));
    }
    if let Some(d) = b.competing_delay_ms {
        range(at("competing_delay_ms"), "competing_delay_ms", d, 0.0, MAX_DELAY_MS, false)?;
    }
    Ok(())
}
