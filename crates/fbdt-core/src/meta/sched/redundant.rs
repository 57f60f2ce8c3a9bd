//! Redundant: every segment on every subflow. The meta layer keeps a per-path cursor and
//! sends each path every segment from the lowest unacknowledged one up; `select` is unused.

use super::{Scheduler, View};
use crate::path::PathId;

#[derive(Clone)]
pub struct Redundant;

impl Scheduler for Redundant {
    fn select(&mut self, v: &View<'_>) -> Option<PathId> {
        v.fastest_with_space().map(|p| p.id)
    }
    fn redundant(&self) -> bool {
        true
    }
    fn reinject_default(&self) -> bool {
        false
    }
}
