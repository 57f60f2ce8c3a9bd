//! FBDT (journal paper sec. IV): the sender and receiver over N paths.

mod config;
mod estimate;
mod layout;
mod receiver;
mod sender;
mod wake;

pub use config::{AckSilenceUse, FbdtConfig, WindowConfig, BUDGET_MAX_WINDOW, DEFAULT_BUDGET, DEFAULT_WAKE_COPIES_AFTER};
pub use receiver::FbdtReceiver;
pub use sender::FbdtSender;
