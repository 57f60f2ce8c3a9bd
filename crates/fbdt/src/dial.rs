//! `fbdt serve` without `--forward`: each session carries a mux; every stream names a
//! destination, which is checked against the allow-list, dialled, answered with a status
//! and then relayed. A bad request or an unreachable destination fails that stream only.

use std::sync::Arc;
use std::time::Duration;

use fbdt_mux::{Mux, MuxConfig, MuxStream};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::allow::AllowList;
use crate::proxy::relay::relay;
use crate::proxy::wire::{encode_reply, Destination, Status};

/// Time to connect to one destination address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one session's streams until the session ends; `who` names the client in logs.
pub async fn serve_streams(session: fbdt_net::Session, allow: Arc<AllowList>, who: String) {
    let (_mux, mut incoming) = match Mux::over(
        crate::proxy::session_io::SessionIo(session),
        false,
        MuxConfig::default(),
    ) {
        Ok(m) => m,
        Err(e) => {
            log!("{who}: {e}");
            return;
        }
    };
    while let Some((stream, request)) = incoming.accept().await {
        let (allow, who) = (allow.clone(), who.clone());
        tokio::spawn(async move { serve_stream(stream, &request, &allow, &who).await });
    }
}

async fn serve_stream(mut stream: MuxStream, request: &[u8], allow: &AllowList, who: &str) {
    let id = stream.id();
    let dest = match Destination::decode(request) {
        Ok(d) => d,
        Err(e) => {
            log!("{who} stream {id}: bad request: {e:#}");
            let _ = stream
                .write_all(&encode_reply(Status::Failed, &format!("bad request: {e}")))
                .await;
            let _ = stream.shutdown().await;
            return;
        }
    };
    let tcp = match connect(&dest, allow).await {
        Ok(t) => t,
        Err((status, why)) => {
            log!("{who} stream {id}: {dest}: {why}");
            let _ = stream.write_all(&encode_reply(status, &why)).await;
            let _ = stream.shutdown().await;
            return;
        }
    };
    if stream.write_all(&encode_reply(Status::Ok, "")).await.is_err() {
        return;
    }
    let peer = tcp.peer_addr().map_or_else(|_| dest.to_string(), |a| a.to_string());
    log!("{who} stream {id}: connected to {dest} ({peer})");
    match relay(tcp, stream).await {
        Ok((up, down)) => log!("{who} stream {id}: {dest} done, {up} bytes there, {down} back"),
        Err(e) => log!("{who} stream {id}: {dest} aborted: {e}"),
    }
}

/// Connects to the first allowed address of `dest` that answers.
async fn connect(dest: &Destination, allow: &AllowList) -> Result<TcpStream, (Status, String)> {
    let addrs = allow.resolve(dest).await?;
    let mut last = (Status::Failed, String::from("no address"));
    for a in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(a)).await {
            Ok(Ok(tcp)) => {
                let _ = tcp.set_nodelay(true);
                return Ok(tcp);
            }
            Ok(Err(e)) => last = (Status::of_connect_error(&e), format!("connect to {a}: {e}")),
            Err(_) => {
                last = (
                    Status::TimedOut,
                    format!("connect to {a}: no answer in {CONNECT_TIMEOUT:?}"),
                )
            }
        }
    }
    Err(last)
}
