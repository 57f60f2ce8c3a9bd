//! Session keys, tokens and JOIN authentication.
//!
//! Each side puts 32 random bytes in its HELLO. The session key is
//! SHA-256(client key ‖ server key); the token naming the session in JOINs is the first 8
//! bytes of SHA-256("fbdt token" ‖ session key); a JOIN for path i carries
//! HMAC-SHA256(session key, "fbdt join" ‖ token ‖ i). As with MPTCP's keys, the keys cross
//! the first connection in clear: this stops third parties that did not see the HELLOs from
//! attaching a path to someone else's session, not an on-path eavesdropper.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::wire::{Frame, Join};

pub struct SessionKeys {
    key: [u8; 32],
    pub token: [u8; 8],
}

impl SessionKeys {
    pub fn derive(client_key: &[u8; 32], server_key: &[u8; 32]) -> Self {
        let key: [u8; 32] = Sha256::new()
            .chain_update(client_key)
            .chain_update(server_key)
            .finalize()
            .into();
        let digest = Sha256::new().chain_update(b"fbdt token").chain_update(key).finalize();
        let mut token = [0u8; 8];
        token.copy_from_slice(&digest[..8]);
        SessionKeys { key, token }
    }

    fn mac(&self, path_index: u8) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(b"fbdt join");
        mac.update(&self.token);
        mac.update(&[path_index]);
        mac
    }

    pub fn join(&self, path_index: u8) -> Join {
        Join {
            token: self.token,
            path_index,
            hmac: self.mac(path_index).finalize().into_bytes().into(),
        }
    }

    /// Constant-time check of a JOIN's token and HMAC.
    pub fn verify(&self, join: &Join) -> bool {
        join.token == self.token && self.mac(join.path_index).verify_slice(&join.hmac).is_ok()
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
    fn join_verifies_only_with_the_right_keys() {
        let a = SessionKeys::derive(&[1; 32], &[2; 32]);
        let b = SessionKeys::derive(&[1; 32], &[3; 32]);
        let j = a.join(2);
        assert!(a.verify(&j));
        assert!(!b.verify(&j));
        let mut forged = j.clone();
        forged.path_index = 3;
        assert!(!a.verify(&forged));
        let mut flipped = j;
        flipped.hmac[0] ^= 1;
        assert!(!a.verify(&flipped));
    }
}
