//! How a path's byte stream is secured: every path is a TLS 1.3 connection (rustls) unless
//! both ends were explicitly told to run plaintext. FBDT frames ride inside.
//!
//! - The server has a key pair and a self-signed certificate ([`ServerIdentity`]),
//!   generated on first start and stored, or loaded from PEM files.
//! - The client trusts the server by pinning the certificate's SHA-256 fingerprint, by a
//!   known-hosts file (trust on first use), or by a CA ([`Trust`]). One
//!   `rustls::ClientConfig` per session keeps the TLS session cache, so re-joins resume.
//! - Right after its TLS handshake every connection sends a 32-byte token proof:
//!   HMAC-SHA256(key = the pre-shared token, or empty, [`TOKEN_LABEL`] ‖ the connection's
//!   token exporter). A server with a token refuses connections whose proof is wrong.
//! - [`PathStream::binding`] is the connection's TLS exporter (zeros on plaintext): the core
//!   binds the session key and every JOIN to it (`fbdt_core::handshake`).
//!
//! A mismatch (one end plaintext, the other TLS) fails with an error naming `--plaintext`:
//! a TLS record starts with 0x16, an FBDT frame never does.

use std::fmt;
use std::io;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};

use hmac::{Hmac, Mac};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

use crate::PathSpec;

/// Label of the TLS exporter a connection's token proof is computed over.
pub const TOKEN_LABEL: &[u8] = b"EXPORTER-fbdt-client-token";
/// Bytes of the token proof at the start of every TLS connection.
pub const TOKEN_PROOF_LEN: usize = 32;
/// File names in a key directory.
pub const CERT_FILE: &str = "server-cert.pem";
pub const KEY_FILE: &str = "server-key.pem";
/// Longest a retired connection is read for its session tickets ([`PathStream::retire`]).
pub const RETIRE_READ: std::time::Duration = std::time::Duration::from_secs(2);
/// The first byte of a TLS handshake record (RFC 8446 §5.1: ContentType handshake).
const TLS_HANDSHAKE: u8 = 0x16;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

/// SHA-256 of a certificate, as `sha256:` and 64 lowercase hex digits.
pub fn fingerprint(cert: &CertificateDer<'_>) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(cert.as_ref())))
}

/// A fingerprint that does not parse; the text names the input as typed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FingerprintError {
    #[error("bad fingerprint {input:?}: {source}")]
    Hex { input: String, source: hex::FromHexError },
    #[error("bad fingerprint {0:?}: want 32 bytes (64 hex digits)")]
    Length(String),
}

/// Parses a fingerprint as [`fingerprint`] prints it (the `sha256:` prefix and colons
/// between bytes are optional).
pub fn parse_fingerprint(s: &str) -> Result<[u8; 32], FingerprintError> {
    let hexs: String = s
        .trim()
        .trim_start_matches("sha256:")
        .chars()
        .filter(|c| *c != ':')
        .collect();
    let bytes = hex::decode(&hexs).map_err(|source| FingerprintError::Hex {
        input: s.to_string(),
        source,
    })?;
    bytes.try_into().map_err(|_| FingerprintError::Length(s.to_string()))
}

/// The server's certificate and private key.
pub struct ServerIdentity {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl ServerIdentity {
    /// Loads `server-cert.pem` and `server-key.pem` from `dir`, or generates a fresh key
    /// pair with a self-signed certificate there (the directory is created with mode
    /// 0700, the key file 0600).
    pub fn load_or_generate(dir: &Path) -> io::Result<Self> {
        let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
        if cert.exists() || key.exists() {
            return Self::from_pem_files(&cert, &key);
        }
        let generated = rcgen::generate_simple_self_signed(vec!["fbdt".to_string()])
            .map_err(|e| other(format!("generating a server key: {e}")))?;
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("creating key directory {}: {e}", dir.display())))?;
        // A directory that already existed keeps its mode through `create`: the key's
        // directory is ours alone.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io::Error::new(e.kind(), format!("making key directory {} private: {e}", dir.display())))?;
        write_private(&key, generated.key_pair.serialize_pem().as_bytes())?;
        std::fs::write(&cert, generated.cert.pem())
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", cert.display())))?;
        tracing::info!("generated a server key in {}", dir.display());
        Self::from_pem_files(&cert, &key)
    }

    /// Loads a certificate (the first in the file) and a private key from PEM files. A key
    /// file that its group or others may read is loaded with a warning (anyone who reads
    /// it can impersonate this server).
    pub fn from_pem_files(cert: &Path, key: &Path) -> io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(m) = std::fs::metadata(key) {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(
                    "private key {} has mode {mode:04o}: its group or others can read it (chmod 600 {})",
                    key.display(),
                    key.display()
                );
            }
        }
        let c = CertificateDer::from_pem_file(cert)
            .map_err(|e| other(format!("reading certificate {}: {e}", cert.display())))?;
        let k = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| other(format!("reading private key {}: {e}", key.display())))?;
        Ok(ServerIdentity { cert: c, key: k })
    }

    /// The certificate's fingerprint, as clients pin it.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert)
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
    f.write_all(bytes)
}

/// The default key directory: `$XDG_DATA_HOME/fbdt`, else `~/.local/share/fbdt`.
pub fn default_key_dir() -> Option<PathBuf> {
    data_dir().map(|d| d.join("fbdt"))
}

/// The default known-hosts file: `known_hosts` in [`default_key_dir`].
pub fn default_known_hosts() -> Option<PathBuf> {
    default_key_dir().map(|d| d.join("known_hosts"))
}

fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("XDG_DATA_HOME") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")),
    }
}

/// How a client decides the server is the right one.
#[derive(Clone, Debug)]
pub enum Trust {
    /// The server certificate's SHA-256 must be one of these.
    Pins(Vec<[u8; 32]>),
    /// A known-hosts file (`HOST sha256:HEX` lines): a host seen before must show the same
    /// certificate; a new host is trusted on first use and recorded.
    KnownHosts(PathBuf),
    /// Certificates issued by the CAs in this PEM file (the certificate must name the
    /// server's IP address).
    Ca(PathBuf),
}

/// Security settings of a client or a server.
#[derive(Clone, Default)]
pub enum Security {
    /// No TLS (`--plaintext`): for benchmarks and the lab's paper-faithful runs. Both ends
    /// must agree.
    #[default]
    Plaintext,
    Client(Arc<TlsClient>),
    Server(Arc<TlsServer>),
}

impl fmt::Debug for Security {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Security::Plaintext => "Plaintext",
            Security::Client(_) => "TlsClient",
            Security::Server(_) => "TlsServer",
        })
    }
}

impl Security {
    /// What results record: `"tls13"` or `"none"`.
    pub fn label(&self) -> &'static str {
        match self {
            Security::Plaintext => "none",
            _ => "tls13",
        }
    }
}

pub struct TlsClient {
    config: Arc<rustls::ClientConfig>,
    token: Vec<u8>,
}

/// Reads every certificate of a PEM file into a root store (`what` names the option in
/// errors).
fn load_roots(file: &Path, what: &str) -> io::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    let certs =
        CertificateDer::pem_file_iter(file).map_err(|e| other(format!("reading {what} {}: {e}", file.display())))?;
    for c in certs {
        let c = c.map_err(|e| other(format!("reading {what} {}: {e}", file.display())))?;
        roots
            .add(c)
            .map_err(|e| other(format!("{what} {}: {e}", file.display())))?;
    }
    if roots.is_empty() {
        return Err(other(format!("{what} {}: no certificate in it", file.display())));
    }
    Ok(roots)
}

/// A client's certificate chain and private key, shown to a server that asks for one
/// (`fbdt --client-cert FILE --client-key FILE`).
pub struct ClientCert {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl ClientCert {
    /// Loads the chain (every certificate in `cert`, the client's own first) and its key.
    pub fn from_pem_files(cert: &Path, key: &Path) -> io::Result<Self> {
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|it| it.collect::<Result<Vec<_>, _>>())
            .map_err(|e| other(format!("reading client certificate {}: {e}", cert.display())))?;
        if chain.is_empty() {
            return Err(other(format!(
                "client certificate {}: no certificate in it",
                cert.display()
            )));
        }
        let key = PrivateKeyDer::from_pem_file(key)
            .map_err(|e| other(format!("reading client key {}: {e}", key.display())))?;
        Ok(ClientCert { chain, key })
    }

    /// The certificate's fingerprint, as a server logs the client.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.chain[0])
    }
}

impl TlsClient {
    /// A client trusting servers by `trust`, proving `token` (if any) to the server.
    pub fn new(trust: Trust, token: Option<Vec<u8>>) -> io::Result<Self> {
        Self::with_cert(trust, token, None)
    }

    /// As [`TlsClient::new`], and presenting `cert` to servers that ask for a client
    /// certificate (a token and a certificate may both be required).
    pub fn with_cert(trust: Trust, token: Option<Vec<u8>>, cert: Option<ClientCert>) -> io::Result<Self> {
        let provider = provider();
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| other(format!("TLS: {e}")))?;
        let builder = match trust {
            Trust::Ca(file) => builder.with_root_certificates(load_roots(&file, "CA file")?),
            trust => {
                let verifier = PinVerifier {
                    provider,
                    trust,
                    lock: Mutex::new(()),
                    accepted: Mutex::new(None),
                };
                builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier))
            }
        };
        let config = match cert {
            None => builder.with_no_client_auth(),
            Some(c) => builder
                .with_client_auth_cert(c.chain, c.key)
                .map_err(|e| other(format!("client certificate: {e}")))?,
        };
        Ok(TlsClient {
            config: Arc::new(config),
            token: token.unwrap_or_default(),
        })
    }
}

pub struct TlsServer {
    config: Arc<rustls::ServerConfig>,
    token: Option<Vec<u8>>,
    fingerprint: String,
    client_certs: bool,
    /// Wrong token proofs per source address, for [`WRONG_TOKENS_PER_SOURCE`].
    strikes: Mutex<std::collections::HashMap<std::net::IpAddr, Strikes>>,
}

/// Wrong token proofs one source address may send per [`STRIKE_WINDOW`]; past them its
/// connections are closed right after accept, before any TLS work, until the window ends.
pub const WRONG_TOKENS_PER_SOURCE: u32 = 5;
/// The window [`WRONG_TOKENS_PER_SOURCE`] counts in.
pub const STRIKE_WINDOW: std::time::Duration = std::time::Duration::from_secs(10);
/// Source addresses whose wrong tokens are remembered at once (older windows are
/// forgotten first; a full table of live windows stops counting new sources).
const MAX_STRIKE_SOURCES: usize = 4096;

struct Strikes {
    since: std::time::Instant,
    count: u32,
}

impl TlsServer {
    /// A source that sent too many wrong tokens lately.
    fn barred(&self, ip: std::net::IpAddr) -> bool {
        let Ok(m) = self.strikes.lock() else {
            return false;
        };
        m.get(&ip)
            .is_some_and(|s| s.since.elapsed() < STRIKE_WINDOW && s.count >= WRONG_TOKENS_PER_SOURCE)
    }

    fn strike(&self, ip: std::net::IpAddr) {
        let Ok(mut m) = self.strikes.lock() else {
            return;
        };
        if m.len() >= MAX_STRIKE_SOURCES && !m.contains_key(&ip) {
            m.retain(|_, s| s.since.elapsed() < STRIKE_WINDOW);
            if m.len() >= MAX_STRIKE_SOURCES {
                return;
            }
        }
        let s = m.entry(ip).or_insert(Strikes {
            since: std::time::Instant::now(),
            count: 0,
        });
        if s.since.elapsed() >= STRIKE_WINDOW {
            *s = Strikes {
                since: std::time::Instant::now(),
                count: 0,
            };
        }
        s.count += 1;
    }
}

impl TlsServer {
    /// A server presenting `identity`; with a `token`, only clients proving it are served.
    pub fn new(identity: ServerIdentity, token: Option<Vec<u8>>) -> io::Result<Self> {
        Self::with_client_ca(identity, token, None)
    }

    /// As [`TlsServer::new`]; with `client_ca` (a PEM file of CA certificates) every
    /// connection — path 0 and every JOIN — must also present a client certificate issued
    /// by one of them, or its TLS handshake fails.
    pub fn with_client_ca(
        identity: ServerIdentity,
        token: Option<Vec<u8>>,
        client_ca: Option<&Path>,
    ) -> io::Result<Self> {
        let fingerprint = identity.fingerprint();
        let provider = provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| other(format!("TLS: {e}")))?;
        let builder = match client_ca {
            None => builder.with_no_client_auth(),
            Some(file) => {
                let roots = Arc::new(load_roots(file, "client CA file")?);
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(roots, provider)
                    .build()
                    .map_err(|e| other(format!("client CA file {}: {e}", file.display())))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder
            .with_single_cert(vec![identity.cert], identity.key)
            .map_err(|e| other(format!("server key: {e}")))?;
        // Stateless tickets (sealed with a key the process rotates): resuming needs no
        // per-ticket memory here, so it works for any number of sessions (the default
        // cache holds 256 tickets, fewer than 1000 sessions' paths draw).
        config.ticketer = rustls::crypto::ring::Ticketer::new().map_err(|e| other(format!("TLS tickets: {e}")))?;
        // A client uses each ticket once, and stall probes open connections that may be
        // dropped before they read theirs: a few spare tickets keep re-joins resumed.
        config.send_tls13_tickets = 4;
        Ok(TlsServer {
            config: Arc::new(config),
            token,
            fingerprint,
            client_certs: client_ca.is_some(),
            strikes: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// The certificate's fingerprint (print it for clients to `--pin`).
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Whether every client must present a certificate (`--client-ca`).
    pub fn requires_client_certs(&self) -> bool {
        self.client_certs
    }

    /// Whether every client must prove the token.
    pub fn requires_token(&self) -> bool {
        self.token.is_some()
    }
}

/// Checks the server's certificate against pins or a known-hosts file. The TLS handshake
/// signature is still verified, so only the key's holder passes.
#[derive(Debug)]
struct PinVerifier {
    provider: Arc<CryptoProvider>,
    trust: Trust,
    lock: Mutex<()>,
    /// Known hosts: the server key this client accepted first (its session's path 0).
    /// Every later connection — another path, a new server address — must show it.
    accepted: Mutex<Option<[u8; 32]>>,
}

impl PinVerifier {
    fn check(&self, cert: &CertificateDer<'_>, host: &str) -> Result<(), String> {
        let digest: [u8; 32] = Sha256::digest(cert.as_ref()).into();
        let fp = fingerprint(cert);
        match &self.trust {
            Trust::Pins(pins) => {
                if pins.contains(&digest) {
                    Ok(())
                } else {
                    Err(format!(
                        "server certificate {fp} does not match the pinned fingerprint (--pin)"
                    ))
                }
            }
            Trust::KnownHosts(file) => {
                let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
                let mut accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
                let text = match std::fs::read_to_string(file) {
                    Ok(t) => t,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
                    Err(e) => return Err(format!("reading known-hosts file {}: {e}", file.display())),
                };
                // Lines are `HOST sha256:HEX`: a host seen before must show its key; a key
                // on any line is a server identity we know.
                let mut known_identity = false;
                for (n, line) in text.lines().enumerate() {
                    let mut words = line.split_whitespace();
                    let this_host = words.next() == Some(host);
                    let known = words.next().map(parse_fingerprint);
                    known_identity |= matches!(known, Some(Ok(k)) if k == digest);
                    if !this_host {
                        continue;
                    }
                    return match known {
                        Some(Ok(k)) if k == digest => match *accepted {
                            Some(a) if a != digest => Err(other_identity(host, &fp, &a)),
                            _ => {
                                *accepted = Some(digest);
                                Ok(())
                            }
                        },
                        _ => Err(format!(
                            "server certificate for {host} changed: now {fp}, but {}:{} says otherwise \
                             (if the server's key really changed, delete that line)",
                            file.display(),
                            n + 1
                        )),
                    };
                }
                // A new address: it must be the server this client already trusts (path 0's
                // key); a foreign key is refused and never recorded.
                if let Some(a) = *accepted {
                    if a != digest {
                        return Err(other_identity(host, &fp, &a));
                    }
                }
                if let Some(dir) = file.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(file)
                    .map_err(|e| format!("writing known-hosts file {}: {e}", file.display()))?;
                writeln!(f, "{host} {fp}").map_err(|e| format!("writing known-hosts file {}: {e}", file.display()))?;
                if known_identity || accepted.is_some() {
                    tracing::info!(
                        "{host} is a known server ({fp}) at a new address (recorded in {})",
                        file.display()
                    );
                } else {
                    tracing::warn!("trusting {host} on first use: {fp} (recorded in {})", file.display());
                }
                *accepted = Some(digest);
                Ok(())
            }
            Trust::Ca(_) => Err("CA trust does not use pins".into()),
        }
    }
}

/// A connection whose server shows another key than the one this client's session
/// already trusts (path 0's).
fn other_identity(host: &str, fp: &str, trusted: &[u8; 32]) -> String {
    format!(
        "{host} presents {fp}, but this session's server (path 0) is sha256:{}: refused, not recorded \
         (every path must reach the same server)",
        hex::encode(trusted)
    )
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity, &server_name.to_str())
            .map(|()| ServerCertVerified::assertion())
            .map_err(rustls::Error::General)
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("FBDT speaks TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// One path's byte stream: a TCP connection, bare or under TLS 1.3.
pub enum PathStream {
    Plain(TcpStream),
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl PathStream {
    /// The TCP connection underneath (for TCP_INFO and socket options).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            PathStream::Plain(s) => s,
            PathStream::Client(s) => s.get_ref().0,
            PathStream::Server(s) => s.get_ref().0,
        }
    }

    /// Closes the connection with a reset (SO_LINGER 0): what is still queued is dropped,
    /// not sent. A replaced or failed path's connection ends this way, so its late bytes
    /// never reach the peer (they would count as the path's newer connection there, or be
    /// so old their sequence numbers are ambiguous).
    pub fn abort(self) {
        let _ = socket2::SockRef::from(self.tcp()).set_linger(Some(std::time::Duration::ZERO));
        drop(self);
    }

    fn export(&self, label: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        let r = match self {
            PathStream::Plain(_) => return out,
            PathStream::Client(s) => s.get_ref().1.export_keying_material(&mut out, label, None),
            PathStream::Server(s) => s.get_ref().1.export_keying_material(&mut out, label, None),
        };
        // Only fails before the handshake completed, which a PathStream never is.
        if let Err(e) = r {
            tracing::error!("TLS exporter: {e}");
        }
        out
    }

    /// The connection's binding: its TLS exporter (RFC 8446 §7.5) for
    /// [`fbdt_core::handshake::EXPORTER_LABEL`], zeros on plaintext.
    pub fn binding(&self) -> [u8; 32] {
        self.export(fbdt_core::handshake::EXPORTER_LABEL)
    }

    /// Whether the TLS handshake resumed an earlier session (one round trip, no
    /// certificate).
    pub fn resumed(&self) -> bool {
        let kind = match self {
            PathStream::Plain(_) => None,
            PathStream::Client(s) => s.get_ref().1.handshake_kind(),
            PathStream::Server(s) => s.get_ref().1.handshake_kind(),
        };
        kind == Some(rustls::HandshakeKind::Resumed)
    }

    /// Server: the fingerprint of the client's certificate, when it presented one (on a
    /// resumed connection, the one it presented when the TLS session began).
    pub fn client_identity(&self) -> Option<String> {
        match self {
            PathStream::Server(s) => s.get_ref().1.peer_certificates()?.first().map(fingerprint),
            _ => None,
        }
    }

    /// Closes a client connection that will carry nothing (a probe that did not take over)
    /// without losing the server's session tickets: making it took one ticket from the
    /// session cache, and the server's new ones only enter the cache when the connection is
    /// read. So it is half-closed and read until the server closes too (at most
    /// [`RETIRE_READ`], in the background); a connection that is simply dropped drains the
    /// cache one ticket at a time until a re-join needs a full handshake.
    pub fn retire(self) {
        if !matches!(self, PathStream::Client(_)) {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(self.close_keeping_tickets());
        }
    }

    /// What [`PathStream::retire`] runs: half-close, then read until the server closes
    /// (at most [`RETIRE_READ`]), so the tickets it sent enter the session cache.
    pub async fn close_keeping_tickets(mut self) {
        self.half_close();
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(RETIRE_READ, async {
            while matches!(self.read(&mut sink).await, Ok(n) if n > 0) {}
        })
        .await;
    }

    /// Ends our direction: TLS close_notify (best effort, without waiting), then FIN.
    pub fn half_close(&mut self) {
        struct Nonblocking<'a>(&'a TcpStream);
        impl io::Write for Nonblocking<'_> {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.try_write(buf)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        fn flush_tls<D>(tcp: &TcpStream, conn: &mut rustls::ConnectionCommon<D>) {
            conn.send_close_notify();
            while conn.wants_write() {
                if !matches!(conn.write_tls(&mut Nonblocking(tcp)), Ok(n) if n > 0) {
                    break;
                }
            }
        }
        match self {
            PathStream::Plain(_) => {}
            PathStream::Client(s) => {
                let (tcp, conn) = s.get_mut();
                flush_tls(tcp, conn);
            }
            PathStream::Server(s) => {
                let (tcp, conn) = s.get_mut();
                flush_tls(tcp, conn);
            }
        }
        let _ = socket2::SockRef::from(self.tcp()).shutdown(std::net::Shutdown::Write);
    }

    /// The peer's address, from the TCP connection underneath.
    pub fn peer_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.tcp().peer_addr()
    }

    /// Ready when a read may find bytes. Plaintext asks the socket; under TLS rustls may
    /// already hold decrypted bytes the socket no longer shows, so it is always ready (an
    /// idle TLS path keeps its read block).
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            PathStream::Plain(s) => s.poll_read_ready(cx),
            PathStream::Client(_) | PathStream::Server(_) => Poll::Ready(Ok(())),
        }
    }

    /// Ready when the kernel takes more bytes: TLS records already sealed are pushed out
    /// first, so nothing sits in rustls' buffer while the driver waits.
    pub fn poll_write_ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !matches!(self, PathStream::Plain(_)) {
            ready!(Pin::new(&mut *self).poll_flush(cx))?;
        }
        self.tcp().poll_write_ready(cx)
    }
}

impl AsRawFd for PathStream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }
}

macro_rules! each {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            PathStream::Plain($s) => {
                let $s = Pin::new($s);
                $e
            }
            PathStream::Client($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
            PathStream::Server($s) => {
                let $s = Pin::new(&mut **$s);
                $e
            }
        }
    };
}

impl AsyncRead for PathStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let client = matches!(*self, PathStream::Client(_));
        let r = ready!(each!(self, s => s.poll_read(cx, buf)));
        Poll::Ready(match r {
            Err(e) if client => Err(explain_alert(e)),
            r => r,
        })
    }
}

/// Client: a TLS 1.3 server judges our certificate after our side of the handshake is
/// done, so its refusal arrives as an alert on the first read. Says what it means; a
/// refused certificate is `PermissionDenied` (dialling again cannot help).
fn explain_alert(e: io::Error) -> io::Error {
    use rustls::AlertDescription as A;
    let alert = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::AlertReceived(a)) => *a,
        _ => return e,
    };
    let refused = |why: String| io::Error::new(io::ErrorKind::PermissionDenied, why);
    match alert {
        A::CertificateRequired => {
            refused("the server requires a client certificate (give --client-cert and --client-key)".into())
        }
        A::UnknownCA | A::BadCertificate | A::CertificateUnknown | A::AccessDenied | A::UnsupportedCertificate => {
            refused(format!(
                "the server refused our client certificate ({alert:?}): is it issued by a CA in the server's --client-ca?"
            ))
        }
        A::CertificateExpired | A::CertificateRevoked => {
            refused(format!("the server refused our client certificate ({alert:?})"))
        }
        _ => io::Error::new(e.kind(), format!("the server ended the TLS connection: {alert:?} alert")),
    }
}

impl AsyncWrite for PathStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        each!(self, s => s.poll_write(cx, buf))
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        each!(self, s => s.poll_write_vectored(cx, bufs))
    }
    fn is_write_vectored(&self) -> bool {
        true
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_flush(cx))
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        each!(self, s => s.poll_shutdown(cx))
    }
}

fn token_proof(token: &[u8], stream: &PathStream) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(token).expect("HMAC takes keys of any length");
    mac.update(&stream.export(TOKEN_LABEL));
    mac
}

/// Client: secures a TCP connection to `spec` as `security` says. With TLS: the handshake
/// (resumed when the session cache has a ticket), then the token proof.
pub async fn connect(tcp: TcpStream, spec: &PathSpec, security: &Security) -> io::Result<PathStream> {
    let tls = match security {
        Security::Plaintext => return Ok(PathStream::Plain(tcp)),
        Security::Client(c) => c,
        Security::Server(_) => return Err(other("a server's TLS settings given to a client".into())),
    };
    let name = ServerName::IpAddress(spec.remote.ip().into());
    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
    let s = connector
        .connect(name, tcp)
        .await
        .map_err(|e| explain_client_error(e, spec.remote))?;
    let mut s = PathStream::Client(Box::new(s));
    let proof = token_proof(&tls.token, &s).finalize().into_bytes();
    s.write_all(&proof).await?;
    s.flush().await?;
    tracing::debug!(remote = %spec.remote, resumed = s.resumed(), "TLS connected");
    Ok(s)
}

fn explain_client_error(e: io::Error, remote: SocketAddr) -> io::Error {
    let tls = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidMessage(_)) | Some(rustls::Error::InappropriateMessage { .. }) => other(format!(
            "{remote} did not answer with TLS: is the server running with --plaintext? \
             (both ends must agree)"
        )),
        Some(rustls::Error::General(msg)) => other(msg.clone()),
        Some(rustls::Error::AlertReceived(_)) => explain_alert(e),
        _ if e.kind() == io::ErrorKind::UnexpectedEof => other(format!(
            "{remote} closed the connection during the TLS handshake (a plaintext server, or one that refused us)"
        )),
        _ => other(format!("TLS handshake with {remote}: {e}")),
    }
}

/// Why a server did not take a connection; `tell`: the stream to send the peer an FBDT
/// CLOSE on, in a form it can read (plaintext to a plaintext peer, inside TLS otherwise).
pub struct Refused {
    pub why: String,
    pub tell: Option<PathStream>,
    /// The peer closed before sending a byte: a client's probe made unneeded, or a port
    /// check — not a fault worth a warning.
    pub closed_silently: bool,
}

impl Refused {
    fn new(why: impl Into<String>, tell: Option<PathStream>) -> Self {
        Refused {
            why: why.into(),
            tell,
            closed_silently: false,
        }
    }
}

/// Server: secures an accepted connection as `security` says. A TLS server first peeks:
/// a peer that did not start a TLS handshake is refused with an FBDT CLOSE it can read
/// (and likewise a plaintext server answers a TLS ClientHello with a CLOSE).
pub async fn accept(tcp: TcpStream, security: &Security) -> Result<PathStream, Refused> {
    let source = tcp.peer_addr().ok().map(|a| a.ip());
    if let (Security::Server(tls), Some(ip)) = (security, source) {
        if tls.token.is_some() && tls.barred(ip) {
            return Err(Refused::new(
                format!("{ip} sent {WRONG_TOKENS_PER_SOURCE} wrong tokens within {STRIKE_WINDOW:?}: refused until that passes"),
                None,
            ));
        }
    }
    let mut first = [0u8; 1];
    let peeked = tcp.peek(&mut first).await;
    let speaks_tls = matches!(peeked, Ok(1)) && first[0] == TLS_HANDSHAKE;
    let tls = match security {
        Security::Plaintext if speaks_tls => {
            return Err(Refused::new(
                "the client spoke TLS to a --plaintext server (both ends must agree)",
                Some(PathStream::Plain(tcp)),
            ))
        }
        // `listen` refuses client settings; plaintext is the only other choice.
        Security::Plaintext | Security::Client(_) => return Ok(PathStream::Plain(tcp)),
        Security::Server(s) => s,
    };
    if !speaks_tls {
        if matches!(peeked, Ok(0) | Err(_)) {
            return Err(Refused {
                why: "closed before the TLS handshake".into(),
                tell: None,
                closed_silently: matches!(peeked, Ok(0)),
            });
        }
        return Err(Refused::new(
            "this server requires TLS; the client spoke plaintext (--plaintext on one end only?)",
            Some(PathStream::Plain(tcp)),
        ));
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
    let s = acceptor
        .accept(tcp)
        .await
        .map_err(|e| Refused::new(format!("TLS handshake: {e}"), None))?;
    let mut s = PathStream::Server(Box::new(s));
    let mut proof = [0u8; TOKEN_PROOF_LEN];
    s.read_exact(&mut proof)
        .await
        .map_err(|e| Refused::new(format!("no token proof after the TLS handshake: {e}"), None))?;
    if let Some(token) = &tls.token {
        if token_proof(token, &s).verify_slice(&proof).is_err() {
            if let Some(ip) = source {
                tls.strike(ip);
            }
            return Err(Refused::new("the client's token is wrong (--token)", Some(s)));
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh server key in a temporary directory, both ends' settings, and a listener.
    async fn setup(tag: &str) -> (PathBuf, Security, Security, tokio::net::TcpListener, PathSpec) {
        let dir = std::env::temp_dir().join(format!("fbdt-secure-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let id = ServerIdentity::load_or_generate(&dir).unwrap();
        let pin = parse_fingerprint(&id.fingerprint()).unwrap();
        let server = Security::Server(Arc::new(TlsServer::new(id, None).unwrap()));
        let client = Security::Client(Arc::new(TlsClient::new(Trust::Pins(vec![pin]), None).unwrap()));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec: PathSpec = l.local_addr().unwrap().to_string().parse().unwrap();
        (dir, server, client, l, spec)
    }

    /// Wrong tokens are rate-limited per source address: past
    /// [`WRONG_TOKENS_PER_SOURCE`] in a window, that address's connections are closed
    /// before any TLS work — even one with the right token — while another address is
    /// served.
    #[tokio::test]
    async fn wrong_tokens_bar_their_source_for_a_while() {
        let dir = std::env::temp_dir().join(format!("fbdt-secure-strikes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let id = ServerIdentity::load_or_generate(&dir).unwrap();
        let pin = parse_fingerprint(&id.fingerprint()).unwrap();
        let server = Security::Server(Arc::new(TlsServer::new(id, Some(b"the-right-token".to_vec())).unwrap()));
        let client = |t: &[u8]| {
            Security::Client(Arc::new(
                TlsClient::new(Trust::Pins(vec![pin]), Some(t.to_vec())).unwrap(),
            ))
        };
        let (wrong, right) = (client(b"a-wrong-token"), client(b"the-right-token"));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let spec: PathSpec = l.local_addr().unwrap().to_string().parse().unwrap();
        let srv = tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for _ in 0..WRONG_TOKENS_PER_SOURCE + 3 {
                let (tcp, _) = l.accept().await.unwrap();
                outcomes.push(match accept(tcp, &server).await {
                    Ok(_) => "served".to_string(),
                    Err(r) => r.why,
                });
            }
            outcomes
        });
        let dial = |from: &str, sec: Security| {
            let from: std::net::IpAddr = from.parse().unwrap();
            let spec = spec.clone();
            async move {
                let s = tokio::net::TcpSocket::new_v4().unwrap();
                s.bind(std::net::SocketAddr::new(from, 0)).unwrap();
                let tcp = s.connect(spec.remote).await.unwrap();
                let mut c = connect(tcp, &spec, &sec).await.ok()?;
                let mut b = [0u8; 1];
                let _ = c.read(&mut b).await;
                Some(())
            }
        };
        for _ in 0..WRONG_TOKENS_PER_SOURCE + 1 {
            dial("127.0.0.2", wrong.clone()).await;
        }
        dial("127.0.0.2", right.clone()).await;
        let other = tokio::spawn(async move {
            let tcp = TcpStream::connect(spec.remote).await.unwrap();
            connect(tcp, &spec, &right).await.map(|_| ())
        });
        let outcomes = srv.await.unwrap();
        let _ = other.await;
        let _ = std::fs::remove_dir_all(&dir);
        let n = WRONG_TOKENS_PER_SOURCE as usize;
        assert!(
            outcomes[..n].iter().all(|o| o.contains("token is wrong")),
            "{outcomes:?}"
        );
        assert!(
            outcomes[n..n + 2].iter().all(|o| o.contains("wrong tokens within")),
            "{outcomes:?}"
        );
        assert_eq!(outcomes[n + 2], "served", "another address is served: {outcomes:?}");
    }

    /// Known hosts are keyed by server identity: once a client trusted path 0's server, a
    /// new address showing another key is refused (and not recorded), while one showing
    /// the same key is recorded as the known server at a new address.
    #[tokio::test]
    async fn every_address_must_show_path_0s_key() {
        let base = std::env::temp_dir().join(format!("fbdt-secure-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (ka, kb) = (base.join("a"), base.join("b"));
        let known = base.join("known_hosts");
        let serve_on = |ip: &str, keys: PathBuf| {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            async move {
                let id = ServerIdentity::load_or_generate(&keys).unwrap();
                let sec = Security::Server(Arc::new(TlsServer::new(id, None).unwrap()));
                let l = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
                let spec: PathSpec = l.local_addr().unwrap().to_string().parse().unwrap();
                let task = tokio::spawn(async move {
                    while let Ok((tcp, _)) = l.accept().await {
                        if let Ok(mut s) = accept(tcp, &sec).await {
                            let _ = s.write_all(b"x").await;
                            let _ = s.flush().await;
                        }
                    }
                });
                (spec, task)
            }
        };
        let client = Security::Client(Arc::new(
            TlsClient::new(Trust::KnownHosts(known.clone()), None).unwrap(),
        ));
        let dial = |spec: PathSpec, sec: Security| async move {
            let tcp = TcpStream::connect(spec.remote).await.unwrap();
            connect(tcp, &spec, &sec).await.map(|_| ())
        };
        let (a, ta) = serve_on("127.0.0.1", ka.clone()).await;
        let (b, tb) = serve_on("127.0.0.2", kb).await;
        let (a2, ta2) = serve_on("127.0.0.3", ka).await;
        dial(a.clone(), client.clone())
            .await
            .expect("path 0 trusted on first use");
        let e = dial(b, client.clone()).await.expect_err("another key on a new address");
        assert!(e.to_string().contains("this session's server (path 0)"), "{e}");
        dial(a2, client.clone()).await.expect("the same key on a new address");
        let text = std::fs::read_to_string(&known).unwrap();
        assert!(text.contains("127.0.0.1 ") && text.contains("127.0.0.3 "), "{text}");
        assert!(!text.contains("127.0.0.2"), "the foreign key is never recorded: {text}");
        for t in [ta, tb, ta2] {
            t.abort();
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A key directory that already existed with a wider mode is made 0700 when the key is
    /// generated in it; the key file is 0600.
    #[test]
    fn the_key_directory_is_made_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("fbdt-secure-mode-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ServerIdentity::load_or_generate(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A re-join resumes TLS (no certificate, one round trip); prints what each handshake
    /// took on loopback.
    #[tokio::test]
    async fn a_second_connection_resumes() {
        let (dir, server, client, l, spec) = setup("test").await;
        let srv = tokio::spawn(async move {
            let mut resumed = Vec::new();
            for _ in 0..3 {
                let (tcp, _) = l.accept().await.unwrap();
                let Ok(mut s) = accept(tcp, &server).await else {
                    panic!("accept")
                };
                resumed.push(s.resumed());
                s.write_all(b"x").await.unwrap();
                s.flush().await.unwrap();
                let mut b = [0u8; 1];
                let _ = s.read(&mut b).await;
            }
            resumed
        });
        let mut kinds = Vec::new();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let tcp = TcpStream::connect(spec.remote).await.unwrap();
            let mut s = connect(tcp, &spec, &client).await.unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
            eprintln!("TLS connect: {:?}, resumed {}", t.elapsed(), s.resumed());
            kinds.push(s.resumed());
            s.half_close();
        }
        let at_server = srv.await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(kinds, [false, true, true]);
        assert_eq!(at_server, [false, true, true]);
    }

    /// Each connection takes a ticket from the client's cache, and the server's new ones
    /// enter it only when the connection is read. Connections dropped unread (stall probes
    /// that did not take over, before this was fixed) empty the cache, and the next re-join
    /// needs a full handshake; retired ones keep it full, so the re-join resumes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retired_connections_keep_re_joins_resumed() {
        let (dir, server, client, l, spec) = setup("retire").await;
        // As the server's router: the handshake, then wait for a first frame; EOF ends it.
        let srv = tokio::spawn(async move {
            while let Ok((tcp, _)) = l.accept().await {
                let server = server.clone();
                tokio::spawn(async move {
                    if let Ok(mut s) = accept(tcp, &server).await {
                        s.write_all(b"x").await.ok();
                        s.flush().await.ok();
                        let mut b = [0u8; 64];
                        while matches!(s.read(&mut b).await, Ok(n) if n > 0) {}
                    }
                });
            }
        });
        let dial = || async {
            let tcp = TcpStream::connect(spec.remote).await.unwrap();
            connect(tcp, &spec, &client).await.unwrap()
        };
        // A connection that is read: its tickets fill the cache.
        let read_one = |mut s: PathStream| async move {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).await.unwrap();
            s
        };
        let first = read_one(dial().await).await;
        assert!(!first.resumed());
        // More connections than the server sends tickets per connection, dropped unread.
        for _ in 0..6 {
            drop(dial().await);
        }
        let after_drops = read_one(dial().await).await;
        assert!(!after_drops.resumed(), "dropped connections emptied the ticket cache");
        // The same number retired: the cache stays full and the re-join resumes.
        for _ in 0..12 {
            dial().await.close_keeping_tickets().await;
        }
        let after_retired = read_one(dial().await).await;
        assert!(after_retired.resumed(), "a re-join after retired connections resumes");
        srv.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
