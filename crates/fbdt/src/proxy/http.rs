//! HTTP proxy requests: `CONNECT host:port` (a tunnel, as browsers and curl use for
//! HTTPS) and absolute-URI requests (`GET http://host/path`, what ffmpeg and mpv send).
//! An absolute-URI request is rewritten to origin form, its hop-by-hop headers dropped
//! and `Connection: close` added, so one proxied connection carries one request.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::wire::Destination;

/// Longest request head accepted (request line and headers).
const MAX_HEAD: usize = 16 * 1024;

/// Headers that concern only the hop to the proxy.
const HOP_BY_HOP: [&str; 4] = ["proxy-connection", "proxy-authorization", "connection", "keep-alive"];

#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// A tunnel; `early` are bytes the client sent after the head already.
    Connect { dest: Destination, early: Vec<u8> },
    /// One request to pass on: the rewritten head, then `early` (the body's start).
    Forward {
        dest: Destination,
        head: Vec<u8>,
        early: Vec<u8>,
    },
}

/// A refusal: the status and reason phrase to answer with, and why (for the log).
#[derive(Debug)]
pub struct Refusal {
    pub code: u16,
    pub reason: &'static str,
    pub why: String,
}

fn bad(why: impl Into<String>) -> Refusal {
    Refusal {
        code: 400,
        reason: "Bad Request",
        why: why.into(),
    }
}

/// Reads and parses a request head. `Err(None)`: the client went away before a whole head
/// (nothing to answer).
pub async fn accept<S: AsyncRead + Unpin>(s: &mut S) -> Result<Request, Option<Refusal>> {
    let mut buf = Vec::with_capacity(2048);
    let end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(Some(Refusal {
                code: 431,
                reason: "Request Header Fields Too Large",
                why: format!("request head over {MAX_HEAD} bytes"),
            }));
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let early = buf.split_off(end);
    parse(&buf, early).map_err(Some)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn parse(head: &[u8], early: Vec<u8>) -> Result<Request, Refusal> {
    let text = std::str::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let parts: Vec<&str> = first.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(bad(format!("request line {first:?}")));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(bad(format!("request line {first:?}")));
    }
    if method == "CONNECT" {
        let dest = Destination::parse(target).map_err(|e| bad(format!("CONNECT target: {e:#}")))?;
        return Ok(Request::Connect { dest, early });
    }
    let rest = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
        .ok_or_else(|| bad(format!("{method} {target:?}: a proxy needs an absolute http:// URI")))?;
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    if authority.contains('@') {
        return Err(bad("user information in the URI"));
    }
    let with_port = if authority.ends_with(']') || !authority.contains(':') {
        format!("{authority}:80")
    } else {
        authority.to_string()
    };
    let dest = Destination::parse(&with_port).map_err(|e| bad(format!("URI host: {e:#}")))?;
    let path = match path {
        "" => "/".to_string(),
        p if p.starts_with('?') => format!("/{p}"),
        p => p.to_string(),
    };
    let mut out = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if !HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Request::Forward {
        dest,
        head: out.into_bytes(),
        early,
    })
}

/// Answers with an error status and a one-line body saying why.
pub async fn respond<S: AsyncWrite + Unpin>(s: &mut S, code: u16, reason: &str, why: &str) {
    let body = format!("fbdt proxy: {why}\n");
    let msg = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(msg.as_bytes()).await;
    let _ = s.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Request, Refusal> {
        parse(s.as_bytes(), b"body".to_vec())
    }

    #[test]
    fn connect_and_absolute_uri_requests() {
        let r = p("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n").unwrap();
        assert_eq!(
            r,
            Request::Connect {
                dest: Destination::parse("example.com:443").unwrap(),
                early: b"body".to_vec()
            }
        );
        let r = p("GET http://Example.com:8080/a/b?c=1 HTTP/1.1\r\nHost: example.com:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nUser-Agent: t\r\n\r\n").unwrap();
        let Request::Forward { dest, head, .. } = r else {
            panic!()
        };
        assert_eq!(dest.to_string(), "example.com:8080");
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "GET /a/b?c=1 HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: t\r\nConnection: close\r\n\r\n"
        );
        let Request::Forward { dest, head, .. } = p("HEAD http://[::1] HTTP/1.0\r\n\r\n").unwrap() else {
            panic!()
        };
        assert_eq!(dest.to_string(), "[::1]:80");
        assert!(head.starts_with(b"HEAD / HTTP/1.0\r\n"));
    }

    #[test]
    fn malformed_requests_are_400() {
        for bad in [
            "GET / HTTP/1.1\r\n\r\n",
            "GET https://x/ HTTP/1.1\r\n\r\n",
            "GET http://u:p@x/ HTTP/1.1\r\n\r\n",
            "CONNECT x HTTP/1.1\r\n\r\n",
            "CONNECT x:0 HTTP/1.1\r\n\r\n",
            "get http://x/ HTTP/1.1\r\n\r\n",
            "GET http://x/ SPDY/3\r\n\r\n",
            "GARBAGE\r\n\r\n",
        ] {
            assert_eq!(p(bad).unwrap_err().code, 400, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn an_endless_head_is_431_and_a_vanished_client_gets_nothing() {
        let long = format!("GET http://x/ HTTP/1.1\r\nX: {}\r\n", "a".repeat(20_000));
        let e = accept(&mut long.as_bytes()).await.unwrap_err().unwrap();
        assert_eq!(e.code, 431);
        assert!(accept(&mut &b"GET http://x/ HT"[..]).await.unwrap_err().is_none());
    }
}
