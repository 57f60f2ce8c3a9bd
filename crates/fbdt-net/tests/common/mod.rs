//! Helpers shared by the integration tests.

/// The bytes of a valid client HELLO on path 0, as a raw peer would send them.
#[allow(dead_code)] // not every test binary that includes this module speaks raw frames
pub fn hello_bytes() -> Vec<u8> {
    let mut c = fbdt_core::Connection::client(fbdt_core::Config::default()).unwrap();
    c.add_path(fbdt_core::PathId(0), fbdt_core::Instant::ZERO).unwrap();
    let mut out = Vec::new();
    let _ = c.poll_transmit(
        fbdt_core::PathId(0),
        fbdt_core::max_frame_len(),
        fbdt_core::Instant::ZERO,
        &mut out,
    );
    out
}

/// Echoes every session the listener accepts (the silent ones end with an error).
#[allow(dead_code)] // not every test binary that includes this module echoes
pub fn echo_all(mut l: fbdt_net::Listener) -> tokio::task::JoinHandle<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::spawn(async move {
        while let Some(mut s) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                if s.read_to_end(&mut buf).await.is_ok() {
                    let _ = s.write_all(&buf).await;
                    let _ = s.shutdown().await;
                }
            });
        }
    })
}

/// A TCP relay for one path: forwards each connection it accepts on `listen` to `target`
/// (dialling from `from` when given), or, while `silent`, holds it without a byte either
/// way; `cut` drops every connection it relays (both ends see the socket close).
#[allow(dead_code)] // not every test binary that includes this module relays
pub struct Relay {
    pub addr: std::net::SocketAddr,
    pub silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

#[allow(dead_code)]
impl Relay {
    pub async fn start(
        listen: std::net::IpAddr,
        from: Option<std::net::IpAddr>,
        target: std::net::SocketAddr,
    ) -> Relay {
        use std::sync::atomic::Ordering;
        let l = tokio::net::TcpListener::bind((listen, 0)).await.unwrap();
        let addr = l.local_addr().unwrap();
        let silent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s2, c2) = (silent.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut a, _)) = l.accept().await {
                let task = if s2.load(Ordering::SeqCst) {
                    tokio::spawn(async move {
                        let _held = a;
                        std::future::pending::<()>().await;
                    })
                } else {
                    let Ok(mut b) = dial(from, target).await else {
                        continue;
                    };
                    tokio::spawn(async move {
                        let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
                    })
                };
                c2.lock().unwrap().push(task);
            }
        });
        Relay {
            addr,
            silent,
            conns,
            accept,
        }
    }

    pub fn cut(&self) {
        for h in self.conns.lock().unwrap().drain(..) {
            h.abort();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// A TCP connection to `to`, from source address `from` when given.
#[allow(dead_code)]
pub async fn dial(from: Option<std::net::IpAddr>, to: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let s = match to {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    if let Some(ip) = from {
        s.bind(std::net::SocketAddr::new(ip, 0))?;
    }
    s.connect(to).await
}
