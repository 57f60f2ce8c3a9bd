//! The handshake and JOIN parser: any bytes as the first bytes of a new connection
//! (`first_frame`, `accepts_join`), as the stream of a joining path of an established
//! server session, and as the server's answer on a joining path of an established client
//! session, with a connection binding taken from the input. Never panics; the client's real
//! JOIN is accepted only on the connection it was made for, bytes from the fuzzer are never
//! accepted as a JOIN, and never as a JOIN answer (unless they begin with the server's real
//! one): that path stays out of use, sends nothing, and the session lives on.
//!
//! What comes before the input's binding is used — the session established on path 0 and
//! the client's JOIN for path 1 — is the same for every input: it is set up once, and every
//! input runs on fresh clones of that client and server (`Connection: Clone`), so each
//! starts from the same state and a finding replays on its own.
#![no_main]

use fbdt_core::handshake::first_frame;
use fbdt_core::{Config, Connection, Instant, PathBinding, PathId};
use libfuzzer_sys::fuzz_target;

/// The binding of the connection the client's real JOIN (path 1) was made for.
const REAL_BINDING: PathBinding = PathBinding { exporter: [2; 32], epoch: 7 };

/// A client and a server established on path 0, and the client's real JOIN for path 1 (on a
/// connection bound to [`REAL_BINDING`]), sent.
struct Start {
    client: Connection,
    server: Connection,
    real: Vec<u8>,
}

fn start() -> Start {
    let now = Instant::ZERO;
    let cfg = Config::default();
    let mut client = Connection::client(cfg.clone()).expect("valid config");
    let mut server = Connection::server(cfg).expect("valid config");
    let path0 = PathBinding { exporter: [1; 32], epoch: 0 };
    client.add_path_bound(PathId(0), path0, now).expect("path");
    server.add_path_bound(PathId(0), path0, now).expect("path");
    let mut buf = Vec::new();
    while client.poll_transmit(PathId(0), 1 << 20, now, &mut buf) > 0 {}
    let _ = server.handle_recv(PathId(0), &buf, now);
    buf.clear();
    while server.poll_transmit(PathId(0), 1 << 20, now, &mut buf) > 0 {}
    let _ = client.handle_recv(PathId(0), &buf, now);
    assert!(server.is_established() && client.is_established(), "the set-up handshake failed");
    // The client's real JOIN for a connection bound to [2; 32].
    client.add_path_bound(PathId(1), REAL_BINDING, now).expect("path");
    let mut real = Vec::new();
    while client.poll_transmit(PathId(1), 1 << 20, now, &mut real) > 0 {}
    Start { client, server, real }
}

thread_local! {
    /// Built at the first input, never touched afterwards: inputs get clones.
    static START: Start = start();
}

fuzz_target!(|data: &[u8]| {
    let _ = first_frame(data);
    let Some((binding, rest)) = data.split_first_chunk::<32>() else { return };
    let now = Instant::ZERO;
    let (mut client, mut server, real) = START.with(|s| (s.client.clone(), s.server.clone(), s.real.clone()));
    assert_eq!(server.accepts_join(&real, binding), *binding == REAL_BINDING.exporter);
    assert!(!server.accepts_join(rest, binding) || rest.starts_with(&real));
    // The server's real answer to the client's JOIN for path 2 on a connection bound to the
    // fuzzer's binding, then the fuzzed bytes in its place.
    let joined = PathBinding { exporter: *binding, epoch: 0 };
    client.add_path_bound(PathId(2), joined, now).expect("path");
    let mut join2 = Vec::new();
    while client.poll_transmit(PathId(2), 1 << 20, now, &mut join2) > 0 {}
    server.add_path_bound(PathId(2), joined, now).expect("path");
    let _ = server.handle_recv(PathId(2), &join2, now);
    let mut real_ok = Vec::new();
    let _ = server.poll_transmit(PathId(2), 1 << 20, now, &mut real_ok);
    let genuine = !real_ok.is_empty() && rest.starts_with(&real_ok);
    let answer = client.handle_recv(PathId(2), rest, now);
    assert_eq!(client.is_path_up(PathId(2)), genuine);
    if !genuine {
        assert!(answer.as_ref().map_or_else(|e| e.is_path_local(), |_| true), "{answer:?}");
        assert!(!client.is_closed(), "bytes on a joining path closed the session");
        let mut out = Vec::new();
        assert_eq!(client.poll_transmit(PathId(2), 1 << 20, now, &mut out), 0, "sent on a refused path");
    }
    // The fuzzed bytes as a joining connection's stream.
    let theirs = PathBinding { exporter: *binding, epoch: 0 };
    server.add_path_bound(PathId(1), theirs, now).expect("path");
    let _ = server.handle_recv(PathId(1), rest, now);
    let _ = server.path_epoch(PathId(1));
    let mut out = Vec::new();
    while server.poll_transmit(PathId(1), 1 << 20, now, &mut out) > 0 {}
});
