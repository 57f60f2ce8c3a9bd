//! Client side: open one TCP connection per path and start a session.

use std::io;
use std::sync::Arc;

use fbdt_core::Connection;
use rand::RngCore;

use crate::dial::secure_path;
use crate::driver;
use crate::paths::{raced_dial_tcp, FIRST_DIAL_HEAD_START};
use crate::secure::PathStream;
use crate::{ConfigError, Error, NetConfig, PathSpec, Session};

/// Connects a session over `paths` (path i = `paths[i]`). Path 0 must connect; a further
/// path that fails is re-dialled in the background with back-off and JOINs when it comes
/// up. Returns once both HELLOs were exchanged.
pub async fn connect(paths: Vec<PathSpec>, mut cfg: NetConfig) -> Result<Session, Error> {
    if paths.is_empty() {
        return Err(Error::NoPaths);
    }
    if paths.len() > fbdt_core::wire::MAX_PATHS {
        return Err(ConfigError::TooManyPaths(fbdt_core::wire::MAX_PATHS).into());
    }
    cfg.congestion.validate().map_err(ConfigError::from)?;
    cfg.core.seed = rand::random();
    let mut conn = Connection::client(cfg.core.clone()).map_err(ConfigError::from)?;
    conn.set_local_key(os_key());
    let cfg = Arc::new(cfg);
    // A lost first SYN costs a fresh one after FIRST_DIAL_HEAD_START, not the kernel's 1 s.
    let dials = paths.iter().enumerate().map(|(i, p)| {
        let cfg = &cfg;
        async move { secure_path(raced_dial_tcp(p, cfg, i, FIRST_DIAL_HEAD_START).await?, p, cfg).await }
    });
    let results: Vec<io::Result<PathStream>> = futures_join_all(dials).await;
    let mut streams = Vec::with_capacity(paths.len());
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(s) => streams.push(Some(s)),
            Err(source) if i == 0 => {
                return Err(Error::Dial {
                    path: 0,
                    remote: paths[0].remote,
                    source,
                })
            }
            Err(e) => {
                tracing::warn!(path = i, remote = %paths[i].remote, "path did not connect, will retry: {e}");
                streams.push(None);
            }
        }
    }
    driver::start_client(conn, streams, paths, cfg).await
}

/// 32 bytes from the OS's CSPRNG, for the HELLO's key.
pub(crate) fn os_key() -> [u8; 32] {
    let mut k = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut k);
    k
}

/// Awaits every future (they are few: one per path).
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futs.map(Box::pin).collect();
    let mut out = Vec::with_capacity(handles.len());
    // Dials run concurrently: start them all, then collect in order.
    let mut set = Vec::new();
    for h in handles {
        set.push(h);
    }
    let mut results: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if results[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => results[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.extend(results.into_iter().map(|r| r.expect("all ready")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Duration;

    /// A session's first SYN dropped (a full listen queue drops SYNs without a word, as a
    /// flooded server's does) does not cost the kernel's 1-s retransmission: with the
    /// connect timeout at 600 ms only a fresh SYN can open the connection that carries the
    /// HELLO.
    #[tokio::test]
    async fn a_lost_first_syn_is_replaced_by_a_fresh_one() {
        let (listener, filler) = crate::paths::full_listen_queue();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            std::thread::sleep(FIRST_DIAL_HEAD_START / 2);
            let (first, _) = listener.accept().unwrap();
            assert_eq!(first.peer_addr().unwrap(), filler.local_addr().unwrap());
            // Nothing more comes if the client waits for the kernel's retransmission.
            listener.set_nonblocking(true).unwrap();
            let until = std::time::Instant::now() + Duration::from_secs(5);
            let mut client = loop {
                match listener.accept() {
                    Ok((c, _)) => break c,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        assert!(std::time::Instant::now() < until, "the client never connected");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            };
            client.set_nonblocking(false).unwrap();
            client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 512];
            loop {
                match fbdt_core::handshake::first_frame(&buf) {
                    Ok(f) => return f,
                    Err(fbdt_core::wire::Error::Incomplete { .. }) => {}
                    Err(e) => panic!("not a first frame: {e}"),
                }
                let n = client.read(&mut chunk).unwrap();
                assert!(n > 0, "closed before its HELLO");
                buf.extend_from_slice(&chunk[..n]);
            }
        });
        let cfg = NetConfig {
            connect_timeout: Duration::from_millis(600),
            handshake_timeout: Duration::from_secs(2),
            ..NetConfig::default()
        };
        let spec: PathSpec = addr.to_string().parse().unwrap();
        // The test's server never answers the HELLO: the session itself fails, later.
        let _ = tokio::time::timeout(Duration::from_secs(5), connect(vec![spec], cfg)).await;
        let first = tokio::task::spawn_blocking(move || server.join()).await.unwrap();
        assert!(matches!(first, Ok(fbdt_core::handshake::FirstFrame::Hello)), "{first:?}");
    }
}
