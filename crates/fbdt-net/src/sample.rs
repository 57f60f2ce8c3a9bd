//! The bulk reader every measurement uses: reads a stream to its end and samples the
//! cumulative byte count at a fixed interval (100 ms in the lab and `fbdt perf`), so
//! goodput series from every tool are cut the same way.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};

use crate::Session;

/// Most bytes read per call: the buffer starts at `FIRST_READ_BUF` and doubles each time
/// a read fills it, so an idle reader holds 4 KiB, a busy one 256 KiB.
const READ_BUF: usize = 256 * 1024;
const FIRST_READ_BUF: usize = 4 * 1024;

/// What [`read_sampled`] read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadTotal {
    pub bytes: u64,
    /// Seconds from the start to EOF (or to `stop_after`).
    pub secs: f64,
}

/// Where [`read_sampled_from`] takes its bytes: a reader that copies them into a buffer
/// ([`Copying`], any `AsyncRead`) or an FBDT session that hands over the received slices
/// ([`Session::read_chunk`], no copy).
pub trait ByteSource {
    /// Takes what is there and says how many bytes; 0 at the end of the stream.
    fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>>;
}

/// An `AsyncRead` read into a buffer that starts at `FIRST_READ_BUF` and doubles each time
/// a read fills it, so an idle reader holds 4 KiB, a busy one 256 KiB.
pub struct Copying<R> {
    r: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Copying<R> {
    pub fn new(r: R) -> Self {
        Copying {
            r,
            buf: vec![0u8; FIRST_READ_BUF],
        }
    }
}

impl<R: AsyncRead + Unpin> ByteSource for Copying<R> {
    fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut rb = ReadBuf::new(&mut self.buf);
        ready!(Pin::new(&mut self.r).poll_read(cx, &mut rb))?;
        let n = rb.filled().len();
        if n == self.buf.len() && self.buf.len() < READ_BUF {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        Poll::Ready(Ok(n))
    }
}

impl ByteSource for Session {
    fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        Poll::Ready(ready!(self.poll_read_chunk(cx)).map(|b| b.map_or(0, |b| b.len())))
    }
}

impl<S: ByteSource + ?Sized> ByteSource for &mut S {
    fn poll_take(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        (**self).poll_take(cx)
    }
}

/// Reads `r` to EOF, or until `stop_after` has passed, calling `on_sample(t, bytes)` every
/// `every` (the first one `every` after the start) with the seconds since the start and
/// the bytes read so far.
pub async fn read_sampled(
    r: impl AsyncRead + Unpin,
    every: Duration,
    stop_after: Option<Duration>,
    on_sample: impl FnMut(f64, u64),
) -> std::io::Result<ReadTotal> {
    read_sampled_from(Copying::new(r), every, stop_after, on_sample).await
}

/// [`read_sampled`] from any [`ByteSource`] (an FBDT session reads without a copy).
pub async fn read_sampled_from(
    mut src: impl ByteSource,
    every: Duration,
    stop_after: Option<Duration>,
    mut on_sample: impl FnMut(f64, u64),
) -> std::io::Result<ReadTotal> {
    let start = tokio::time::Instant::now();
    // Without a limit: a deadline that never comes within any run (a century).
    let stop = start + stop_after.unwrap_or(Duration::from_secs(100 * 365 * 86_400));
    let mut tick = tokio::time::interval_at(start + every, every);
    let mut bytes = 0u64;
    loop {
        tokio::select! {
            n = std::future::poll_fn(|cx| src.poll_take(cx)) => match n? {
                0 => break,
                n => bytes += n as u64,
            },
            _ = tick.tick() => on_sample(start.elapsed().as_secs_f64(), bytes),
            _ = tokio::time::sleep_until(stop) => break,
        }
    }
    Ok(ReadTotal {
        bytes,
        secs: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn samples_at_each_interval_until_eof() {
        let (mut w, r) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            w.write_all(&[1; 1000]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await;
            w.write_all(&[2; 500]).await.unwrap();
        });
        let mut samples = Vec::new();
        let total = read_sampled(r, Duration::from_millis(100), None, |t, b| samples.push((t, b)))
            .await
            .unwrap();
        writer.await.unwrap();
        let bytes: Vec<u64> = samples.iter().map(|s| s.1).collect();
        assert_eq!(bytes, [1000, 1000], "{samples:?}");
        assert_eq!(total.bytes, 1500);
    }

    #[tokio::test(start_paused = true)]
    async fn stops_after_the_limit_without_eof() {
        let (_w, r) = tokio::io::duplex(1024);
        let mut n = 0;
        let total = read_sampled(
            r,
            Duration::from_millis(100),
            Some(Duration::from_millis(350)),
            |_, _| n += 1,
        )
        .await
        .unwrap();
        assert_eq!((n, total.bytes), (3, 0));
    }
}
