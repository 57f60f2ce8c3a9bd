//! FBDT (journal paper sec. IV): the sender and receiver over N paths.

mod estimate;
mod layout;
mod receiver;
mod sender;

pub use receiver::FbdtReceiver;
pub use sender::FbdtSender;
