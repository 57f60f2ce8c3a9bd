//! The HTTP/2 page server of `workload web --browser chromium --http 2`. Chromium speaks h2
//! only over TLS, so this is hyper's HTTP/2 server behind rustls (ALPN `h2` only) with a
//! self-signed certificate generated per run; the browser accepts it by the SHA-256 of its
//! public key (`--ignore-certificate-errors-spki-list`). It serves the run's page files from
//! memory, on a kernel TCP or MPTCP listening socket (an MPTCP listener also accepts plain
//! TCP clients), in a thread of the server namespace until told to stop.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use base64::Engine;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

/// A self-signed certificate and its key for one run.
#[derive(Clone)]
pub struct Identity {
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
    /// base64(SHA-256(SubjectPublicKeyInfo)): what Chromium's
    /// `--ignore-certificate-errors-spki-list` takes.
    pub spki_sha256: String,
}

impl Identity {
    pub fn generate() -> Result<Self> {
        let key = rcgen::KeyPair::generate().context("generating the page server's key")?;
        let cert = rcgen::CertificateParams::new(vec!["fbdt-lab.invalid".to_string()])?
            .self_signed(&key)
            .context("self-signing the page server's certificate")?;
        Ok(Identity {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
            spki_sha256: base64::engine::general_purpose::STANDARD.encode(Sha256::digest(key.public_key_der())),
        })
    }

    fn tls(&self) -> Result<tokio_rustls::TlsAcceptor> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![rustls::pki_types::CertificateDer::from(self.cert_der.clone())],
                rustls::pki_types::PrivateKeyDer::Pkcs8(self.key_der.clone().into()),
            )
            .context("the page server's TLS configuration")?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// Every file under `root`, by its URL path (`/a/b.png`).
pub fn load_files(root: &Path) -> Result<HashMap<String, Bytes>> {
    fn walk(root: &Path, dir: &Path, out: &mut HashMap<String, Bytes>) -> Result<()> {
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            if path.is_dir() {
                walk(root, &path, out)?;
            } else {
                let rel = path.strip_prefix(root).expect("under root");
                out.insert(format!("/{}", rel.display()), Bytes::from(std::fs::read(&path)?));
            }
        }
        Ok(())
    }
    let mut out = HashMap::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    }
}

fn respond(files: &HashMap<String, Bytes>, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let found = files.get(req.uri().path());
    let mut r = Response::builder();
    let body = match found {
        Some(b) => {
            r = r
                .header("content-type", content_type(req.uri().path()))
                .header("cache-control", "no-store");
            b.clone()
        }
        None => {
            r = r.status(StatusCode::NOT_FOUND);
            Bytes::from_static(b"not found\n")
        }
    };
    r.body(Full::new(body)).expect("a valid response")
}

/// A listening socket on `0.0.0.0:port`, MPTCP if asked. Must run in the server namespace.
fn listener(port: u16, mptcp: bool) -> Result<tokio::net::TcpListener> {
    let proto = if mptcp {
        socket2::Protocol::from(libc::IPPROTO_MPTCP)
    } else {
        socket2::Protocol::TCP
    };
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(proto))
        .context("the page server's socket")?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, port)).into())
        .with_context(|| format!("binding the page server to port {port}"))?;
    s.listen(128)?;
    s.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(s.into())?)
}

/// Serves `files` over h2 + TLS on `port` until `stop` fires or its sender is dropped.
/// Must run in the server namespace.
pub fn serve(
    port: u16,
    mptcp: bool,
    identity: &Identity,
    files: HashMap<String, Bytes>,
    stop: oneshot::Receiver<()>,
) -> Result<()> {
    let acceptor = identity.tls()?;
    let files = Arc::new(files);
    fbdt_harness::emu::session::runtime()?.block_on(async move {
        let listener = listener(port, mptcp)?;
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return Ok(()),
                accepted = listener.accept() => {
                    let (tcp, _) = accepted.context("accepting")?;
                    let _ = tcp.set_nodelay(true);
                    let (acceptor, files) = (acceptor.clone(), files.clone());
                    tokio::spawn(async move {
                        // A connection that fails TLS (the readiness probe) is dropped.
                        let Ok(tls) = acceptor.accept(tcp).await else { return };
                        let service = hyper::service::service_fn(move |req| {
                            let r = respond(&files, &req);
                            async move { Ok::<_, Infallible>(r) }
                        });
                        let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(tls), service)
                            .await;
                    });
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_found_by_url_path_with_their_types() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("p/o")).unwrap();
        std::fs::write(dir.path().join("p/index.html"), "x").unwrap();
        std::fs::write(dir.path().join("p/o/1.png"), [1, 2, 3]).unwrap();
        let files = load_files(dir.path()).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files["/p/o/1.png"].as_ref(), &[1, 2, 3]);
        assert_eq!(content_type("/p/o/1.png"), "image/png");
        assert_eq!(content_type("/p/index.html"), "text/html; charset=utf-8");
    }

    #[test]
    fn the_pin_is_the_base64_of_a_sha256() {
        let id = Identity::generate().unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&id.spki_sha256)
            .unwrap();
        assert_eq!(raw.len(), 32);
        id.tls().unwrap();
    }
}
