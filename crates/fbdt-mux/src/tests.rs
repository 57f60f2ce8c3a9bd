//! The mux over an in-memory pipe: content, half-close, reset, a stalled reader, the stream
//! limit, and a peer that breaks the protocol.

use std::io::ErrorKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn pair(server_cfg: MuxConfig) -> ((Mux, Incoming), (Mux, Incoming)) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let client = Mux::new(a, true, MuxConfig::default()).unwrap();
    let server = Mux::new(b, false, server_cfg).unwrap();
    (client, server)
}

fn random(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen()).collect()
}

/// Serves every stream: reads all of it, answers with the request's bytes repeated to the
/// size the request names, as "SIZE SEED", then the SHA-256 of what it read.
fn serve_generated(mut incoming: Incoming) {
    tokio::spawn(async move {
        while let Some((mut s, req)) = incoming.accept().await {
            tokio::spawn(async move {
                let text = std::str::from_utf8(&req).unwrap().to_string();
                let (size, seed) = text.split_once(' ').unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).await.unwrap();
                s.write_all(&Sha256::digest(&got)).await.unwrap();
                s.write_all(&random(size.parse().unwrap(), seed.parse().unwrap()))
                    .await
                    .unwrap();
                s.shutdown().await.unwrap();
                // Keep the handle until the client finished reading (then the stream ends
                // quietly on drop: both FINs crossed).
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest).await;
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_carry_intact_content_both_ways() {
    let ((client, _ci), (_sm, incoming)) = pair(MuxConfig::default());
    serve_generated(incoming);
    let mut tasks = Vec::new();
    for i in 0..64u64 {
        let mut s = client.open(Bytes::from(format!("{} {i}", 300_000 + i * 1000))).unwrap();
        tasks.push(tokio::spawn(async move {
            let up = random(100_000 + i as usize, 1000 + i);
            s.write_all(&up).await.unwrap();
            s.shutdown().await.unwrap();
            let mut back = Vec::new();
            s.read_to_end(&mut back).await.unwrap();
            assert_eq!(
                &back[..32],
                &Sha256::digest(&up)[..],
                "stream {i}: the server read other bytes"
            );
            assert_eq!(
                back[32..],
                random(300_000 + i as usize * 1000, i),
                "stream {i}: reply differs"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn half_close_is_a_fin_and_the_other_direction_goes_on() {
    let ((client, _ci), (_sm, mut incoming)) = pair(MuxConfig::default());
    let mut c = client.open(Bytes::from_static(b"hi")).unwrap();
    c.write_all(b"request").await.unwrap();
    c.shutdown().await.unwrap();
    let (mut s, req) = incoming.accept().await.unwrap();
    assert_eq!(&req[..], b"hi");
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"request");
    // Our side of the stream is still open after the peer's FIN.
    s.write_all(b"answer after the client's FIN").await.unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"answer after the client's FIN");
    assert!(c.write_all(b"x").await.is_err(), "a write after shutdown must fail");
}

#[tokio::test]
async fn reset_reaches_the_peer_as_connection_reset() {
    let ((client, _ci), (server, mut incoming)) = pair(MuxConfig::default());
    let mut c = client.open(Bytes::new()).unwrap();
    c.write_all(b"partial").await.unwrap();
    let (mut s, _) = incoming.accept().await.unwrap();
    let mut first = [0u8; 7];
    s.read_exact(&mut first).await.unwrap();
    c.reset();
    let mut more = [0u8; 1];
    let e = s.read(&mut more).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    let e = s.write_all(b"late").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    drop(s);
    // Both ends forget the stream.
    for _ in 0..100 {
        if client.open_streams() == 0 && server.open_streams() == 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!(
        "streams left: client {} server {}",
        client.open_streams(),
        server.open_streams()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_blocks_only_its_own_stream_and_holds_at_most_its_window() {
    let ((client, _ci), (_sm, mut incoming)) = pair(MuxConfig::default());
    let written_to_stalled = Arc::new(AtomicUsize::new(0));
    let counter = written_to_stalled.clone();
    // Server: stream "stall" gets an endless supply; the others 2 MB each.
    tokio::spawn(async move {
        while let Some((mut s, req)) = incoming.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                if &req[..] == b"stall" {
                    let block = [7u8; 1024];
                    while s.write_all(&block).await.is_ok() {
                        counter.fetch_add(block.len(), Ordering::Relaxed);
                    }
                } else {
                    let seed: u64 = std::str::from_utf8(&req).unwrap().parse().unwrap();
                    s.write_all(&random(2_000_000, seed)).await.unwrap();
                    s.shutdown().await.unwrap();
                    let _ = s.read_to_end(&mut Vec::new()).await;
                }
            });
        }
    });
    let stalled = client.open(Bytes::from_static(b"stall")).unwrap();
    let mut others = Vec::new();
    for seed in 1..=8u64 {
        let mut s = client.open(Bytes::from(seed.to_string())).unwrap();
        others.push(tokio::spawn(async move {
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.shutdown().await.unwrap();
            assert!(got == random(2_000_000, seed), "stream {seed}: content differs");
        }));
    }
    for t in others {
        t.await.unwrap();
    }
    // The stalled stream never read: the server got no credit back beyond the first window,
    // and its own send buffer is bounded.
    let limit = INITIAL_WINDOW as usize + MuxConfig::default().send_buffer;
    let written = written_to_stalled.load(Ordering::Relaxed);
    assert!(
        written <= limit,
        "{written} bytes accepted for a reader that never read (limit {limit})"
    );
    assert!(
        written >= INITIAL_WINDOW as usize,
        "the stalled stream got less than its first window"
    );
    drop(stalled);
}

#[tokio::test]
async fn streams_beyond_the_limit_are_refused_and_others_go_on() {
    let cfg = MuxConfig {
        max_streams: 3,
        ..MuxConfig::default()
    };
    let ((client, _ci), (_sm, incoming)) = pair(cfg);
    serve_generated(incoming);
    let mut held = Vec::new();
    for i in 0..3 {
        held.push(client.open(Bytes::from(format!("10 {i}"))).unwrap());
    }
    let mut refused = client.open(Bytes::from_static(b"10 9")).unwrap();
    let e = refused.read(&mut [0u8; 1]).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    let mut s = held.pop().unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).await.unwrap();
    assert_eq!(back.len(), 32 + 10);
}

#[tokio::test]
async fn a_peer_that_sends_beyond_its_credit_ends_the_mux_with_a_clear_error() {
    let (a, mut raw) = tokio::io::duplex(4 << 20);
    let (_server, mut incoming) = Mux::new(a, false, MuxConfig::default()).unwrap();
    let mut frames = bytes::BytesMut::new();
    frame::Header {
        kind: frame::Kind::Open,
        stream: 1,
        length: 0,
    }
    .encode(&mut frames);
    for _ in 0..(INITIAL_WINDOW as usize / MAX_DATA + 1) {
        frame::Header {
            kind: frame::Kind::Data,
            stream: 1,
            length: MAX_DATA as u32,
        }
        .encode(&mut frames);
        frames.extend_from_slice(&[0u8; MAX_DATA]);
    }
    raw.write_all(&frames).await.unwrap();
    let (mut s, _) = incoming.accept().await.unwrap();
    let mut sink = Vec::new();
    let e = s.read_to_end(&mut sink).await.unwrap_err();
    assert!(e.to_string().contains("credit"), "{e}");
    assert!(incoming.accept().await.is_none());
}

#[tokio::test]
async fn garbage_ends_the_mux_and_no_stream_can_open() {
    let (a, mut raw) = tokio::io::duplex(4096);
    let (client, _incoming) = Mux::new(a, true, MuxConfig::default()).unwrap();
    raw.write_all(&[0xff; 9]).await.unwrap();
    for _ in 0..100 {
        if let Some(why) = client.closed() {
            assert!(why.contains("unknown frame kind"), "{why}");
            assert!(client.open(Bytes::new()).is_err());
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("the mux did not end");
}

#[tokio::test]
async fn an_answer_then_close_reaches_a_peer_that_is_still_sending() {
    let ((client, _ci), (_sm, mut incoming)) = pair(MuxConfig::default());
    let mut c = client.open(Bytes::new()).unwrap();
    c.write_all(b"request the server will not read").await.unwrap();
    let (mut s, _) = incoming.accept().await.unwrap();
    s.write_all(b"refused").await.unwrap();
    s.shutdown().await.unwrap();
    // Closed with the request unread, as a server that refuses closes its socket.
    drop(s);
    let mut back = Vec::new();
    c.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"refused");
    // More data to the closed stream is answered with RST.
    let mut reset = false;
    for _ in 0..200 {
        if let Err(e) = c.write_all(&[0u8; 1024]).await {
            assert_eq!(e.kind(), ErrorKind::ConnectionReset);
            reset = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(reset, "writes to a stream the peer closed never failed");
}

/// A duplex pipe end that counts the batches handed over whole (`poll_write_bytes`).
struct Counting {
    io: tokio::io::DuplexStream,
    batches: Arc<AtomicUsize>,
}

impl tokio::io::AsyncRead for Counting {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Counting {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl Transport for Counting {
    fn poll_write_bytes(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &mut Bytes,
    ) -> std::task::Poll<std::io::Result<()>> {
        let me = self.get_mut();
        let before = data.len();
        let done = std::pin::Pin::new(&mut me.io).poll_write_bytes_default(cx, data);
        if data.len() < before {
            me.batches.fetch_add(1, Ordering::Relaxed);
        }
        done
    }
}

/// The default (copying) hand-off, reached through a wrapper that does not override it.
trait DefaultWrite {
    fn poll_write_bytes_default(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &mut Bytes,
    ) -> std::task::Poll<std::io::Result<()>>;
}

impl DefaultWrite for tokio::io::DuplexStream {
    fn poll_write_bytes_default(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &mut Bytes,
    ) -> std::task::Poll<std::io::Result<()>> {
        use bytes::Buf as _;
        while !data.is_empty() {
            let n = std::task::ready!(tokio::io::AsyncWrite::poll_write(self.as_mut(), cx, data))?;
            data.advance(n);
        }
        std::task::Poll::Ready(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_buffers_cross_intact_through_a_batch_taking_transport() {
    let (a, b) = tokio::io::duplex(1 << 20);
    let batches = Arc::new(AtomicUsize::new(0));
    let (client, _ci) = Mux::over(
        Counting {
            io: a,
            batches: batches.clone(),
        },
        true,
        MuxConfig::default(),
    )
    .unwrap();
    let (_sm, mut incoming) = Mux::new(b, false, MuxConfig::default()).unwrap();
    let data = Bytes::from(random(5_000_000, 77));
    let c = client.open(Bytes::from_static(b"bulk")).unwrap();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        // Pieces of one buffer, as the proxy's relay hands them over (no copy).
        for piece in sent.chunks(300_000) {
            c.write_bytes(sent.slice_ref(piece)).await.unwrap();
        }
        c.finish().unwrap();
        c
    });
    let (s, _) = incoming.accept().await.unwrap();
    let mut got = Vec::new();
    let mut chunks = Vec::new();
    loop {
        let n = s.read_chunks(&mut chunks, 100_000).await.unwrap();
        if n == 0 {
            break;
        }
        assert!(n <= 100_000, "read_chunks gave {n} bytes, more than asked");
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), n);
        for c in chunks.drain(..) {
            got.extend_from_slice(&c);
        }
    }
    assert!(got == data[..], "content differs ({} bytes)", got.len());
    assert!(
        batches.load(Ordering::Relaxed) > 0,
        "the batches did not go through poll_write_bytes"
    );
    drop(writer.await.unwrap());
}

/// A configuration the mux cannot run with is refused before anything starts, with a typed
/// error whose text is the one users always saw.
#[test]
fn a_bad_configuration_is_a_typed_error_with_the_same_text() {
    let refused = |cfg: MuxConfig| match Mux::new(tokio::io::duplex(64).0, true, cfg) {
        Err(MuxError::Config(e)) => e,
        _ => panic!("accepted"),
    };
    let e = refused(MuxConfig {
        max_streams: 0,
        ..MuxConfig::default()
    });
    assert_eq!(
        e,
        MuxConfigError::Limits {
            max_streams: 0,
            max_window: MuxConfig::default().max_window
        }
    );
    assert_eq!(
        MuxError::from(e).to_string(),
        "configuration: max_streams 0 must be > 0 and max_window 16777216 within 131072..=4 GiB"
    );
    let e = refused(MuxConfig {
        send_buffer: 0,
        ..MuxConfig::default()
    });
    assert_eq!(MuxError::from(e).to_string(), "configuration: send_buffer must be > 0");
}
