//! Client side: open one TCP connection per path and start a session.

use std::io;
use std::sync::Arc;

use fbdt_core::Connection;
use rand::RngCore;

use crate::dial::connect_path;
use crate::driver;
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
    let dials = paths.iter().map(|p| connect_path(p, &cfg));
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
