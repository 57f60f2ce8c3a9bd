use super::*;

fn table(kind: &str, scenario: &str, rows: &[(&str, [f64; 4])]) -> Table {
    Table {
        kind: kind.into(),
        scenario: scenario.into(),
        metric: String::new(),
        schemes: ["fbdt", SIM_MPTCP, WIFI, WIGIG].map(String::from).to_vec(),
        rows: rows
            .iter()
            .map(|(l, v)| Row {
                label: l.to_string(),
                values: v.iter().map(|&x| Some(x)).collect(),
                paper: None,
            })
            .collect(),
        unfaithful_runs: 0,
    }
}

/// Checks read the best case across scenarios, name where it was, and say MISS or
/// N/A honestly.
#[test]
fn claims_are_checked_on_hand_made_tables() {
    let tables = vec![
        table(
            "file",
            "los",
            &[
                ("100 KB idle", [10.0, 12.0, 8.0, 13.0]),
                ("1 GB busy", [4000.0, 4100.0, 9000.0, 6000.0]),
            ],
        ),
        table("file", "mobility", &[("100 KB idle", [10.0, 12.0, 8.0, 7.0])]),
        table(
            "web",
            "los",
            &[
                ("msn HTTP/2", [100.0, 110.0, 300.0, 115.0]),
                ("msn HTTP/1.1", [100.0, 500.0, 300.0, 500.0]),
            ],
        ),
        table(
            "progressive",
            "mobility",
            &[("1700 Mbit/s pauses %", [5.0, 30.0, 70.0, 35.0])],
        ),
    ];
    let c = checks(&tables);
    let get = |t: &str| c.iter().find(|x| x.target.starts_with(t)).unwrap();
    let wigig = get("files: FBDT up to 1.3× faster than WiGig");
    assert_eq!((wigig.value, wigig.status), (Some(1.5), Status::Pass));
    assert_eq!(wigig.scenario, "workloads: los 1 GB busy");
    let wifi = get("files: FBDT up to 3× faster than WiFi");
    assert_eq!((wifi.value, wifi.status), (Some(2.25), Status::Miss));
    let wake = get("files: WiFi beats WiGig");
    assert_eq!((wake.value, wake.status), (Some(7.0 / 8.0), Status::Miss));
    assert_eq!(wake.scenario, "workloads: mobility 100 KB idle");
    // HTTP/1.1 rows do not count for the HTTP/2 claim.
    let web = get("web (HTTP/2): FBDT up to 1.2× faster than MPTCP");
    assert_eq!((web.value, web.status), (Some(1.1), Status::Miss));
    let fig10 = get("progressive 8K");
    assert_eq!((fig10.value, fig10.status), (Some(25.0), Status::Pass));
    assert_eq!(get("360° FIX").status, Status::NotMeasured);
}

/// On the testbed: the kernel's MPTCP column stands for MPTCP, and a table with a flagged
/// run counts in no claim — its best case is neither PASS nor MISS.
#[test]
fn flagged_tables_count_in_no_claim() {
    let mut los = table("file", "los", &[("1 GB busy", [4000.0, 4100.0, 9000.0, 6000.0])]);
    los.schemes[1] = KERNEL_MPTCP.into();
    let mut mobility = table("file", "mobility", &[("1 GB busy", [1000.0, 3000.0, 9000.0, 6000.0])]);
    mobility.schemes[1] = KERNEL_MPTCP.into();
    mobility.unfaithful_runs = 2;
    let c = checks(&[los.clone(), mobility.clone()]);
    let get = |c: &[Check], t: &str| c.iter().find(|x| x.target.starts_with(t)).unwrap().clone();
    // Judged on los alone: 4100 / 4000.
    let m = get(&c, "files: FBDT up to 1.3× faster than MPTCP");
    assert_eq!((m.value, m.status), (Some(4100.0 / 4000.0), Status::Miss));
    // Only mobility has data: shown, not judged.
    let c = checks(&[mobility]);
    let m = get(&c, "files: FBDT up to 1.3× faster than MPTCP");
    assert_eq!((m.value, m.status), (Some(3.0), Status::Unfaithful));
    assert_eq!(get(&c, "web (HTTP/2)").status, Status::NotMeasured);
}

#[test]
fn sizes_read_as_the_paper_writes_them() {
    assert_eq!(size_label(100_000), "100 KB");
    assert_eq!(size_label(10_000_000), "10 MB");
    assert_eq!(size_label(1_000_000_000), "1 GB");
}
