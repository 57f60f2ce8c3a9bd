//! `fbdt proxy --auto-paths SERVER:PORT`: one path per network interface that can reach the
//! server, each bound to its interface (SO_BINDTODEVICE), found again whenever the kernel
//! says a link, an address or a route changed.
//!
//! A netlink socket subscribed to the link, address and route groups wakes the watcher; its
//! messages are not parsed, only taken as "look again" (after a short settle, as one change
//! comes as a burst of messages). Looking again lists the interfaces with `getifaddrs` and
//! reads the kernel's routes from /proc, so what decides is always the current state, never
//! a message that may have been dropped (a full socket buffer is one more "look again").
//! Without netlink (a sandbox that refuses the socket) the interfaces are listed every
//! second instead. An interface qualifies when it is up with a carrier, is not
//! loopback and not `--exclude`d, has an address of the server's family, and the main
//! routing table has a route to the server through it (a default route or a prefix that
//! covers the server).

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use std::sync::Arc;
use std::time::Duration;

use fbdt_net::{LocalBind, PathSpec};
use netlink_sys::protocols::NETLINK_ROUTE;
use netlink_sys::{AsyncSocket, AsyncSocketExt, SocketAddr as NetlinkAddr, TokioSocket};

use super::upstream::Upstream;

/// How often the interfaces are listed when netlink is not available.
const POLL: Duration = Duration::from_secs(1);
/// With netlink: how often they are listed anyway (retired sessions pruned, a failed
/// switch retried).
const IDLE_RESCAN: Duration = Duration::from_secs(5);
/// After a netlink message, how long to wait for the rest of its burst (a new link brings
/// its address and routes within milliseconds).
const SETTLE: Duration = Duration::from_millis(50);
/// After a failed switch, the next try waits this long (unless the set changes again).
const RETRY: Duration = Duration::from_secs(5);

/// "eth0, wlan0" for log lines.
pub fn describe(paths: &[PathSpec]) -> String {
    let names: Vec<String> = paths
        .iter()
        .map(|p| match &p.local {
            Some(LocalBind::Iface(i)) => i.clone(),
            Some(LocalBind::Addr(a)) => a.to_string(),
            None => "default".into(),
        })
        .collect();
    names.join(", ")
}

/// Lists the interfaces whenever they may have changed; when the set that qualifies changes
/// (and is not empty), new streams go over a session on the new set. Streams open on the
/// old session stay on it: its paths over vanished interfaces go down and the rest carry
/// them.
pub async fn follow(server: SocketAddr, exclude: Vec<String>, mut current: Vec<PathSpec>, up: Arc<Upstream>) {
    let mut failed: Option<(Vec<PathSpec>, tokio::time::Instant)> = None;
    let mut changes = Changes::open();
    loop {
        changes.next().await;
        up.prune_retired();
        let now = paths(server, &exclude);
        if now == current || now.is_empty() {
            continue;
        }
        if failed.as_ref().is_some_and(|(p, at)| *p == now && at.elapsed() < RETRY) {
            continue;
        }
        log!(
            "auto paths: interfaces now {} (were {})",
            describe(&now),
            describe(&current)
        );
        match up.switch_paths(now.clone()).await {
            Ok(()) => {
                current = now;
                failed = None;
            }
            Err(e) => {
                log!(
                    "auto paths: a session over {} failed: {e:#}; keeping the old one",
                    describe(&now)
                );
                failed = Some((now, tokio::time::Instant::now()));
            }
        }
    }
}

/// Wakes the watcher when the kernel's links, addresses or routes may have changed.
enum Changes {
    Netlink(TokioSocket),
    Polling,
}

impl Changes {
    fn open() -> Self {
        match subscribe() {
            Ok(s) => {
                log!("auto paths: following link, address and route changes (netlink)");
                Changes::Netlink(s)
            }
            Err(e) => {
                log!("auto paths: no netlink socket ({e}); listing interfaces every second");
                Changes::Polling
            }
        }
    }

    /// Returns after a change (and its settle time) or after the idle rescan interval.
    async fn next(&mut self) {
        let Changes::Netlink(socket) = self else {
            tokio::time::sleep(POLL).await;
            return;
        };
        tokio::select! {
            got = socket.recv_from_full() => {
                if let Err(e) = got {
                    // ENOBUFS: messages were lost, which is one more reason to look again.
                    if e.raw_os_error() != Some(libc::ENOBUFS) {
                        log!("auto paths: netlink: {e}; listing interfaces every second");
                        *self = Changes::Polling;
                        return;
                    }
                }
                // Swallow the rest of the burst so it does not wake us again.
                let settle = tokio::time::sleep(SETTLE);
                tokio::pin!(settle);
                loop {
                    tokio::select! {
                        _ = &mut settle => break,
                        _ = socket.recv_from_full() => {}
                    }
                }
            }
            _ = tokio::time::sleep(IDLE_RESCAN) => {}
        }
    }
}

fn subscribe() -> std::io::Result<TokioSocket> {
    let groups = libc::RTMGRP_LINK
        | libc::RTMGRP_IPV4_IFADDR
        | libc::RTMGRP_IPV6_IFADDR
        | libc::RTMGRP_IPV4_ROUTE
        | libc::RTMGRP_IPV6_ROUTE;
    let mut socket = TokioSocket::new(NETLINK_ROUTE)?;
    socket.socket_mut().bind(&NetlinkAddr::new(0, groups as u32))?;
    Ok(socket)
}

/// The paths for the interfaces that qualify now, in name order.
pub fn paths(server: SocketAddr, exclude: &[String]) -> Vec<PathSpec> {
    let routes = match server.ip() {
        IpAddr::V4(_) => std::fs::read_to_string("/proc/net/route").unwrap_or_default(),
        IpAddr::V6(_) => std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default(),
    };
    interfaces(server.ip())
        .into_iter()
        .filter(|i| !exclude.contains(i) && routes_through(&routes, i, server.ip()))
        .map(|i| PathSpec {
            local: Some(LocalBind::Iface(i)),
            remote: server,
        })
        .collect()
}

/// Names of the interfaces that are up with a carrier, not loopback, with an address of
/// `family`'s kind (IPv6: not link-local).
fn interfaces(family: IpAddr) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let flags = ifa.ifa_flags;
        let wanted = libc::IFF_UP as u32 | libc::IFF_RUNNING as u32;
        if flags & wanted != wanted || flags & libc::IFF_LOOPBACK as u32 != 0 || ifa.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        let fam = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let fits = match family {
            IpAddr::V4(_) => fam == libc::AF_INET,
            IpAddr::V6(_) if fam == libc::AF_INET6 => {
                // SAFETY: the family is AF_INET6, so this is a sockaddr_in6.
                let a = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
                (ip.segments()[0] & 0xffc0) != 0xfe80
            }
            IpAddr::V6(_) => false,
        };
        if fits {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) };
            out.insert(name.to_string_lossy().into_owned());
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// True if `table` (the text of /proc/net/route or /proc/net/ipv6_route) has an up route
/// through `iface` whose prefix covers `server`.
pub fn routes_through(table: &str, iface: &str, server: IpAddr) -> bool {
    const RTF_UP: u32 = 0x1;
    match server {
        IpAddr::V4(s) => table.lines().skip(1).any(|l| {
            // Iface Destination Gateway Flags RefCnt Use Metric Mask ... (hex, host order)
            let f: Vec<&str> = l.split_whitespace().collect();
            let hex = |i: usize| f.get(i).and_then(|x| u32::from_str_radix(x, 16).ok());
            let (Some(dest), Some(flags), Some(mask)) = (hex(1), hex(3), hex(7)) else {
                return false;
            };
            // /proc prints the addresses as the u32 the kernel holds (network order in
            // memory), so compare as bytes.
            let (dest, mask) = (Ipv4Addr::from(dest.to_le_bytes()), Ipv4Addr::from(mask.to_le_bytes()));
            f[0] == iface && flags & RTF_UP != 0 && (u32::from(s) & u32::from(mask)) == u32::from(dest)
        }),
        IpAddr::V6(s) => table.lines().any(|l| {
            // dest(32 hex) dest_len src src_len next_hop metric refcnt use flags iface
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 || f[9] != iface {
                return false;
            }
            let (Ok(dest), Ok(len), Ok(flags)) = (
                u128::from_str_radix(f[0], 16),
                u32::from_str_radix(f[1], 16),
                u32::from_str_radix(f[8], 16),
            ) else {
                return false;
            };
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - len.min(128)) };
            flags & RTF_UP != 0 && (u128::from(s) & mask) == dest & mask
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
wlan0\t0002000A\t00000000\t0001\t0\t0\t600\t00FFFFFF\t0\t0\t0
wwan0\t0000000B\t00000000\t0000\t0\t0\t600\t000000FF\t0\t0\t0
";

    #[test]
    fn ipv4_routes_are_matched_by_interface_and_prefix() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // eth0 has the default route: every server.
        assert!(routes_through(V4, "eth0", ip("203.0.113.7")));
        // wlan0 reaches 10.0.2.0/24 only.
        assert!(routes_through(V4, "wlan0", ip("10.0.2.9")));
        assert!(!routes_through(V4, "wlan0", ip("10.0.3.9")));
        // wwan0's route to 11.0.0.0/8 is not up.
        assert!(!routes_through(V4, "wwan0", ip("11.1.1.1")));
        assert!(!routes_through(V4, "eth1", ip("203.0.113.7")));
    }

    #[test]
    fn ipv6_routes_are_matched_by_interface_and_prefix() {
        let table = "\
20010db8000000000000000000000000 20 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000001 00000000 00000003    wlan0
";
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(routes_through(table, "eth0", ip("2001:db8::1")));
        assert!(!routes_through(table, "eth0", ip("2001:db9::1")));
        assert!(routes_through(table, "wlan0", ip("2001:db9::1")));
    }

    #[test]
    fn garbage_tables_match_nothing() {
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(!routes_through("", "eth0", ip));
        assert!(!routes_through("header\neth0 zz", "eth0", ip));
    }
}
