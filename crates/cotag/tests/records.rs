//! The per-label records the testbed joins to say why a cohort failed.

use cotag::wire::{CodedPacket, Priority};
use cotag::{Ap, ApConfig, Device, DeviceConfig, FailReason};

fn pkt(label: u32, prio: Priority, tag: u8) -> Vec<u8> {
    CodedPacket {
        label,
        priority: prio,
        coeffs: vec![tag, tag.wrapping_add(1).max(1), 7],
        payload: vec![tag; 6],
    }
    .to_bytes()
    .unwrap()
}

#[test]
fn device_records_a_failed_cohort_per_link() {
    let mut d = Device::new(DeviceConfig::default()).unwrap();
    d.record_failures(10);
    // Label 0 (n = 3): one combination on link 0, one on link 1, then label 1 on both.
    d.handle_recv(0, &pkt(0, Priority::High, 1), 0).unwrap();
    d.handle_recv(1, &pkt(0, Priority::High, 2), 1).unwrap();
    d.handle_recv(0, &pkt(1, Priority::High, 3), 2).unwrap();
    d.handle_recv(1, &pkt(1, Priority::High, 4), 3).unwrap();
    // Late: label 0 after it was given up.
    d.handle_recv(1, &pkt(0, Priority::Low, 5), 4).unwrap();
    let f: Vec<_> = d.failures().cloned().collect();
    assert_eq!(f.len(), 1);
    let f = &f[0];
    assert_eq!((f.label, f.n, f.rank, f.reason), (0, 3, 2, FailReason::RankShort));
    assert_eq!((f.received, f.innovative, f.late), ([1, 1], [1, 1], [0, 1]));
    assert_eq!(d.stats().cohorts_failed, 1);
}

#[test]
fn ap_records_what_it_flushed() {
    let mut a = Ap::new(ApConfig {
        buffer_packets: 3,
        ..ApConfig::default()
    })
    .unwrap();
    a.record_labels(10);
    for tag in 1..=3 {
        a.handle_recv(&pkt(0, Priority::High, tag), 0).unwrap();
    }
    // Buffer full of Highs: an incoming Low of label 0 is dropped.
    a.handle_recv(&pkt(0, Priority::Low, 9), 0).unwrap();
    // Label 1 releases 0 (its High itself is dropped: the buffer holds only Highs).
    a.handle_recv(&pkt(1, Priority::High, 4), 10).unwrap();
    assert!(a.poll_transmit(10).unwrap().is_some());
    a.handle_recv(&pkt(2, Priority::High, 5), 20).unwrap(); // flushes 0
    let r = a.label_records().find(|r| r.label == 0).unwrap().clone();
    assert_eq!((r.accepted_high, r.forwarded_high), (3, 1));
    assert_eq!((r.flushed_high, r.flushed_allowed), (2, 2));
    assert_eq!(r.full_dropped_low, 1);
    assert!(!r.liveness_release);
}

/// A driver held up for longer than the liveness timeout reads its backlog at one `now`:
/// link 0's datagrams first, then link 1's. The cohort whose last combination waits on link 1
/// must still decode — the timeout is for `handle_timeout`, after the input.
#[test]
fn a_backlog_read_late_does_not_time_out_the_cohort_it_completes() {
    let mut d = Device::new(DeviceConfig {
        liveness_us: 1_000,
        ..DeviceConfig::default()
    })
    .unwrap();
    d.record_failures(10);
    // Uncoded rows (unit coefficients) of a 2-packet cohort: symbols are a big-endian
    // length, the bytes, zero padding.
    let c = |label: u32, row: usize| {
        let mut coeffs = vec![0; 2];
        coeffs[row] = 1;
        let payload = [vec![0, 1, 9, 0], vec![0, 2, 7, 7]][row].clone();
        CodedPacket {
            label,
            priority: Priority::High,
            coeffs,
            payload,
        }
        .to_bytes()
        .unwrap()
    };
    d.handle_recv(0, &c(0, 0), 0).unwrap();
    // 5 ms later: label 1 on link 0, then label 0's second combination on link 1.
    d.handle_recv(0, &c(1, 0), 5_000).unwrap();
    d.handle_recv(1, &c(0, 1), 5_000).unwrap();
    d.handle_timeout(5_000);
    assert_eq!(d.stats().cohorts_failed, 0, "{:?}", d.failures().collect::<Vec<_>>());
    assert_eq!(d.stats().cohorts_decoded, 1);
    let got: Vec<Vec<u8>> = std::iter::from_fn(|| d.poll_packet()).collect();
    assert_eq!(got, vec![vec![9], vec![7, 7]]);
}
