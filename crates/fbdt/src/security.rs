//! The binary's TLS options: where the server's key lives, how a client trusts the server,
//! the pre-shared token, client certificates, and `--plaintext`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use fbdt_net::secure::{default_key_dir, default_known_hosts, parse_fingerprint};
use fbdt_net::{ClientCert, Security, ServerIdentity, TlsClient, TlsServer, Trust};

/// Shortest token taken: a token is guessed off-line from nothing, but online guesses are
/// only rate-limited (see `fbdt_net::secure::WRONG_TOKENS_PER_SOURCE`), so it must not be
/// short enough to enumerate.
pub const MIN_TOKEN_LEN: usize = 12;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct SecurityArgs {
    /// No TLS: FBDT frames go over bare TCP, readable and forgeable by anyone on a path.
    /// For benchmarks and paper-faithful runs only; both ends must say it.
    #[arg(long)]
    pub plaintext: bool,
    /// Server: directory holding server-cert.pem and server-key.pem, generated on first
    /// start (default: $XDG_DATA_HOME/fbdt or ~/.local/share/fbdt).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["cert", "plaintext"])]
    pub key_dir: Option<PathBuf>,
    /// Server: certificate (PEM) to present instead of the generated one (with --key).
    #[arg(long, value_name = "FILE", requires = "key", conflicts_with = "plaintext")]
    pub cert: Option<PathBuf>,
    /// Server: private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert", conflicts_with = "plaintext")]
    pub key: Option<PathBuf>,
    /// Client: the server certificate's SHA-256 fingerprint as the server prints it
    /// (sha256:HEX; repeat to allow several).
    #[arg(long, value_name = "SHA256", conflicts_with_all = ["known_hosts", "ca", "plaintext"])]
    pub pin: Vec<String>,
    /// Client: known-hosts file; a server seen before must show the same key, a new one is
    /// trusted on first use and recorded (default when neither --pin nor --ca is given:
    /// known_hosts in the default key directory).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["ca", "plaintext"])]
    pub known_hosts: Option<PathBuf>,
    /// Client: trust server certificates issued by the CAs in this PEM file (the
    /// certificate must name the server's IP address).
    #[arg(long, value_name = "FILE", conflicts_with = "plaintext")]
    pub ca: Option<PathBuf>,
    /// Pre-shared token: a server given one serves only clients that prove it (over TLS,
    /// bound to each connection). Visible in the process list: prefer --token-file.
    #[arg(long, value_name = "TOKEN", conflicts_with_all = ["token_file", "plaintext"])]
    pub token: Option<String>,
    /// Read the token from this file (one line; trailing newline ignored).
    #[arg(long, value_name = "FILE", conflicts_with = "plaintext")]
    pub token_file: Option<PathBuf>,
    /// Server: require a client certificate issued by a CA in this PEM file on every
    /// connection (path 0 and every JOIN). With a token too, clients need both.
    #[arg(long, value_name = "FILE", conflicts_with = "plaintext")]
    pub client_ca: Option<PathBuf>,
    /// Client: certificate chain (PEM) to present to a server that asks for one (with
    /// --client-key).
    #[arg(long, value_name = "FILE", requires = "client_key", conflicts_with = "plaintext")]
    pub client_cert: Option<PathBuf>,
    /// Client: private key (PEM) of --client-cert.
    #[arg(long, value_name = "FILE", requires = "client_cert", conflicts_with = "plaintext")]
    pub client_key: Option<PathBuf>,
}

impl SecurityArgs {
    /// What results record: `"tls13"`, or `"none"` with `--plaintext`.
    pub fn encryption(&self) -> &'static str {
        if self.plaintext {
            "none"
        } else {
            "tls13"
        }
    }

    /// The server will refuse connections that do not prove the token (TLS with a token).
    pub fn requires_token(&self) -> bool {
        !self.plaintext && (self.token.is_some() || self.token_file.is_some())
    }

    /// The server will refuse connections without a client certificate from --client-ca.
    pub fn requires_client_cert(&self) -> bool {
        !self.plaintext && self.client_ca.is_some()
    }

    fn token(&self) -> anyhow::Result<Option<Vec<u8>>> {
        let checked = |t: &str, what: String| -> anyhow::Result<Option<Vec<u8>>> {
            if t.len() < MIN_TOKEN_LEN {
                bail!(
                    "{what} is {} bytes: a token needs at least {MIN_TOKEN_LEN} (e.g. `head -c 16 /dev/urandom | base64 > FILE`)",
                    t.len()
                );
            }
            Ok(Some(t.as_bytes().to_vec()))
        };
        if let Some(t) = &self.token {
            if t.is_empty() {
                bail!("--token is empty");
            }
            return checked(t, "--token".into());
        }
        let Some(f) = &self.token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(f).with_context(|| format!("reading token file {}", f.display()))?;
        let t = text.trim_end_matches(['\n', '\r']);
        if t.is_empty() {
            bail!("token file {} is empty", f.display());
        }
        checked(t, format!("the token in {}", f.display()))
    }

    /// The server's settings; prints the key's fingerprint for clients to pin.
    pub fn server(&self) -> anyhow::Result<Security> {
        if self.plaintext {
            return Ok(Security::Plaintext);
        }
        if !self.pin.is_empty() || self.known_hosts.is_some() || self.ca.is_some() || self.client_cert.is_some() {
            bail!("--pin, --known-hosts, --ca and --client-cert are client options");
        }
        let id = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => ServerIdentity::from_pem_files(c, k)?,
            _ => {
                let dir = match &self.key_dir {
                    Some(d) => d.clone(),
                    None => default_key_dir().context("no --key-dir and neither $XDG_DATA_HOME nor $HOME is set")?,
                };
                ServerIdentity::load_or_generate(&dir)?
            }
        };
        let tls = TlsServer::with_client_ca(id, self.token()?, self.client_ca.as_deref())?;
        eprintln!(
            "fbdt: TLS 1.3, server key {} (clients: --pin {})",
            tls.fingerprint(),
            tls.fingerprint()
        );
        Ok(Security::Server(Arc::new(tls)))
    }

    /// The client's settings.
    pub fn client(&self) -> anyhow::Result<Security> {
        if self.plaintext {
            return Ok(Security::Plaintext);
        }
        if self.key_dir.is_some() || self.cert.is_some() || self.client_ca.is_some() {
            bail!("--key-dir, --cert, --key and --client-ca are server options");
        }
        let trust = if !self.pin.is_empty() {
            let pins = self
                .pin
                .iter()
                .map(|p| parse_fingerprint(p))
                .collect::<Result<Vec<_>, _>>();
            Trust::Pins(pins.map_err(anyhow::Error::msg).context("--pin")?)
        } else if let Some(ca) = &self.ca {
            Trust::Ca(ca.clone())
        } else {
            let file = match &self.known_hosts {
                Some(f) => f.clone(),
                None => default_known_hosts()
                    .context("no --pin, --ca or --known-hosts, and neither $XDG_DATA_HOME nor $HOME is set")?,
            };
            Trust::KnownHosts(file)
        };
        let cert = match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => Some(ClientCert::from_pem_files(c, k)?),
            _ => None,
        };
        Ok(Security::Client(Arc::new(TlsClient::with_cert(
            trust,
            self.token()?,
            cert,
        )?)))
    }
}
