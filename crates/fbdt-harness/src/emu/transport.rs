//! How a scheme runs on the testbed ([`Transport`]) and the kernel sockets it opens there
//! (TCP or MPTCP, bound to one path's address).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::scheme::cotag::CotagScheme;
use crate::scheme::{self, Encryption, Scheme};
use anyhow::{Context, Result};
use fbdt_emu::perf::Proto;
use fbdt_scenario::Scenario;

/// How a scheme runs on the testbed.
pub enum Transport {
    /// A kernel socket (TCP or MPTCP) from the client address of this path.
    Kernel(Proto, usize),
    /// The fbdt-net runtime with this core configuration (FBDT or the `mp:*` meta layer),
    /// plaintext or over TLS 1.3.
    Session(Box<fbdt_core::Config>, Encryption),
    /// One kernel TCP flow through cotag-net's TUN link: COTAG, or dual-rr (`None`).
    CotagLink(Option<CotagScheme>),
}

pub fn transport(name: &str, scenario: &Scenario) -> Result<Transport> {
    if scheme::runtime_options(name, scenario)?.1.coupling == fbdt_sim::Coupling::Cubic {
        anyhow::bail!(
            "scheme `{name}`: `+coupled=cubic` runs only in the simulator's TCP model (--backend sim --model tcp); \
             the testbed couples with LIA (`+coupled`), as per-path pacing ceilings"
        );
    }
    Ok(match scheme::parse(name, scenario, scenario.seed)? {
        Scheme::Session(cfg, encryption) => Transport::Session(cfg, encryption),
        Scheme::Tcp { path } => Transport::Kernel(Proto::Tcp, path),
        // Kernel MPTCP starts on the first path; its endpoints add a subflow per other path.
        Scheme::KernelMptcp => Transport::Kernel(Proto::Mptcp, 0),
        Scheme::Cotag(c) => Transport::CotagLink(Some(c)),
        Scheme::DualRr => Transport::CotagLink(None),
    })
}

/// What a scheme's results record as its encryption (names were checked before the runs).
pub fn transport_encryption(name: &str, scenario: &Scenario) -> Encryption {
    scheme::parse(name, scenario, scenario.seed).map_or(Encryption::None, |s| s.encryption())
}

fn socket(proto: Proto) -> std::io::Result<socket2::Socket> {
    let p = match proto {
        Proto::Tcp => socket2::Protocol::TCP,
        Proto::Mptcp => socket2::Protocol::from(libc::IPPROTO_MPTCP),
    };
    socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, Some(p))
}

/// Must run in the server namespace.
pub fn kernel_listener(ip: Ipv4Addr, proto: Proto) -> Result<tokio::net::TcpListener> {
    let s = socket(proto).context("socket")?;
    s.set_reuse_address(true)?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(ip, 0)).into())
        .context("bind")?;
    s.listen(16)?;
    s.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(s.into())?)
}

/// Must run in the client namespace, inside a runtime. Bound to `src` so policy routing
/// sends it by that path; no Nagle delay on the small requests.
pub fn kernel_connect(src: Ipv4Addr, dst: SocketAddr, proto: Proto) -> Result<tokio::net::TcpStream> {
    let s = socket(proto).context("socket")?;
    s.bind(&SocketAddr::V4(SocketAddrV4::new(src, 0)).into())
        .context("bind")?;
    s.connect_timeout(&dst.into(), Duration::from_secs(5))
        .with_context(|| format!("connecting to {dst}"))?;
    s.set_nodelay(true)?;
    s.set_nonblocking(true)?;
    Ok(tokio::net::TcpStream::from_std(s.into())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The testbed runs LIA coupling (as pacing ceilings in the runtime) and refuses the
    /// simulator-only coupled Cubic by name.
    #[test]
    fn the_testbed_takes_lia_coupling_and_refuses_coupled_cubic() {
        let s = fbdt_scenario::builtin("shared-bottleneck").expect("built-in");
        for name in ["fbdt+coupled", "mp:minrtt+coupled=lia", "fbdt+window=paper+coupled"] {
            let t = transport(name, &s).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            assert!(matches!(t, Transport::Session(..)), "{name}");
            let mut net = fbdt_net::NetConfig::default();
            scheme::runtime_options(name, &s).unwrap().1.apply(&mut net);
            assert_eq!(net.coupled, fbdt_net::CoupledMode::Always, "{name}");
        }
        let mut net = fbdt_net::NetConfig::default();
        scheme::runtime_options("fbdt+coupled=shared", &s).unwrap().1.apply(&mut net);
        assert_eq!(net.coupled, fbdt_net::CoupledMode::WhenShared);
        assert!(transport("fbdt+coupled=shared", &s).is_ok());
        let e = transport("fbdt+coupled=cubic", &s).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(e.contains("`+coupled=cubic` runs only in the simulator"), "{e}");
        let mut net = fbdt_net::NetConfig::default();
        scheme::runtime_options("fbdt", &s).unwrap().1.apply(&mut net);
        assert_eq!(net.coupled, fbdt_net::CoupledMode::Off);
    }
}
