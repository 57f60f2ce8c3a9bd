//! Transparent mode: nftables redirects TCP connections to the proxy's port; the
//! connection's original destination comes from conntrack (SO_ORIGINAL_DST).

use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};
use tokio::net::TcpStream;

use super::wire::Destination;

/// The nftables table the proxy installs (and removes).
pub const TABLE: &str = "fbdt_proxy";

/// Where a redirected connection was going; `None` for a connection made to the proxy
/// itself (a SOCKS or HTTP client).
pub fn original_destination(tcp: &TcpStream, local: SocketAddr) -> Option<Destination> {
    let sock = socket2::SockRef::from(tcp);
    let dst = match tcp.local_addr().ok()? {
        SocketAddr::V4(_) => sock.original_dst(),
        SocketAddr::V6(_) => sock.original_dst_ipv6(),
    }
    .ok()?
    .as_socket()?;
    let here = tcp.local_addr().ok()?;
    if dst == here || dst == local {
        return None;
    }
    Destination::parse(&dst.to_string()).ok()
}

/// An nft script that redirects this machine's outgoing TCP (and TCP routed through it)
/// to `port`, except to loopback and to the FBDT servers (the paths themselves).
pub fn rules(port: u16, servers: &[IpAddr]) -> String {
    let mut v4: Vec<String> = vec!["127.0.0.0/8".into()];
    let mut v6: Vec<String> = vec!["::1".into()];
    for s in servers {
        match s {
            IpAddr::V4(a) => v4.push(a.to_string()),
            IpAddr::V6(a) => v6.push(a.to_string()),
        }
    }
    v4.dedup();
    v6.dedup();
    let (v4, v6) = (v4.join(", "), v6.join(", "));
    format!(
        "table inet {TABLE} {{
  chain output {{
    type nat hook output priority -100; policy accept;
    ip daddr {{ {v4} }} return
    ip6 daddr {{ {v6} }} return
    meta l4proto tcp redirect to :{port}
  }}
  chain prerouting {{
    type nat hook prerouting priority -100; policy accept;
    fib daddr type local return
    meta l4proto tcp redirect to :{port}
  }}
}}"
    )
}

/// The installed table; removed when dropped (the proxy's exit).
pub struct Installed;

impl Installed {
    pub fn install(script: &str) -> anyhow::Result<Installed> {
        let mut child = Command::new("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .spawn()
            .context("running nft (is nftables installed, are we root?)")?;
        use std::io::Write as _;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(script.as_bytes())
            .context("writing the nft script")?;
        let status = child.wait()?;
        if !status.success() {
            bail!("nft refused the redirect rules ({status})");
        }
        log!("transparent mode: nft table inet {TABLE} installed (removed on exit)");
        Ok(Installed)
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let ok = Command::new("nft")
            .args(["delete", "table", "inet", TABLE])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            log!("transparent mode: could not remove nft table inet {TABLE}; remove it with: nft delete table inet {TABLE}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_rules_spare_loopback_and_the_servers() {
        let r = super::rules(1080, &["10.0.0.1".parse().unwrap(), "fd00::1".parse().unwrap()]);
        assert!(r.contains("ip daddr { 127.0.0.0/8, 10.0.0.1 } return"), "{r}");
        assert!(r.contains("ip6 daddr { ::1, fd00::1 } return"), "{r}");
        assert!(r.contains("redirect to :1080"));
    }
}
