//! Opening one TCP connection for a path, with the runtime's socket options.

use std::io;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpSocket, TcpStream};

use crate::secure::PathStream;
use crate::{LocalBind, NetConfig, PathSpec};

/// Opens one TCP connection for `spec` with the runtime's socket options (TCP_NODELAY,
/// TCP_NOTSENT_LOWAT, TCP_CONGESTION, source address or SO_BINDTODEVICE). `mptcp` opens a
/// kernel MPTCP socket instead (used by `fbdt perf --transport mptcp`).
pub async fn dial_tcp(spec: &PathSpec, cfg: &NetConfig, mptcp: bool) -> io::Result<TcpStream> {
    let domain = Domain::for_address(spec.remote);
    let proto = if mptcp {
        Protocol::from(libc::IPPROTO_MPTCP)
    } else {
        Protocol::TCP
    };
    let sock = Socket::new(domain, Type::STREAM, Some(proto))?;
    sock.set_nonblocking(true)?;
    sock.set_nodelay(true)?;
    match &spec.local {
        None => {}
        Some(LocalBind::Addr(ip)) => sock.bind(&std::net::SocketAddr::new(*ip, 0).into())?,
        Some(LocalBind::Iface(name)) => sock.bind_device(Some(name.as_bytes()))?,
    }
    if !mptcp {
        crate::sockopt::set_notsent_lowat(&sock, cfg.notsent_lowat)?;
    }
    if let Some(ms) = cfg.rto_max_ms {
        if let Err(e) = crate::sockopt::set_rto_max_ms(&sock, ms) {
            tracing::debug!("TCP_RTO_MAX_MS not available: {e}");
        }
    }
    if let Some(cc) = cfg.congestion.initial() {
        crate::sockopt::set_congestion(&sock, cc)
            .map_err(|e| io::Error::new(e.kind(), format!("TCP_CONGESTION {cc:?}: {e}")))?;
    }
    let sock = TcpSocket::from_std_stream(std::net::TcpStream::from(sock));
    match tokio::time::timeout(cfg.connect_timeout, sock.connect(spec.remote)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// Opens path `spec`'s connection and secures it as `cfg.security` says (TLS handshake and
/// token proof, or nothing with `--plaintext`): [`dial_tcp`], then [`secure_path`].
pub async fn connect_path(spec: &PathSpec, cfg: &NetConfig) -> io::Result<PathStream> {
    secure_path(dial_tcp(spec, cfg, false).await?, spec, cfg).await
}

/// Secures path `spec`'s connected `tcp`. The handshake has `cfg.handshake_timeout`: a
/// server that accepts TCP and stays silent fails the dial (a re-dial is then tried again
/// with back-off), it does not hang it.
pub async fn secure_path(tcp: TcpStream, spec: &PathSpec, cfg: &NetConfig) -> io::Result<PathStream> {
    match tokio::time::timeout(cfg.handshake_timeout, crate::secure::connect(tcp, spec, &cfg.security)).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "{}: no TLS handshake within {:?} (the server accepted TCP and stayed silent)",
                spec.remote, cfg.handshake_timeout
            ),
        )),
    }
}
