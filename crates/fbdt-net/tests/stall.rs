//! Issue 42: a peer that stops reading must not hold a server session's buffers until the
//! application gives up (a perf download's deadline was up to an hour): once it has
//! acknowledged none of the outstanding bytes for `send_stall_timeout`, the session is
//! closed and its buffers are freed.

use std::time::{Duration, Instant};

use fbdt_net::{connect, listen, NetConfig, PathSpec};
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_peer_does_not_read_is_closed_after_the_stall() {
    let stall = Duration::from_millis(500);
    let cfg = NetConfig {
        send_stall_timeout: Some(stall),
        ..NetConfig::default()
    };
    let mut l = listen(&["127.0.0.1:0".parse().unwrap()], cfg).await.unwrap();
    let spec: PathSpec = l.local_addrs()[0].to_string().parse().unwrap();
    // The client holds its session and never reads from it.
    let client = connect(vec![spec], NetConfig::default()).await.unwrap();
    let mut server = l.accept().await.unwrap();
    let stats = server.stats_handle();
    let chunk = bytes::Bytes::from(vec![1u8; 1 << 20]);
    let t = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            server.write_chunk(chunk.clone()).await?;
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    })
    .await
    .expect("the server's writes fail once the peer stalled");
    let e = r.expect_err("the session ended");
    let why = stats.error().unwrap_or_default();
    eprintln!(
        "server session closed {:?} after its first write, {} bytes written, {} acknowledged: {why}",
        t.elapsed(),
        stats.stats().bytes_written,
        stats.stats().bytes_acked
    );
    assert!(why.contains("acknowledged none"), "{why} / {e}");
    // The server's end frees everything: the session (and its buffers) is dropped.
    let _ = server.shutdown().await;
    drop(server);
    drop(client);
}
