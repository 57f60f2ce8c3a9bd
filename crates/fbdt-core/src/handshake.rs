//! Session keys, tokens and JOIN authentication.
//!
//! Each side puts 32 bytes in its HELLO, drawn by the driver from the OS's CSPRNG and
//! passed in ([`crate::Connection::set_local_key`]); the core draws no randomness of its own
//! for them. Every connection has a 32-byte *binding*: the driver passes the connection's TLS
//! exporter (RFC 8446 §7.5, label [`EXPORTER_LABEL`]), or zeros on a plaintext session.
//!
//! - session key = SHA-256("fbdt session" ‖ client key ‖ server key ‖ binding of path 0):
//!   with TLS the keys travel inside path 0's TLS and the key also depends on that TLS
//!   connection's secrets;
//! - token (names the session in JOINs) = first 8 bytes of SHA-256("fbdt token" ‖ session key);
//! - a JOIN for path i, connection epoch e, on a connection with binding b carries
//!   HMAC-SHA256(session key, "fbdt join" ‖ token ‖ i ‖ e ‖ b).
//!
//! A JOIN is thus worthless on any other connection: its binding differs (TLS exporters
//! are unique per connection), so a recorded JOIN replayed elsewhere fails the check. On a
//! plaintext session (explicit `--plaintext`) every binding is zero and the keys cross path
//! 0 in the clear, as with MPTCP's MP_CAPABLE: that mode stops only off-path attackers.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::wire::{Frame, Join};

/// The TLS exporter label both ends use for a connection's binding.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-fbdt-path-binding";

/// What ties a JOIN to one connection: the connection's binding (TLS exporter, zeros on
/// plaintext) and the client's connection epoch for the path (0 for the first connection).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathBinding {
    pub exporter: [u8; 32],
    pub epoch: u32,
}

pub struct SessionKeys {
    key: [u8; 32],
    pub token: [u8; 8],
}

impl SessionKeys {
    pub fn derive(client_key: &[u8; 32], server_key: &[u8; 32], path0: &[u8; 32]) -> Self {
        let key: [u8; 32] = Sha256::new()
            .chain_update(b"fbdt session")
            .chain_update(client_key)
            .chain_update(server_key)
            .chain_update(path0)
            .finalize()
            .into();
        let digest = Sha256::new().chain_update(b"fbdt token").chain_update(key).finalize();
        let mut token = [0u8; 8];
        token.copy_from_slice(&digest[..8]);
        SessionKeys { key, token }
    }

    fn mac(&self, path_index: u8, binding: &PathBinding) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(b"fbdt join");
        mac.update(&self.token);
        mac.update(&[path_index]);
        mac.update(&binding.epoch.to_be_bytes());
        mac.update(&binding.exporter);
        mac
    }

    pub fn join(&self, path_index: u8, binding: &PathBinding) -> Join {
        Join {
            token: self.token,
            path_index,
            epoch: binding.epoch,
            hmac: self.mac(path_index, binding).finalize().into_bytes().into(),
        }
    }

    /// Constant-time check of a JOIN's token and HMAC, for a JOIN that arrived on a
    /// connection whose binding is `exporter`.
    pub fn verify(&self, join: &Join, exporter: &[u8; 32]) -> bool {
        let binding = PathBinding {
            exporter: *exporter,
            epoch: join.epoch,
        };
        join.token == self.token && self.mac(join.path_index, &binding).verify_slice(&join.hmac).is_ok()
    }
}

/// What the first frame of a new connection says, for a server routing connections to
/// sessions before handing the bytes to one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FirstFrame {
    /// A new session (the connection becomes its path 0).
    Hello,
    /// A further path of the session named by `token`.
    Join { token: [u8; 8], path_index: u8 },
}

/// Classifies the first frame in `buf` (`Err(Incomplete)` until enough bytes arrived).
pub fn first_frame(buf: &[u8]) -> Result<FirstFrame, crate::wire::Error> {
    match Frame::parse(buf)?.0 {
        Frame::Hello(_) => Ok(FirstFrame::Hello),
        Frame::Join(j) => Ok(FirstFrame::Join {
            token: j.token,
            path_index: j.path_index,
        }),
        other => Err(crate::wire::Error::Malformed {
            kind: other.kind(),
            what: "a connection must start with HELLO or JOIN",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_verifies_only_with_the_right_keys_and_connection() {
        let a = SessionKeys::derive(&[1; 32], &[2; 32], &[0; 32]);
        let b = SessionKeys::derive(&[1; 32], &[3; 32], &[0; 32]);
        let c = SessionKeys::derive(&[1; 32], &[2; 32], &[9; 32]);
        let conn = PathBinding {
            exporter: [7; 32],
            epoch: 3,
        };
        let j = a.join(2, &conn);
        assert_eq!(j.epoch, 3);
        assert!(a.verify(&j, &conn.exporter));
        assert!(!b.verify(&j, &conn.exporter));
        assert!(!c.verify(&j, &conn.exporter), "path 0's binding is part of the key");
        assert!(!a.verify(&j, &[8; 32]), "a JOIN replayed on another connection");
        let mut forged = j.clone();
        forged.path_index = 3;
        assert!(!a.verify(&forged, &conn.exporter));
        let mut epoch = j.clone();
        epoch.epoch = 4;
        assert!(!a.verify(&epoch, &conn.exporter));
        let mut flipped = j;
        flipped.hmac[0] ^= 1;
        assert!(!a.verify(&flipped, &conn.exporter));
    }
}
