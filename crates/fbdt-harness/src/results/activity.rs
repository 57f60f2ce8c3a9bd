//! What each end's session task did per second of transfer: where `wakeups_per_s` comes
//! from (issue 37: FBDT's cost is per wake-up, so what wakes it is the first question).

use serde::{Deserialize, Serialize};

/// One end's session task, per second of transfer (`fbdt_net::SessionStats`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndActivity {
    /// Times the task was polled.
    pub wakeups: f64,
    /// Of what those polls found: the core's timer due, socket reads that returned bytes,
    /// socket write batches, receive low-water marks set or cleared (a system call each)
    /// and marks that a fallback timer gave up on, TCP_INFO reads the send limit waited on.
    pub timer_fires: f64,
    pub reads: f64,
    pub writes: f64,
    pub lowat_changes: f64,
    pub lowat_fallbacks: f64,
    pub transport_reports: f64,
}

/// Both ends of a download: the data's sender and its receiver.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionActivity {
    pub sender: EndActivity,
    pub receiver: EndActivity,
}

impl EndActivity {
    pub fn of(s: &fbdt_net::SessionStats, secs: f64) -> Self {
        let per_s = |n: u64| n as f64 / secs.max(1e-9);
        EndActivity {
            wakeups: per_s(s.wakeups),
            timer_fires: per_s(s.timer_fires),
            reads: per_s(s.reads),
            writes: per_s(s.writes),
            lowat_changes: per_s(s.lowat_changes),
            lowat_fallbacks: per_s(s.lowat_fallbacks),
            transport_reports: per_s(s.transport_reports),
        }
    }

    fn values(&self) -> [f64; 7] {
        [
            self.wakeups,
            self.timer_fires,
            self.reads,
            self.writes,
            self.lowat_changes,
            self.lowat_fallbacks,
            self.transport_reports,
        ]
    }

    fn fields_mut(&mut self) -> [&mut f64; 7] {
        [
            &mut self.wakeups,
            &mut self.timer_fires,
            &mut self.reads,
            &mut self.writes,
            &mut self.lowat_changes,
            &mut self.lowat_fallbacks,
            &mut self.transport_reports,
        ]
    }
}

impl SessionActivity {
    /// The mean over repetitions; None when none measured it.
    pub fn mean<'a>(runs: impl IntoIterator<Item = &'a SessionActivity>) -> Option<SessionActivity> {
        let mut sum = SessionActivity::default();
        let mut n = 0usize;
        for run in runs {
            n += 1;
            for (total, one) in [(&mut sum.sender, &run.sender), (&mut sum.receiver, &run.receiver)] {
                for (t, v) in total.fields_mut().into_iter().zip(one.values()) {
                    *t += v;
                }
            }
        }
        (n > 0).then(|| {
            for end in [&mut sum.sender, &mut sum.receiver] {
                end.fields_mut().into_iter().for_each(|v| *v /= n as f64);
            }
            sum
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mean_is_taken_field_by_field_over_the_runs_that_have_one() {
        let run = |w: f64, r: f64| SessionActivity {
            sender: EndActivity { wakeups: w, writes: 2.0 * w, ..EndActivity::default() },
            receiver: EndActivity { wakeups: r, lowat_changes: 1.0, ..EndActivity::default() },
        };
        let m = SessionActivity::mean([&run(100.0, 10.0), &run(300.0, 30.0)]).unwrap();
        assert_eq!(m.sender.wakeups, 200.0);
        assert_eq!(m.sender.writes, 400.0);
        assert_eq!(m.receiver.wakeups, 20.0);
        assert_eq!(m.receiver.lowat_changes, 1.0);
        assert_eq!(SessionActivity::mean([]), None);
    }

    #[test]
    fn counts_become_rates_over_the_transfer() {
        let s = fbdt_net::SessionStats { wakeups: 5000, reads: 2500, transport_reports: 10, ..Default::default() };
        let a = EndActivity::of(&s, 2.5);
        assert_eq!((a.wakeups, a.reads, a.transport_reports, a.timer_fires), (2000.0, 1000.0, 4.0, 0.0));
    }
}
