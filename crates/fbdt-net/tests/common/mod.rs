//! Helpers shared by the integration tests.

/// The bytes of a valid client HELLO on path 0, as a raw peer would send them.
pub fn hello_bytes() -> Vec<u8> {
    let mut c = fbdt_core::Connection::client(fbdt_core::Config::default()).unwrap();
    c.add_path(fbdt_core::PathId(0), fbdt_core::Instant::ZERO).unwrap();
    let mut out = Vec::new();
    let _ = c.poll_transmit(
        fbdt_core::PathId(0),
        fbdt_core::max_frame_len(),
        fbdt_core::Instant::ZERO,
        &mut out,
    );
    out
}
