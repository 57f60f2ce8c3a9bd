use super::*;

fn scenario() -> Scenario {
    fbdt_scenario::builtin("los").expect("built-in")
}

#[test]
fn runtime_options_per_path_and_for_kernel_schemes() {
    use fbdt_net::Choice;
    let s = scenario();
    let (base, o) = runtime_options("fbdt+acks=64k+cc=wigig:bbr+cc=auto+rtofloor=on", &s).unwrap();
    assert_eq!(base, "fbdt+acks=64k");
    let wigig = s.path_index("wigig").unwrap();
    assert_eq!(o.congestion.choice(wigig), Some(&Choice::Named("bbr".into())));
    assert_eq!(o.congestion.choice(1 - wigig), Some(&Choice::Auto));
    assert_eq!(o.rto_floor, Some(true));
    assert!(matches!(parse("fbdt+cc=wigig:bbr", &s, 1).unwrap(), Scheme::Session(..)));
    let (base, o) = runtime_options("mptcp+cc=bbr", &s).unwrap();
    assert_eq!((base.as_str(), o.kernel_congestion()), ("mptcp", Some("bbr")));
    assert!(matches!(parse("mptcp+cc=bbr", &s, 1).unwrap(), Scheme::KernelMptcp));
    assert!(matches!(parse("tcp:wifi+cc=bbr", &s, 1).unwrap(), Scheme::Tcp { .. }));
    let err = |n: &str| format!("{:#}", runtime_options(n, &s).unwrap_err());
    assert!(err("fbdt+cc=lte:bbr").contains("no path `lte`"));
    assert!(err("mptcp+cc=wigig:bbr").contains("one controller"));
    assert!(err("mptcp+cc=auto").contains("one controller"));
    assert!(err("fbdt+rtofloor=maybe").contains("on or off"));
    assert!(err("fbdt+replace=now").contains("eager or patient"));
    assert!(runtime_options("fbdt+replace=eager", &s).unwrap().1.eager_replacement);
    assert_eq!(runtime_options("fbdt+batch=256k", &s).unwrap().1.write_batch, Some(256 * 1024));
    assert!(err("fbdt+batch=1k").contains("16k to 4m"));
    assert!(err("fbdt+batch=lots").contains("not a byte count"));
    assert!(err("mptcp+batch=256k").contains("no batch"));
    let mut net = fbdt_net::NetConfig::default();
    runtime_options("fbdt+batch=128k", &s).unwrap().1.apply(&mut net);
    assert_eq!(net.write_batch, 128 * 1024);
    if fbdt_net::congestion::available().is_some() {
        assert!(err("fbdt+cc=nosuchcc").contains("not available"));
    }
    let lim = TestbedLimits { tcp_buffer_max: None };
    assert!(format!("{:#}", parse_sim("fbdt+cc=bbr", &s, 1, &lim).unwrap_err()).contains("emulated testbed"));
}

#[test]
fn parses_fbdt_options_and_tcp_paths() {
    let s = scenario();
    match parse("fbdt+rto=0.5+window=64k+seg=1448", &s, 3).unwrap() {
        Scheme::Session(c, _) => {
            assert_eq!(c.fbdt().unwrap().redundancy_wait, 0.5);
            assert_eq!(c.fbdt().unwrap().window, WindowConfig::Fixed(65536));
            assert_eq!(c.segment_size, 1448);
            assert_eq!(c.seed, 3);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(parse("tcp:wigig", &s, 1).unwrap(), Scheme::Tcp { path: 1 }));
    match parse("fbdt+budget=50", &s, 1).unwrap() {
        Scheme::Session(c, _) => assert_eq!(
            c.fbdt().unwrap().window,
            WindowConfig::Budget {
                delay: fbdt_core::Duration::from_millis(50),
                max: fbdt_core::fbdt::BUDGET_MAX_WINDOW
            }
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(parse("fbdt", &s, 1).unwrap().encryption(), Encryption::None);
    for name in ["fbdt+tls", "fbdt+window=64k+tls", "mp:minrtt+tls"] {
        assert_eq!(parse(name, &s, 1).unwrap().encryption(), Encryption::Tls13, "{name}");
    }
    let sim = parse("fbdt+tls", &s, 1)
        .and_then(Scheme::into_sim)
        .map(|_| ())
        .unwrap_err();
    assert!(format!("{sim:#}").contains("emulated"), "{sim:#}");
    match parse("fbdt+window=auto+limit=2", &s, 1).unwrap() {
        Scheme::Session(c, _) => {
            assert_eq!(c.fbdt().unwrap().window, WindowConfig::auto());
            assert_eq!(c.fbdt().unwrap().send_limit_windows, 2.0);
        }
        other => panic!("{other:?}"),
    }
    let fbdt_of = |name: &str| match parse(name, &s, 1).unwrap() {
        Scheme::Session(c, _) => c.fbdt().unwrap().clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fbdt_of("fbdt+wake=off").wake_copies_after, None);
    assert_eq!(fbdt_of("fbdt+wake=20").wake_copies_after, Some(fbdt_core::Duration::from_millis(20)));
    assert_eq!(fbdt_of("fbdt+stall=rtt").stall_late, None);
    assert_eq!(fbdt_of("fbdt+stall=15").stall_late, Some(fbdt_core::Duration::from_millis(15)));
    for bad in ["fbdt+wake=0", "fbdt+wake=soon", "fbdt+stall=0", "fbdt+stall=off"] {
        assert!(format!("{:#}", parse(bad, &s, 1).unwrap_err()).contains("whole number of ms"), "{bad}");
    }
    assert_eq!(fbdt_of("fbdt").stall_on_ack_silence, AckSilenceUse::Proof);
    assert_eq!(fbdt_of("fbdt+silence=off").stall_on_ack_silence, AckSilenceUse::Off);
    assert_eq!(fbdt_of("fbdt+silence=quiet").stall_on_ack_silence, AckSilenceUse::QuietTime);
    assert_eq!(fbdt_of("fbdt+silence=on").stall_on_ack_silence, AckSilenceUse::Proof);
    assert!(format!("{:#}", parse("fbdt+silence=1", &s, 1).unwrap_err()).contains("expected `on`, `quiet` or `off`"));
    let reports = |name: &str| match parse(name, &s, 1).unwrap() {
        Scheme::Session(c, _) => c.report_stalls,
        other => panic!("{other:?}"),
    };
    assert!(reports("fbdt"));
    assert!(!reports("fbdt+stallreport=off"));
    assert!(reports("fbdt+stallreport=on"));
    assert!(format!("{:#}", parse("fbdt+stallreport=yes", &s, 1).unwrap_err()).contains("expected `on` or `off`"));
    assert!(parse("fbdt+limit=0.5", &s, 1).is_err());
    assert_eq!(fbdt_of("fbdt+frame=1").frame_budget, fbdt_core::Duration::from_millis(1));
    assert_eq!(fbdt_of("fbdt+frame=0.5").frame_budget, fbdt_core::Duration::from_micros(500));
    assert_eq!(fbdt_of("fbdt+frame=0").frame_budget, fbdt_core::Duration::ZERO);
    for bad in ["fbdt+frame=-1", "fbdt+frame=11", "fbdt+frame=NaN", "fbdt+frame=big"] {
        assert!(format!("{:#}", parse(bad, &s, 1).unwrap_err()).contains("from 0 to 10"), "{bad}");
    }
    let config_of = |name: &str| match parse(name, &s, 1).unwrap() {
        Scheme::Session(c, _) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(config_of("fbdt+ackdelay=5").max_ack_delay, fbdt_core::Duration::from_millis(5));
    assert_eq!(config_of("fbdt").max_ack_delay, fbdt_core::Config::default().max_ack_delay);
    for bad in ["fbdt+ackdelay=0", "fbdt+ackdelay=51", "fbdt+ackdelay=NaN", "mp:minrtt+ackdelay=5"] {
        assert!(parse(bad, &s, 1).is_err(), "{bad}");
    }
    assert!(parse("fbdt+budget=0", &s, 1).is_err());
    assert!(parse("fbdt+budget=fast", &s, 1).is_err());
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
    assert!(matches!(parse("mptcp", &s, 1).unwrap(), Scheme::KernelMptcp));
    let sim = |n: &str| parse(n, &s, 1).and_then(Scheme::into_sim).map(|_| ());
    assert!(format!("{:#}", sim("mptcp").unwrap_err()).contains("emulated"));
    assert!(sim("tcp:wifi").is_ok());
    assert!(err("mptcp+x=1").contains("unknown scheme"));
    assert!(err("mp:bogus").contains("unknown scheduler"));
    assert!(err("mp:fixed=101").contains("unknown scheduler"));
    assert!(err("mp:minrtt+window=1").contains("unknown option"));
}

/// The simulator runs a scheme with the testbed's buffer ceilings, as the testbed does,
/// unless the scheme names its own.
#[test]
fn the_simulator_gets_the_testbeds_buffer_ceilings() {
    let s = scenario();
    let limits = TestbedLimits::from(&fbdt_emu::TestbedOptions::default());
    let max = limits.tcp_buffer_max.unwrap() as usize;
    let buffers = |n: &str| match parse_sim(n, &s, 1, &limits).unwrap() {
        fbdt_sim::SimScheme::Session(c) => (c.recv_buffer, c.send_buffer),
        other => panic!("{other:?}"),
    };
    assert_eq!(buffers("fbdt"), (max, max));
    assert_eq!(buffers("mp:kernel"), (max, max));
    assert_eq!(buffers("mp:kernel+rcvbuf=2m"), (2 << 20, max));
    assert_eq!(buffers("fbdt+sndbuf=8m"), (max, 8 << 20));
    assert!(matches!(
        parse_sim("tcp:wifi", &s, 1, &limits).unwrap(),
        fbdt_sim::SimScheme::Tcp(0)
    ));
    let window = |m| crate::sim::sim_params(&s, m, 0, &limits).link.max_window_bytes;
    assert_eq!(
        window(fbdt_sim::PathModel::Tcp),
        max as u64,
        "the TCP model's windows too"
    );
    assert_eq!(
        window(fbdt_sim::PathModel::Pipe),
        6 << 20,
        "the ideal pipe keeps Linux's default"
    );
}

#[test]
fn parses_mp_schedulers_and_ranges() {
    let s = scenario();
    for (name, kind) in [
        ("mp:minrtt", SchedulerKind::MinRtt),
        ("mp:blest", SchedulerKind::Blest),
        ("mp:ecf", SchedulerKind::Ecf),
        ("mp:rr", SchedulerKind::RoundRobin),
        ("mp:redundant", SchedulerKind::Redundant),
        ("mp:fixed=77", SchedulerKind::Fixed(77)),
        ("mp:amuse", SchedulerKind::Amuse),
        ("mp:musher", SchedulerKind::Musher),
        ("mp:kernel", SchedulerKind::Kernel),
    ] {
        match parse(name, &s, 1).unwrap() {
            Scheme::Session(c, _) => assert_eq!(c.meta_config().unwrap().scheduler, kind),
            other => panic!("{other:?}"),
        }
    }
    match parse("mp:minrtt+rcvbuf=2m+reinject=off", &s, 1).unwrap() {
        Scheme::Session(c, _) => {
            assert_eq!(c.recv_buffer, 2 << 20);
            assert_eq!(c.meta_config().unwrap().reinject, Some(false));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        expand("mp:fixed=5..15/5").unwrap(),
        vec!["mp:fixed=5", "mp:fixed=10", "mp:fixed=15"]
    );
    assert_eq!(
        expand("mp:fixed=70..71+rcvbuf=1m").unwrap(),
        vec!["mp:fixed=70+rcvbuf=1m", "mp:fixed=71+rcvbuf=1m"]
    );
    assert_eq!(expand("fbdt").unwrap(), vec!["fbdt"]);
    assert!(expand("mp:fixed=9..5").is_err());
}
