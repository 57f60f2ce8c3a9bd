//! The mux's two tasks: the reader parses frames off the transport and applies them to the
//! state; the writer sends the batches the state prepares. Neither waits for a stream's
//! application, so a stalled reader of one stream stalls nothing else.

use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::frame::{Header, HEADER_LEN};
use crate::Shared;

/// Bytes the writer gathers before one write: the session copies each write in pieces of
/// 256 KiB, so one batch is one hand-off to it.
const BATCH: usize = 256 * 1024;

/// Ends the mux when the last `Mux`/`Incoming` goes: the reader stops, the writer sends
/// what is queued and shuts the transport's write side down.
pub(crate) struct Alive {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.reader.abort();
        self.shared.lock().close("the mux was dropped".into());
        self.shared.writer.notify_one();
    }
}

pub(crate) fn start<T>(io: T, shared: Arc<Shared>) -> Alive
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (r, w) = tokio::io::split(io);
    tokio::spawn(write_loop(w, shared.clone()));
    let reader = tokio::spawn(read_loop(r, shared.clone()));
    Alive { shared, reader }
}

async fn read_loop<R: AsyncRead + Unpin>(mut r: R, shared: Arc<Shared>) {
    let why = match read_frames(&mut r, &shared).await {
        Ok(()) => "the peer ended the session".to_string(),
        Err(e) => e,
    };
    tracing::debug!("mux reader: {why}");
    shared.lock().close(why);
    shared.writer.notify_one();
}

/// Reads frames until the transport ends (Ok) or fails or breaks the protocol (Err). Each
/// payload is read into its own buffer, so a stream's unread data holds exactly its bytes
/// (slices of a shared read buffer would pin the whole buffer).
async fn read_frames<R: AsyncRead + Unpin>(r: &mut R, shared: &Shared) -> Result<(), String> {
    let mut head = [0u8; HEADER_LEN];
    loop {
        match r.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("session: {e}")),
        }
        let h = Header::decode(&head).map_err(|e| format!("protocol: {e}"))?;
        let mut payload = BytesMut::zeroed(h.payload_len());
        r.read_exact(&mut payload)
            .await
            .map_err(|e| format!("session, inside a frame: {e}"))?;
        let queued = {
            let mut st = shared.lock();
            st.on_frame(h, payload.freeze()).map_err(|e| format!("protocol: {e}"))?;
            !st.control.is_empty()
        };
        if queued {
            shared.writer.notify_one();
        }
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut w: W, shared: Arc<Shared>) {
    let mut batch = BytesMut::with_capacity(BATCH + 2 * crate::MAX_DATA);
    loop {
        let closed = {
            let mut st = shared.lock();
            st.fill_batch(&mut batch, BATCH);
            st.closed.is_some()
        };
        if !batch.is_empty() {
            let sent = w.write_all(&batch).await.and(w.flush().await);
            batch.clear();
            if let Err(e) = sent {
                shared.lock().close(format!("session: {e}"));
                return;
            }
            continue;
        }
        if closed {
            let _ = w.shutdown().await;
            return;
        }
        // A permit stored by a notify_one() that came before this await is taken at once,
        // so a frame queued between the batch and here is not missed.
        shared.writer.notified().await;
    }
}
