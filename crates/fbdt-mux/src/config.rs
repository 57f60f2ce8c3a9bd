//! What a mux is configured with, and the window both ends assume.

/// Every stream's first window, both directions (part of the protocol: both ends assume it).
pub const INITIAL_WINDOW: u64 = 128 * 1024;

#[derive(Clone, Debug)]
pub struct MuxConfig {
    /// Most streams open at once (ours and the peer's); further OPENs are refused.
    pub max_streams: usize,
    /// Largest window one stream may grow to. 16 MiB carries 1 Gbit/s over 130 ms, or
    /// 4 Gbit/s over 33 ms.
    pub max_window: u64,
    /// Most bytes the windows of all streams may add up to by growing; a stream always
    /// gets its initial window, so what peers can make us buffer is at most
    /// `max(budget, max_streams × INITIAL_WINDOW)`.
    pub budget: u64,
    /// Most unsent bytes one stream queues here before its writer waits.
    pub send_buffer: usize,
}

impl Default for MuxConfig {
    fn default() -> Self {
        MuxConfig {
            max_streams: 512,
            max_window: 16 << 20,
            budget: 128 << 20,
            send_buffer: 256 * 1024,
        }
    }
}
