//! Any bytes on any path of an established server connection: the connection may end the
//! session with an error, but never panics.
//!
//! The session is set up once (a handshake on path 0, path 1 added) and every input runs on
//! a fresh clone of that server (`Connection: Clone`): each input starts from the same
//! state, so a finding replays on its own, and no input pays for key material, HELLOs and
//! key derivation that are the same every time.
#![no_main]

use fbdt_core::{Config, Connection, Instant, PathId};
use libfuzzer_sys::fuzz_target;

/// The server of a session established on path 0 (HELLOs exchanged), with path 1 added.
fn established_server() -> Connection {
    let cfg = Config::default();
    let mut client = Connection::client(cfg.clone()).expect("valid config");
    let mut server = Connection::server(cfg).expect("valid config");
    let now = Instant::ZERO;
    for p in 0..2 {
        client.add_path(PathId(p), now).expect("path");
        server.add_path(PathId(p), now).expect("path");
    }
    // Handshake on path 0, so the fuzzed bytes reach the established state.
    let mut buf = Vec::new();
    while client.poll_transmit(PathId(0), 1 << 20, now, &mut buf) > 0 {}
    let _ = server.handle_recv(PathId(0), &buf, now);
    buf.clear();
    while server.poll_transmit(PathId(0), 1 << 20, now, &mut buf) > 0 {}
    let _ = client.handle_recv(PathId(0), &buf, now);
    assert!(server.is_established() && client.is_established(), "the set-up handshake failed");
    server
}

thread_local! {
    /// Built at the first input, never touched afterwards: inputs get clones.
    static SERVER: Connection = established_server();
}

fuzz_target!(|data: &[u8]| {
    // First byte picks the path and the split; the rest is the byte stream.
    let Some((&sel, stream)) = data.split_first() else { return };
    let mut server = SERVER.with(Connection::clone);
    let now = Instant::ZERO;
    let path = PathId(sel & 1);
    let cut = (sel as usize >> 1).min(stream.len());
    let _ = server.handle_recv(path, &stream[..cut], now);
    let _ = server.handle_recv(path, &stream[cut..], now);
    let mut out = Vec::new();
    for p in 0..2 {
        while server.poll_transmit(PathId(p), 1 << 20, now, &mut out) > 0 {}
    }
    let _ = server.poll_timeout();
});
