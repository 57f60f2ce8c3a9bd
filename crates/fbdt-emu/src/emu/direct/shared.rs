//! A shared bottleneck: one more rate stage with one drop-tail queue that the data
//! direction of several paths crosses before its own stages (two radios behind one
//! backhaul, and competing flows on paths of their own). Timed on logical times as the
//! lanes are: a frame leaves the link at its computed departure, and enters its path's lane
//! at that time, however late the loop gets to it.

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Instant,
};

use super::frames::{admit, serialisation, Frame, Pool, Timed};

/// What [`super::prepare`] needs to build the stage.
pub(crate) struct SharedSetup {
    /// Indices of the paths whose data direction crosses the link.
    pub members: Vec<usize>,
    pub rate_bps: u64,
    pub queue_packets: usize,
    /// Per member (in `members`' order): IP bytes of its frames that left the link.
    pub crossed: Vec<Arc<AtomicU64>>,
}

pub(super) struct Shared {
    rate_bps: u64,
    queue_limit: usize,
    /// Packets queued (a GSO unit counts its segments).
    queued: usize,
    /// Frames waiting for the link, each with the lane it goes on to.
    waiting: VecDeque<(Timed, usize)>,
    /// When the head finishes on the link.
    head_done: Option<Instant>,
    link_free: Instant,
    /// Per lane: the byte counter of a lane that crosses the link, `None` for the others.
    crossed: Vec<Option<Arc<AtomicU64>>>,
}

impl Shared {
    /// `lane_of_path(i)`: path i's data-direction lane.
    pub(super) fn new(setup: SharedSetup, lanes: usize, lane_of_path: impl Fn(usize) -> usize, start: Instant) -> Self {
        let mut crossed = vec![None; lanes];
        for (&p, counter) in setup.members.iter().zip(setup.crossed) {
            if let Some(slot) = crossed.get_mut(lane_of_path(p)) {
                *slot = Some(counter);
            }
        }
        Self {
            rate_bps: setup.rate_bps.max(1),
            queue_limit: setup.queue_packets.max(1),
            queued: 0,
            waiting: VecDeque::new(),
            head_done: None,
            link_free: start,
            crossed,
        }
    }

    /// Whether frames bound for `lane` cross the link first.
    pub(super) fn carries(&self, lane: usize) -> bool {
        self.crossed.get(lane).is_some_and(Option::is_some)
    }

    /// A frame for `lane` read at `now` joins the queue; given back if the queue was full
    /// (dropped). Of a GSO unit only the segments that fit are queued, as at a lane.
    pub(super) fn arrive(&mut self, frame: Frame, now: Instant, lane: usize, pool: &mut Pool) -> Result<(), Frame> {
        let room = self.queue_limit.saturating_sub(self.queued);
        let mut enqueue = |frame: Frame| {
            self.queued += frame.segments();
            self.waiting.push_back((Timed { frame, at: now }, lane));
        };
        let mut parts = Vec::new();
        match admit(frame, room, pool, |f| parts.push(f)) {
            Ok(frame) => enqueue(frame),
            Err(frame) => {
                parts.into_iter().for_each(enqueue);
                return Err(frame);
            }
        }
        Ok(())
    }

    /// Hands every frame whose departure is due by `now` to `onward` (its lane, the frame,
    /// its departure time). Returns when the next departs.
    pub(super) fn advance(&mut self, now: Instant, mut onward: impl FnMut(usize, Frame, Instant)) -> Option<Instant> {
        loop {
            let done = match self.head_done {
                Some(d) => d,
                None => {
                    let (head, _) = self.waiting.front()?;
                    let d = self.link_free.max(head.at) + serialisation(head.frame.l3(), self.rate_bps);
                    self.head_done = Some(d);
                    d
                }
            };
            if done > now {
                return Some(done);
            }
            let (Timed { frame, .. }, lane) = self.waiting.pop_front().expect("a head is in service");
            self.queued -= frame.segments();
            self.head_done = None;
            self.link_free = done;
            if let Some(Some(counter)) = self.crossed.get(lane) {
                counter.fetch_add(frame.l3(), Ordering::Relaxed);
            }
            onward(lane, frame, done);
        }
    }
}
