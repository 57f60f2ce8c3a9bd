#!/usr/bin/env python3
"""Client and origin for proxy_bench.sh (loopback only).

  proxy_bench.py origin PORT                 serve GET /N: N zero bytes, then close
  proxy_bench.py seq PROXY ORIGIN N ROUNDS [PROXY2]
                                             N sequential 1 KiB GETs, direct vs via SOCKS5
                                             (and via PROXY2), alternating rounds; prints
                                             JSON: totals, medians, ratios, time to the
                                             first answer byte of each fresh connection
  proxy_bench.py bulk PROXY ORIGIN BYTES     one GET of BYTES via SOCKS5; prints JSON
"""
import json, socket, socketserver, statistics, sys, time

CHUNK = memoryview(bytes(1 << 20))


class Origin(socketserver.BaseRequestHandler):
    def handle(self):
        s, head = self.request, b""
        while b"\r\n\r\n" not in head:
            b = s.recv(4096)
            if not b:
                return
            head += b
        n = int(head.split(b" ")[1].strip(b"/") or 0)
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n)
        while n > 0:
            k = min(n, len(CHUNK))
            s.sendall(CHUNK[:k])
            n -= k


def socks(proxy, origin):
    s = socket.create_connection(proxy)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x05\x01\x00")
    assert s.recv(2) == b"\x05\x00"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(origin[0]) + origin[1].to_bytes(2, "big"))
    r = b""
    while len(r) < 10:
        r += s.recv(10 - len(r))
    assert r[1] == 0, f"SOCKS reply {r[1]}"
    return s


BUF = bytearray(1 << 20)


def get(s, n, t0=None):
    """Sends GET /n, reads the answer to its end; returns (bytes, seconds from t0 to the
    first answer byte)."""
    s.sendall(b"GET /%d HTTP/1.1\r\nHost: b\r\n\r\n" % n)
    got, first = 0, None
    view = memoryview(BUF)
    while True:
        k = s.recv_into(view)
        if not k:
            break
        if first is None and t0 is not None:
            first = time.perf_counter() - t0
        got += k
    s.close()
    return got, first


def addr(text):
    h, p = text.rsplit(":", 1)
    return h, int(p)


def main():
    mode = sys.argv[1]
    if mode == "origin":
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[2])), Origin).serve_forever()
    proxy, origin = addr(sys.argv[2]), addr(sys.argv[3])
    if mode == "seq":
        n, rounds = int(sys.argv[4]), int(sys.argv[5])
        proxies = {"proxy": proxy}
        if len(sys.argv) > 6:
            proxies["proxy2"] = addr(sys.argv[6])
        total = {k: [] for k in ["direct", *proxies]}
        ttfb = {k: [] for k in total}

        def one(kind):
            t0 = time.perf_counter()
            if kind == "direct":
                s = socket.create_connection(origin)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            else:
                s = socks(proxies[kind], origin)
            got, first = get(s, 1024, t0)
            assert got > 1024
            ttfb[kind].append(first)

        for _ in range(rounds):
            for kind in total:
                t = time.perf_counter()
                for _ in range(n):
                    one(kind)
                total[kind].append(time.perf_counter() - t)
        res = {"requests": n, "rounds": rounds}
        md = statistics.median(ttfb["direct"])
        for kind in total:
            res[kind + "_s"] = total[kind]
            res["ttfb_" + kind + "_median_ms"] = statistics.median(ttfb[kind]) * 1e3
            if kind != "direct":
                res[kind + "_ratio_median"] = statistics.median(total[kind]) / statistics.median(total["direct"])
                res["ttfb_" + kind + "_extra_median_ms"] = (statistics.median(ttfb[kind]) - md) * 1e3
        print(json.dumps(res))
    elif mode == "bulk":
        n = int(sys.argv[4])
        t = time.perf_counter()
        got, _ = get(socks(proxy, origin), n)
        dt = time.perf_counter() - t
        assert got > n
        print(json.dumps({"bytes": n, "seconds": dt, "goodput_mbps": n * 8 / dt / 1e6}))


if __name__ == "__main__":
    main()
