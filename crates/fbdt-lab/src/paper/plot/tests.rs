use super::*;
use fbdt_scenario::Scenario;

#[test]
fn blockage_down_intervals_and_capacity_steps() {
    let mut sc = Scenario::load("blockage").unwrap();
    sc.duration_s = 12.0;
    let s = sc.schedule(0.5).unwrap();
    let down = zero_rate_intervals(&s);
    let spans: Vec<(f64, f64)> = down.iter().map(|d| (d.1, d.2)).collect();
    assert_eq!(spans, [(2.0, 4.0), (6.0, 8.0), (10.0, 12.0)]);
    assert!(down.iter().all(|d| d.0 == "wigig"));
    let cap = capacity_steps(&s);
    assert_eq!(cap.first(), Some(&(0.0, 925.0)));
    assert!(cap.contains(&(2.0, 225.0)) && cap.contains(&(4.0, 925.0)));
    assert_eq!(cap.last(), Some(&(12.0, 225.0)));
}

#[test]
fn cdf_steps_reach_one() {
    let v = cdf_steps(&[1.0, 2.0]);
    assert_eq!(v, [(1.0, 0.0), (1.0, 0.5), (2.0, 0.5), (2.0, 1.0)]);
}

#[test]
fn one_second_samples_average_whole_seconds() {
    let series: Vec<Sample> = (1..=25)
        .map(|i| Sample {
            t: i as f64 * 0.1,
            mbps: if i <= 10 { 100.0 } else { i as f64 },
        })
        .collect();
    let s = per_second(&series, 10.0);
    // 2.5 s → two whole seconds; the second is the mean of 11..=20.
    assert_eq!(s, vec![100.0, 15.5]);
    // Samples after the end of a 1 s run do not count.
    assert_eq!(per_second(&series, 1.0), vec![100.0]);
    assert!(per_second(&[], 1.0).is_empty());
}
