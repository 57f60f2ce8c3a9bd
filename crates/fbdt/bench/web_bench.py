#!/usr/bin/env python3
"""Origin and client for web_bench.sh (loopback only): parallel HTTP/1.1 keep-alive fetches.

  web_bench.py files DIR N SIZE              write N files f0..f{N-1} of SIZE random bytes
  web_bench.py origin DIR PORT split|one     serve DIR over HTTP/1.1 with persistent
                                             connections; `split`: python's http.server
                                             as it is (the testbed's HTTP/1.1 origin: head
                                             and body in two writes, Nagle on); `one`: head
                                             and body in one write (as servers that cork)
  web_bench.py get ORIGIN PROXY|- N CONNS    N GETs of f0..f{N-1} over CONNS keep-alive
                                             connections in parallel (each takes the next
                                             file when its answer is in), direct (`-`) or
                                             through PROXY (SOCKS5); TCP_NODELAY as browsers
                                             set it. Prints JSON: total seconds, per-request
                                             median and max (ms)
"""
import functools, http.server, json, os, queue, socket, sys, threading, time

from proxy_bench import socks  # the SOCKS5 handshake (TCP_NODELAY set)


class OneWrite(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        with open(os.path.join(self.directory, self.path.lstrip("/")), "rb") as f:
            data = f.read()
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data)


def origin(d, port, kind):
    base = OneWrite if kind == "one" else http.server.SimpleHTTPRequestHandler
    base.protocol_version = "HTTP/1.1"
    base.log_message = lambda *a: None
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(base, directory=d)).serve_forever()


def connect(origin, proxy):
    if proxy:
        return socks(proxy, origin)
    s = socket.create_connection(origin)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def fetch(s, path, buf):
    s.sendall(b"GET /%s HTTP/1.1\r\nHost: o\r\n\r\n" % path.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        k = s.recv(65536)
        assert k, "closed inside a head"
        head += k
    h, body = head.split(b"\r\n\r\n", 1)
    n = int(next(l.split(b":")[1] for l in h.split(b"\r\n") if l.lower().startswith(b"content-length")))
    got = len(body)
    while got < n:
        k = s.recv_into(buf)
        assert k, "closed inside a body"
        got += k


def get(origin, proxy, n, conns):
    q = queue.Queue()
    for i in range(n):
        q.put("f%d" % i)
    socks = [connect(origin, proxy) for _ in range(conns)]
    times = []

    def worker(s):
        buf = bytearray(1 << 20)
        while True:
            try:
                p = q.get_nowait()
            except queue.Empty:
                return
            t = time.perf_counter()
            fetch(s, p, buf)
            times.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    th = [threading.Thread(target=worker, args=(s,)) for s in socks]
    for t in th:
        t.start()
    for t in th:
        t.join()
    total = time.perf_counter() - t0
    for s in socks:
        s.close()
    times.sort()
    return {"total_s": total, "req_median_ms": times[len(times) // 2] * 1e3, "req_max_ms": times[-1] * 1e3}


def addr(text):
    h, p = text.rsplit(":", 1)
    return h, int(p)


def main():
    mode = sys.argv[1]
    if mode == "files":
        d, n, size = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        os.makedirs(d, exist_ok=True)
        for i in range(n):
            with open(os.path.join(d, "f%d" % i), "wb") as f:
                f.write(os.urandom(size))
    elif mode == "origin":
        origin(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif mode == "get":
        proxy = None if sys.argv[3] == "-" else addr(sys.argv[3])
        print(json.dumps(get(addr(sys.argv[2]), proxy, int(sys.argv[4]), int(sys.argv[5]))))


main()
