//! Helpers shared by the integration tests.

/// The bytes of a valid client HELLO on path 0, as a raw peer would send them.
#[allow(dead_code)] // not every test binary that includes this module speaks raw frames
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

/// Echoes every session the listener accepts (the silent ones end with an error).
#[allow(dead_code)] // not every test binary that includes this module echoes
pub fn echo_all(mut l: fbdt_net::Listener) -> tokio::task::JoinHandle<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::spawn(async move {
        while let Some(mut s) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                if s.read_to_end(&mut buf).await.is_ok() {
                    let _ = s.write_all(&buf).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    })
}
