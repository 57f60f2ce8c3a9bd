//! A server that runs out of file descriptors (EMFILE at accept) backs off, keeps its
//! listener, and serves again once descriptors are free. Its own test binary: the
//! descriptor limit is per process.

mod common;
use common::echo_all;

use std::net::SocketAddr;
use std::time::Duration;

use fbdt_net::{connect, listen, NetConfig, PathSpec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BOUND: Duration = Duration::from_secs(30);

fn nofile() -> libc::rlimit {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r
}

fn set_nofile(r: &libc::rlimit) {
    // SAFETY: setrlimit reads the struct it is given; lowering the soft limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, r) }, 0);
}

/// The lowest descriptor number free now: every new descriptor is at least this.
fn lowest_free_fd() -> u64 {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open("/dev/null").unwrap();
    f.as_raw_fd() as u64
}

async fn echo_session_works(addr: SocketAddr) {
    let spec: PathSpec = format!("127.0.0.2={addr}").parse().unwrap();
    let mut c = connect(vec![spec], NetConfig::default()).await.expect("connect");
    let data = vec![5u8; 256 * 1024];
    c.write_all(&data).await.unwrap();
    c.shutdown().await.unwrap();
    let mut back = Vec::new();
    c.read_to_end(&mut back).await.unwrap();
    assert!(back == data, "echo intact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_survives_running_out_of_descriptors() {
    let l = listen(&["127.0.0.1:0".parse().unwrap()], NetConfig::default())
        .await
        .expect("listen");
    let addr = l.local_addrs()[0];
    let echo = echo_all(l);
    // The flood's sockets exist before the limit drops (connecting needs no new descriptor);
    // the server can then accept only a few of them before accept(2) fails with EMFILE.
    const FLOOD: usize = 64;
    let flood: Vec<socket2::Socket> = (0..FLOOD)
        .map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap())
        .collect();
    let original = nofile();
    let low = libc::rlimit {
        rlim_cur: lowest_free_fd() + 4,
        rlim_max: original.rlim_max,
    };
    set_nofile(&low);
    for s in &flood {
        s.connect(&addr.into())
            .expect("the kernel completes the handshake in the backlog");
    }
    // Long enough for the accept loop to meet EMFILE several times (it backs off 50 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let exhausted = std::fs::File::open("/dev/null").map_err(|e| e.raw_os_error());
    drop(flood);
    set_nofile(&original);
    assert_eq!(exhausted.err(), Some(Some(libc::EMFILE)), "the limit was reached");
    tokio::time::timeout(BOUND, echo_session_works(addr))
        .await
        .expect("the server serves again once descriptors are free");
    echo.abort();
}
