//! The settings every subcommand shares (`NetArgs`): congestion control, RTO floor, TLS,
//! windows and the sender's budgets, as flags, and the `NetConfig` they make.

use crate::security;

/// Settings shared by the subcommands.
#[derive(clap::Args, Clone, Debug)]
pub struct NetArgs {
    /// TCP congestion control: one for every path (`cubic`, `bbr`, `reno`, …), per path by
    /// index (`0=cubic,1=bbr`), or `auto` (BBR while a path's losses come without RTT
    /// inflation, the default controller otherwise); default: the system's.
    #[arg(long, value_name = "PLAN", value_parser = parse_congestion)]
    pub congestion: Option<fbdt_net::CongestionPlan>,
    /// Each connection's RTO floor: `on` (the default) lowers it to about twice its RTT
    /// plus 40 ms (TCP_RTO_MIN_US, Linux ≥ 6.15), so a link that returns from an outage
    /// carries again tens of ms sooner; `off` keeps the system's 200 ms (in a config file:
    /// `rto_floor = "off"`). A bare `--rto-floor` still means `on`, as it did before it was the default.
    #[arg(long, value_name = "on|off", default_value = "on", num_args = 0..=1, default_missing_value = "on",
          action = clap::ArgAction::Set, value_parser = parse_on_off)]
    pub rto_floor: bool,
    /// Couple the paths' congestion control (RFC 6356 LIA) where this end sends: each
    /// path is paced at its coupled window over its RTT, so the paths together take about
    /// one TCP flow's share of a bottleneck they share (two radios behind one backhaul).
    /// Paths on BBR stay uncoupled. `always` (a bare `--coupled`) couples every other path;
    /// `shared` only the paths found behind one queue with another path, while they are
    /// (their queueing delays match and move together). Off by default: always coupled,
    /// disjoint paths lose throughput (14–47 % on tc-normal, docs/congestion.md).
    #[arg(long, value_name = "always|shared|off", default_value = "off", num_args = 0..=1,
          default_missing_value = "always", action = clap::ArgAction::Set)]
    pub coupled: fbdt_net::CoupledMode,
    #[command(flatten)]
    pub security: security::SecurityArgs,
    /// Server: most sessions at once (further HELLOs are refused).
    #[arg(long, value_name = "N", default_value_t = fbdt_net::NetConfig::default().max_sessions)]
    pub max_sessions: usize,
    /// FBDT transmission window for the data this end sends: `budget=<ms>` (the default,
    /// 0.5: windows the paths drain in that long, lane ends meeting by expected arrival —
    /// low in-order delay), `auto` (the earlier throughput-first window, 2 × summed rate ×
    /// longest RTT), or a fixed size (`64k`, `4m`).
    #[arg(long, value_name = "MODE")]
    pub window: Option<fbdt_core::WindowConfig>,
    /// Wake this end's reader at every packet instead of once the frame it is reading can
    /// complete (SO_RCVLOWAT, plaintext paths): the old behaviour, for comparisons.
    #[arg(long)]
    pub wake_per_packet: bool,
    /// How much written data may wait before FBDT schedules it: what the paths drain in
    /// this many ms (at least two windows), as TCP_NOTSENT_LOWAT bounds a socket's unsent
    /// bytes; a stream relayed beside a bulk one then waits milliseconds, not seconds.
    /// `off`: the whole 32 MiB send buffer may fill (the earlier behaviour).
    #[arg(long, value_name = "MS|off", default_value = "5", value_parser = parse_ms_or_off)]
    pub unsent_budget: MsOrOff,
    /// Once every path has been idle this many ms, the first 128 KiB sent next also go to a
    /// second free path until the first ACK, so a radio waking from power save does not
    /// hold a short transfer (docs/workloads.md, "Wake copies"). `off`: never copy.
    #[arg(long, value_name = "MS|off", value_parser = parse_ms_or_off,
          default_value_t = MsOrOff(Some(fbdt_core::fbdt::DEFAULT_WAKE_COPIES_AFTER)))]
    pub wake_copies: MsOrOff,
}

/// A time in milliseconds (0.1 ms to 10 s), or `off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MsOrOff(Option<fbdt_core::Duration>);

impl std::fmt::Display for MsOrOff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            None => f.write_str("off"),
            Some(d) => write!(f, "{}", d.as_secs_f64() * 1e3),
        }
    }
}

fn parse_ms_or_off(s: &str) -> Result<MsOrOff, String> {
    if s == "off" {
        return Ok(MsOrOff(None));
    }
    match s.parse::<f64>() {
        Ok(ms) if ms.is_finite() && (0.1..=10_000.0).contains(&ms) => {
            Ok(MsOrOff(Some(fbdt_core::Duration::from_secs_f64(ms / 1e3))))
        }
        _ => Err(format!("`{s}`: expected milliseconds in 0.1..=10000, or `off`")),
    }
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{s}`: expected on or off")),
    }
}

fn parse_congestion(s: &str) -> Result<fbdt_net::CongestionPlan, fbdt_net::CongestionError> {
    let plan = fbdt_net::CongestionPlan::parse(s, &[])?;
    plan.validate()?;
    Ok(plan)
}

impl NetArgs {
    fn config(&self, security: fbdt_net::Security) -> fbdt_net::NetConfig {
        let mut cfg = fbdt_net::NetConfig {
            congestion: self.congestion.clone().unwrap_or_default(),
            rto_floor: self.rto_floor,
            coupled: self.coupled,
            security,
            max_sessions: self.max_sessions,
            recv_lowat: !self.wake_per_packet,
            ..fbdt_net::NetConfig::default()
        };
        if let Some(fbdt) = cfg.core.fbdt_mut() {
            if let Some(window) = self.window {
                fbdt.window = window;
            }
            fbdt.unsent_budget = self.unsent_budget.0;
            fbdt.wake_copies_after = self.wake_copies.0;
        }
        cfg
    }
    /// A client's settings: TLS trusting the server as the options say, or plaintext.
    pub fn client_config(&self) -> anyhow::Result<fbdt_net::NetConfig> {
        Ok(self.config(self.security.client()?))
    }
    /// A server's settings: TLS with its stored or given key, or plaintext.
    pub fn server_config(&self) -> anyhow::Result<fbdt_net::NetConfig> {
        Ok(self.config(self.security.server()?))
    }
}

#[cfg(test)]
mod tests {
    /// `args` parsed as the network options of a command.
    fn net_args(args: &[&str]) -> Result<super::NetArgs, String> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            net: super::NetArgs,
        }
        Cli::try_parse_from(std::iter::once("fbdt").chain(args.iter().copied()))
            .map(|c| c.net)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_rto_floor_is_on_unless_turned_off() {
        let floor = |args: &[&str]| net_args(args).map(|n| n.rto_floor);
        assert_eq!(floor(&[]), Ok(true));
        assert_eq!(floor(&["--rto-floor"]), Ok(true));
        assert_eq!(floor(&["--rto-floor", "on"]), Ok(true));
        assert_eq!(floor(&["--rto-floor", "off"]), Ok(false));
        assert!(floor(&["--rto-floor", "maybe"]).unwrap_err().contains("expected on or off"));
    }

    #[test]
    fn coupled_mode_is_off_unless_asked_and_a_bare_flag_means_always() {
        use fbdt_net::CoupledMode;
        let mode = |args: &[&str]| net_args(args).map(|n| n.coupled);
        assert_eq!(mode(&[]), Ok(CoupledMode::Off));
        assert_eq!(mode(&["--coupled"]), Ok(CoupledMode::Always));
        assert_eq!(mode(&["--coupled=shared"]), Ok(CoupledMode::WhenShared));
        assert_eq!(mode(&["--coupled", "off"]), Ok(CoupledMode::Off));
        assert!(mode(&["--coupled", "sometimes"]).unwrap_err().contains("expected always, shared or off"));
    }

    #[test]
    fn window_modes_parse_and_nonsense_is_refused() {
        use fbdt_core::{Duration, WindowConfig};
        let parse_window = |v: &str| v.parse::<WindowConfig>();
        let budget = WindowConfig::budget(Duration::from_micros(500));
        assert_eq!(parse_window("budget=0.5"), Ok(budget));
        assert_eq!(parse_window("auto"), Ok(WindowConfig::auto()));
        assert_eq!(parse_window("64k"), Ok(WindowConfig::Fixed(65536)));
        assert_eq!(parse_window("4M"), Ok(WindowConfig::Fixed(4 << 20)));
        for bad in [
            "budget=0",
            "budget=-1",
            "budget=inf",
            "fast",
            "99999999999999999999m",
            "",
        ] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wake_copies_default_to_the_core_and_take_ms_or_off() {
        use clap::Parser;
        use fbdt_core::Duration;
        #[derive(Parser)]
        struct Args {
            #[command(flatten)]
            net: super::NetArgs,
        }
        let wake = |flags: &[&str]| -> Result<Option<Duration>, String> {
            let args = Args::try_parse_from(["fbdt", "--plaintext"].iter().chain(flags))
                .map_err(|e| e.to_string())?;
            let cfg = args.net.client_config().map_err(|e| e.to_string())?;
            Ok(cfg.core.fbdt().expect("fbdt scheme").wake_copies_after)
        };
        assert_eq!(wake(&[]), Ok(Some(fbdt_core::fbdt::DEFAULT_WAKE_COPIES_AFTER)));
        assert_eq!(wake(&["--wake-copies", "off"]), Ok(None));
        assert_eq!(wake(&["--wake-copies", "30"]), Ok(Some(Duration::from_millis(30))));
        for bad in ["0", "-5", "never", "20000"] {
            let e = wake(&[&format!("--wake-copies={bad}")]).unwrap_err();
            assert!(e.contains("0.1..=10000"), "{bad}: {e}");
        }
    }
}
