//! `fbdt_core::Connection` holds its MPTCP scheduler as `Box<dyn Scheduler>` (no `+ Send`),
//! so the compiler treats it as `!Send` although every scheduler the core can build is
//! plain data. Until the core adds `+ Send` to that box (requested), the session driver is
//! moved between tokio worker threads through [`SendConnection`], justified by the checks
//! below: they fail to compile if any scheduler type stops being `Send`, or if
//! `SchedulerKind` grows a variant (then add its type here).

use fbdt_core::mptcp::sched::{Amuse, Blest, Ecf, FixedRatio, MinRtt, Musher, Redundant, RoundRobin};
use fbdt_core::SchedulerKind;

const fn assert_send<T: Send>() {}

#[allow(dead_code)]
const fn every_scheduler_is_send(k: SchedulerKind) {
    // Exhaustive on purpose: a new variant breaks this build until it is checked here.
    match k {
        SchedulerKind::MinRtt => assert_send::<MinRtt>(),
        SchedulerKind::Blest => assert_send::<Blest>(),
        SchedulerKind::Ecf => assert_send::<Ecf>(),
        SchedulerKind::RoundRobin => assert_send::<RoundRobin>(),
        SchedulerKind::Redundant => assert_send::<Redundant>(),
        SchedulerKind::Fixed(_) => assert_send::<FixedRatio>(),
        SchedulerKind::Amuse => assert_send::<Amuse>(),
        SchedulerKind::Musher => assert_send::<Musher>(),
    }
}

/// A `Connection` that may cross threads (see the module doc).
pub(crate) struct SendConnection(pub fbdt_core::Connection);

// SAFETY: every field of `Connection` is `Send` except the `Box<dyn Scheduler>` trait
// object, whose concrete types are all checked `Send` above; nothing in the core is shared
// between threads (no `Rc`, no thread-locals), so moving it is sound.
unsafe impl Send for SendConnection {}

impl std::ops::Deref for SendConnection {
    type Target = fbdt_core::Connection;
    fn deref(&self) -> &fbdt_core::Connection {
        &self.0
    }
}

impl std::ops::DerefMut for SendConnection {
    fn deref_mut(&mut self) -> &mut fbdt_core::Connection {
        &mut self.0
    }
}
