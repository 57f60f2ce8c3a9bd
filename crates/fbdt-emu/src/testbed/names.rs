//! Interface names on the testbed.

/// The emulator namespace's veth towards the client on path `n` (1-based).
pub(super) fn emu_client_dev(n: usize) -> String {
    format!("ec{n}")
}

pub(super) fn valid_ifname(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && s != "lo" && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
