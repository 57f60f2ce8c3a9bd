//! `fbdt serve --allow`: which destinations a stream may reach. Rules are `public` (every
//! globally routable address), a CIDR or address, or a host name (`*.example.com` for its
//! subdomains), each optionally with `:PORT`. Without any `--allow` the list is `public`:
//! private, loopback, link-local, CGNAT, multicast and reserved ranges are refused unless
//! a rule names them. Names are resolved here, at the server, and every address they
//! resolve to is checked — a listed name is trusted with whatever it resolves to, an
//! unlisted one only with public addresses (so a name cannot smuggle a stream to 127.0.0.1).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;

use crate::proxy::wire::{Destination, Status};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    Public,
    Net(IpNet, Option<u16>),
    /// A lower-case name; a leading `*.` matches every subdomain (not the name itself).
    Name(String, Option<u16>),
}

impl FromStr for Rule {
    type Err = String;
    fn from_str(s: &str) -> Result<Rule, String> {
        if s == "public" {
            return Ok(Rule::Public);
        }
        let bad = |why: &str| {
            format!("--allow {s:?}: {why} (want public, CIDR, ADDRESS or HOST, each with an optional :PORT)")
        };
        // A port follows the last ':' only where that colon cannot be part of an IPv6
        // address: after a bracket, or in a text with exactly one colon.
        let (body, port) = if let Some(rest) = s.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or_else(|| bad("no closing ]"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("text after ]")),
            };
            (inner, port)
        } else if s.matches(':').count() == 1 {
            let (b, p) = s.split_once(':').expect("one colon");
            (b, Some(p))
        } else {
            (s, None)
        };
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ => return Err(bad("bad port")),
            },
        };
        if let Ok(net) = body.parse::<IpNet>() {
            return Ok(Rule::Net(net.trunc(), port));
        }
        if let Ok(ip) = body.parse::<IpAddr>() {
            return Ok(Rule::Net(IpNet::from(ip), port));
        }
        let name = body.strip_prefix("*.").unwrap_or(body);
        let valid = !name.is_empty()
            && name.len() <= 253
            && name.split('.').all(|l| {
                !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            })
            && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if !valid {
            return Err(bad("not an address, a network or a host name"));
        }
        Ok(Rule::Name(body.to_ascii_lowercase(), port))
    }
}

fn port_ok(rule: Option<u16>, port: u16) -> bool {
    rule.is_none_or(|p| p == port)
}

#[derive(Clone, Debug)]
pub struct AllowList {
    rules: Vec<Rule>,
}

impl AllowList {
    /// The list of `rules`; none means `public`.
    pub fn new(rules: Vec<Rule>) -> AllowList {
        let rules = if rules.is_empty() { vec![Rule::Public] } else { rules };
        AllowList { rules }
    }

    fn name_listed(&self, host: &str, port: u16) -> bool {
        self.rules.iter().any(|r| match r {
            Rule::Name(n, p) => {
                let hit = match n.strip_prefix("*.") {
                    Some(suffix) => host.strip_suffix(suffix).is_some_and(|h| h.ends_with('.')),
                    None => host == n,
                };
                hit && port_ok(*p, port)
            }
            _ => false,
        })
    }

    pub fn addr_allowed(&self, ip: IpAddr, port: u16) -> bool {
        let ip = ip.to_canonical();
        self.rules.iter().any(|r| match r {
            Rule::Public => is_public(ip),
            Rule::Net(net, p) => net.contains(&ip) && port_ok(*p, port),
            Rule::Name(..) => false,
        })
    }

    /// The addresses a stream to `dest` may connect to, or why none.
    pub async fn resolve(&self, dest: &Destination) -> Result<Vec<SocketAddr>, (Status, String)> {
        if let Ok(ip) = dest.host.parse::<IpAddr>() {
            return if self.addr_allowed(ip, dest.port) {
                Ok(vec![SocketAddr::new(ip, dest.port)])
            } else {
                Err((Status::NotAllowed, format!("{dest} is outside the allow-list")))
            };
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((dest.host.as_str(), dest.port))
            .await
            .map_err(|e| (Status::HostUnreachable, format!("{} does not resolve: {e}", dest.host)))?
            .collect();
        if addrs.is_empty() {
            return Err((Status::HostUnreachable, format!("{} resolves to no address", dest.host)));
        }
        if self.name_listed(&dest.host, dest.port) {
            return Ok(addrs);
        }
        let allowed: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(|a| self.addr_allowed(a.ip(), a.port()))
            .collect();
        if allowed.is_empty() {
            let shown: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
            return Err((
                Status::NotAllowed,
                format!("{dest} resolves to {} (outside the allow-list)", shown.join(", ")),
            ));
        }
        Ok(allowed)
    }
}

/// A globally routable unicast address: not private, loopback, link-local, CGNAT,
/// documentation, benchmarking, multicast, broadcast or otherwise reserved.
pub fn is_public(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(a) => is_public_v4(a),
        IpAddr::V6(a) => is_public_v6(a),
    }
}

fn is_public_v4(a: Ipv4Addr) -> bool {
    let o = a.octets();
    !(a.is_private()
        || a.is_loopback()
        || a.is_link_local()
        || a.is_unspecified()
        || a.is_broadcast()
        || a.is_multicast()
        || a.is_documentation()
        || o[0] == 0
        || o[0] >= 240
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || (o[0] == 192 && o[1] == 0 && o[2] == 0)
        || (o[0] == 198 && (o[1] & 0xfe) == 18))
}

fn is_public_v6(a: Ipv6Addr) -> bool {
    let s = a.segments();
    // Only global unicast (2000::/3) is routable; within it, documentation and the
    // NAT64/6to4/Teredo ranges that embed an IPv4 address are refused too.
    (s[0] & 0xe000) == 0x2000
        && !(s[0] == 0x2001 && s[1] == 0x0db8)
        && !(s[0] == 0x2001 && s[1] == 0)
        && s[0] != 0x2002
        && !(s[0] == 0x0064 && s[1] == 0xff9b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(rules: &[&str]) -> AllowList {
        AllowList::new(rules.iter().map(|r| r.parse().unwrap()).collect())
    }

    #[test]
    fn the_default_allows_public_addresses_only() {
        let l = list(&[]);
        for ip in ["8.8.8.8", "2606:4700::1111"] {
            assert!(l.addr_allowed(ip.parse().unwrap(), 443), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::",
            "2001:db8::1",
        ] {
            assert!(!l.addr_allowed(ip.parse().unwrap(), 80), "{ip} allowed by default");
        }
    }

    #[test]
    fn listed_networks_ports_and_names() {
        let l = list(&[
            "127.0.0.1:8080",
            "10.0.0.0/8",
            "[::1]:22",
            "intranet.example",
            "*.corp.example:443",
        ]);
        assert!(l.addr_allowed("127.0.0.1".parse().unwrap(), 8080));
        assert!(!l.addr_allowed("127.0.0.1".parse().unwrap(), 8081));
        assert!(l.addr_allowed("10.9.9.9".parse().unwrap(), 1));
        assert!(l.addr_allowed("::ffff:10.0.0.1".parse().unwrap(), 1));
        assert!(l.addr_allowed("::1".parse().unwrap(), 22));
        assert!(
            !l.addr_allowed("8.8.8.8".parse().unwrap(), 443),
            "public is not in an explicit list"
        );
        assert!(l.name_listed("intranet.example", 5));
        assert!(l.name_listed("a.b.corp.example", 443));
        assert!(!l.name_listed("corp.example", 443));
        assert!(!l.name_listed("evilcorp.example", 443));
        assert!(!l.name_listed("x.corp.example", 80));
    }

    #[test]
    fn bad_rules_are_refused_with_the_rule_named() {
        for bad in [
            "",
            "10.0.0.0/33",
            "host:0",
            "host:x",
            "[::1",
            "[::1]x",
            "a..b",
            "1.2.3.4.5",
        ] {
            let e = bad.parse::<Rule>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[tokio::test]
    async fn names_are_checked_by_every_address_they_resolve_to() {
        let dest = Destination::parse("localhost:80").unwrap();
        let e = list(&[]).resolve(&dest).await.unwrap_err();
        assert_eq!(e.0, Status::NotAllowed, "{}", e.1);
        let ok = list(&["localhost:80"]).resolve(&dest).await.unwrap();
        assert!(ok.iter().all(|a| a.ip().is_loopback()));
        let ok = list(&["127.0.0.0/8"]).resolve(&dest).await.unwrap();
        assert!(ok.iter().all(|a| a.ip() == IpAddr::from([127, 0, 0, 1])));
        let e = list(&[])
            .resolve(&Destination::parse("10.0.0.1:80").unwrap())
            .await
            .unwrap_err();
        assert_eq!(e.0, Status::NotAllowed);
    }
}
