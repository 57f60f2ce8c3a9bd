//! What the streams, the mux handles and the driver's tasks share: the state behind one lock
//! and the writer task's wake-up.

use std::sync::Mutex;

use crate::state::State;

pub(crate) struct Shared {
    pub state: Mutex<State>,
    /// Wakes the writer task when frames are queued.
    pub writer: tokio::sync::Notify,
}

impl Shared {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug in this crate; the state is still
        // consistent enough to end every stream with an error, so carry on with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}
