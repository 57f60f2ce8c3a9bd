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
//!   HMAC-SHA256(session key, "fbdt join" ‖ token ‖ i ‖ e ‖ b);
//! - the server's answer (JOIN_OK) to that JOIN carries
//!   HMAC-SHA256(session key, "fbdt join ok" ‖ token ‖ i ‖ e ‖ b): the same fields under a
//!   label of its own, so the JOIN's own HMAC, reflected back, is no answer (the two inputs
//!   even differ in length: 54 and 57 bytes). The client sends nothing on a joining path
//!   before the answer verifies: it proves that whoever ended this very connection (its
//!   binding) holds the session key.
//!
//! A JOIN is thus worthless on any other connection: its binding differs (TLS exporters
//! are unique per connection), so a recorded JOIN replayed elsewhere fails the check. On a
//! plaintext session (explicit `--plaintext`) every binding is zero and the keys cross path
//! 0 in the clear, as with MPTCP's MP_CAPABLE: that mode stops only off-path attackers.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::wire::{Frame, Join, JoinOk};

/// The TLS exporter label both ends use for a connection's binding.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-fbdt-path-binding";
/// What a JOIN's HMAC starts with (client → server).
const JOIN_LABEL: &[u8] = b"fbdt join";
/// What a JOIN answer's HMAC starts with (server → client): another direction, another label.
const JOIN_OK_LABEL: &[u8] = b"fbdt join ok";

/// What ties a JOIN to one connection: the connection's binding (TLS exporter, zeros on
/// plaintext) and the client's connection epoch for the path (0 for the first connection).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathBinding {
    pub exporter: [u8; 32],
    pub epoch: u32,
}

#[derive(Clone)]
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

    fn mac(&self, label: &[u8], path_index: u8, binding: &PathBinding) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(label);
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
            hmac: self.mac(JOIN_LABEL, path_index, binding).finalize().into_bytes().into(),
        }
    }

    /// The server's answer to a JOIN it accepted for `path_index` on a connection with
    /// `binding` (the JOIN's epoch).
    pub fn join_ok(&self, path_index: u8, binding: &PathBinding) -> JoinOk {
        JoinOk {
            path_index,
            epoch: binding.epoch,
            hmac: self.mac(JOIN_OK_LABEL, path_index, binding).finalize().into_bytes().into(),
        }
    }

    /// Constant-time check of a JOIN answer that arrived on our connection for
    /// `path_index` whose binding (exporter and the epoch our JOIN carried) is `binding`.
    pub fn verify_join_ok(&self, answer: &JoinOk, path_index: u8, binding: &PathBinding) -> bool {
        answer.path_index == path_index
            && answer.epoch == binding.epoch
            && self
                .mac(JOIN_OK_LABEL, path_index, binding)
                .verify_slice(&answer.hmac)
                .is_ok()
    }

    /// Constant-time check of a JOIN's token and HMAC, for a JOIN that arrived on a
    /// connection whose binding is `exporter`.
    pub fn verify(&self, join: &Join, exporter: &[u8; 32]) -> bool {
        let binding = PathBinding {
            exporter: *exporter,
            epoch: join.epoch,
        };
        join.token == self.token
            && self
                .mac(JOIN_LABEL, join.path_index, &binding)
                .verify_slice(&join.hmac)
                .is_ok()
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

    #[test]
    fn a_join_answer_verifies_only_for_its_connection_and_session() {
        let a = SessionKeys::derive(&[1; 32], &[2; 32], &[0; 32]);
        let other_key = SessionKeys::derive(&[1; 32], &[3; 32], &[0; 32]);
        let other_path0 = SessionKeys::derive(&[1; 32], &[2; 32], &[9; 32]);
        let conn = PathBinding {
            exporter: [7; 32],
            epoch: 3,
        };
        let ok = a.join_ok(2, &conn);
        assert_eq!((ok.path_index, ok.epoch), (2, 3));
        assert!(a.verify_join_ok(&ok, 2, &conn));
        assert!(!other_key.verify_join_ok(&ok, 2, &conn), "made without the session key");
        assert!(!other_path0.verify_join_ok(&ok, 2, &conn), "path 0's binding is part of the key");
        let elsewhere = PathBinding {
            exporter: [8; 32],
            ..conn
        };
        assert!(!a.verify_join_ok(&ok, 2, &elsewhere), "an answer made for another connection");
        let zeros = PathBinding {
            exporter: [0; 32],
            ..conn
        };
        assert!(!a.verify_join_ok(&ok, 2, &zeros), "a TLS connection's answer on plaintext");
        let later = PathBinding { epoch: 4, ..conn };
        assert!(!a.verify_join_ok(&ok, 2, &later), "an answer to an earlier connection's JOIN");
        assert!(!a.verify_join_ok(&ok, 1, &conn), "an answer for another path");
        let mut relabelled = ok.clone();
        relabelled.path_index = 1;
        assert!(!a.verify_join_ok(&relabelled, 1, &conn));
        let mut flipped = ok;
        flipped.hmac[31] ^= 0x80;
        assert!(!a.verify_join_ok(&flipped, 2, &conn));
    }

    /// Whoever relays our JOIN back to us (a reflecting middlebox, or an attacker without the
    /// session key) holds a valid HMAC for this very connection, path and epoch: the
    /// answer's label differs, so it is refused.
    #[test]
    fn a_reflected_join_mac_is_no_answer() {
        let a = SessionKeys::derive(&[1; 32], &[2; 32], &[5; 32]);
        for exporter in [[0; 32], [7; 32]] {
            let conn = PathBinding { exporter, epoch: 1 };
            let join = a.join(1, &conn);
            let reflected = JoinOk {
                path_index: join.path_index,
                epoch: join.epoch,
                hmac: join.hmac,
            };
            assert!(!a.verify_join_ok(&reflected, 1, &conn));
            // Nor is an answer a JOIN.
            let answer = a.join_ok(1, &conn);
            let as_join = Join {
                token: a.token,
                path_index: 1,
                epoch: 1,
                hmac: answer.hmac,
            };
            assert!(!a.verify(&as_join, &conn.exporter));
        }
    }
}
