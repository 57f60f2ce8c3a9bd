//! Counters a user needs to understand a session (exposed by `Connection::stats`).

/// Sender-side counters. Byte counts are payload bytes (frame headers excluded).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SenderStats {
    /// Bytes the application handed to the session.
    pub bytes_written: u64,
    /// Bytes acknowledged cumulatively by the peer.
    pub bytes_acked: u64,
    /// First transmissions of every byte (each stream byte counted once).
    pub bytes_sent: u64,
    /// Extra copies: redundant transmissions at a window's end and re-sends of data a dead
    /// or stalled path held.
    pub redundant_bytes_sent: u64,
    /// Bytes (first copies and redundant ones) handed to each path.
    pub per_path_bytes_sent: Vec<u64>,
    /// Transmission windows loaded.
    pub windows_loaded: u64,
    /// Times the sender had data but the peer's receive window kept it from loading more.
    pub window_stalls: u64,
    /// Layout changes after a window was loaded (a path joining a lane or splitting one).
    pub realignments: u64,
    /// Times a path was declared stalled (no delivery progress while holding data).
    pub path_stalls: u64,
    /// Changes of the forward path.
    pub forward_changes: u64,
    /// Times a path left its lane end to the other end, which was expected to deliver the
    /// next segment sooner (the meeting point by expected arrival).
    pub arrival_yields: u64,
    /// Wake episodes: data sent after every path had been idle for
    /// `FbdtConfig::wake_copies_after` (FBDT only).
    pub wake_episodes: u64,
    /// Bytes of the copies sent on a second path during wake episodes (also in
    /// `redundant_bytes_sent`).
    pub wake_copy_bytes: u64,
}

/// Receiver-side counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReceiverStats {
    /// Bytes delivered in order (readable or read by the application).
    pub bytes_delivered: u64,
    /// Bytes read by the application.
    pub bytes_read: u64,
    /// Payload bytes that arrived again after they had already been received (discarded).
    pub redundant_bytes_received: u64,
    /// Payload bytes received on each path, duplicates included.
    pub per_path_bytes_received: Vec<u64>,
    /// ALIGN frames received.
    pub aligns_received: u64,
    /// ACK frames produced.
    pub acks_sent: u64,
    /// Largest number of bytes held out of order at once.
    pub max_out_of_order_bytes: u64,
    /// Meta layer only: peak occupancy of the shared receive buffer (out-of-order plus
    /// in-order unread bytes). 0 for FBDT.
    pub max_buffered_bytes: u64,
}
