#!/usr/bin/env python3
"""Client and origin for proxy_bench.sh (loopback only).

  proxy_bench.py origin PORT                 serve GET /N: N zero bytes, then close
  proxy_bench.py seq PROXY ORIGIN N ROUNDS   N sequential 1 KiB GETs, direct vs via SOCKS5,
                                             alternating rounds; prints JSON
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


def get(s, n):
    s.sendall(b"GET /%d HTTP/1.1\r\nHost: b\r\n\r\n" % n)
    got = 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += len(b)
    s.close()
    return got


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
        direct, proxied = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(n):
                s = socket.create_connection(origin)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                assert get(s, 1024) > 1024
            direct.append(time.perf_counter() - t)
            t = time.perf_counter()
            for _ in range(n):
                assert get(socks(proxy, origin), 1024) > 1024
            proxied.append(time.perf_counter() - t)
        print(json.dumps({"requests": n, "rounds": rounds, "direct_s": direct, "proxy_s": proxied,
                          "ratio_median": statistics.median(proxied) / statistics.median(direct)}))
    elif mode == "bulk":
        n = int(sys.argv[4])
        t = time.perf_counter()
        got = get(socks(proxy, origin), n)
        dt = time.perf_counter() - t
        assert got > n
        print(json.dumps({"bytes": n, "seconds": dt, "goodput_mbps": n * 8 / dt / 1e6}))


main()
