//! One of the driver's timers, set in the core's time (microseconds since the session's
//! epoch): the core's own deadline, the receive low-water marks' fallback, the transport
//! reports the core waits for.

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use fbdt_core::Instant;
use tokio::time::Sleep;

pub(crate) struct Alarm {
    epoch: tokio::time::Instant,
    sleep: Pin<Box<Sleep>>,
    at: Option<tokio::time::Instant>,
}

impl Alarm {
    pub fn new(epoch: tokio::time::Instant) -> Alarm {
        Alarm {
            epoch,
            sleep: Box::pin(tokio::time::sleep_until(epoch + Duration::from_secs(3600))),
            at: None,
        }
    }

    /// True, once, when the alarm was set and its time has come (it is then unset).
    pub fn take_fired(&mut self, cx: &mut Context<'_>) -> bool {
        if self.at.is_some() && self.sleep.as_mut().poll(cx).is_ready() {
            self.at = None;
            return true;
        }
        false
    }

    /// Sets the alarm for `t` (`None`: unsets it) and registers the task to be woken then;
    /// true if that time has already come.
    pub fn set(&mut self, t: Option<Instant>, cx: &mut Context<'_>) -> bool {
        let Some(t) = t else {
            self.at = None;
            return false;
        };
        let at = self.epoch + Duration::from_micros(t.as_micros());
        if self.at != Some(at) {
            self.sleep.as_mut().reset(at);
            self.at = Some(at);
        }
        self.sleep.as_mut().poll(cx).is_ready()
    }
}
