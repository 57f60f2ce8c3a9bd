#!/usr/bin/env bash
# HTTP/1.1 page-like fetches on loopback: N files of SIZE bytes over CONNS parallel keep-alive
# connections, direct vs through `fbdt proxy` (SOCKS5) → `fbdt serve` (two paths
# 127.0.0.2/.3 → 127.0.0.1, TLS, token) → the origin, for two origins:
#   split  python's http.server as it is, the testbed's HTTP/1.1 origin (an answer's head
#          and body in two writes, Nagle's algorithm on);
#   one    head and body in one write (isolates what the proxy path itself costs).
# With BEFORE=path/to/older/fbdt a second serve + proxy of that binary is measured too; the
# rounds alternate direct, proxy, before-proxy, per origin, in one session.
# Usage: crates/fbdt/bench/web_bench.sh [ROUNDS] [N] [SIZE] [CONNS] [OUT.json]
#   (defaults 5 60 20000 6 web_bench.json; after cargo build --release -p fbdt; FBDT=… picks
#   the binary; run inside `flock /tmp/fbdt-quiet.lock` on a shared host)
# Also measures the host: one kernel TCP stream over loopback (`fbdt perf --transport tcp`).
set -euo pipefail
out=$(realpath -m "${5:-web_bench.json}")
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
n=${2:-60}
size=${3:-20000}
conns=${4:-6}
fbdt=${FBDT:-./target/release/fbdt}
before=${BEFORE:-}
py=crates/fbdt/bench/web_bench.py
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
wait_for() { for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.1; done; echo "no '$2' in $1" >&2; cat "$1" >&2; exit 1; }

python3 $py files "$dir/www" "$n" "$size"
python3 $py origin "$dir/www" 18681 split & pids+=($!)
python3 $py origin "$dir/www" 18682 one & pids+=($!)
# serve + proxy of binary $1 on ports base (serve: base, base+1; proxy: base+10)
start() {
    local bin=$1 base=$2 tag=$3
    $bin serve --listen 127.0.0.1:$base --listen 127.0.0.1:$((base + 1)) --key-dir "$dir/keys" --token bench-token-loopback \
        --allow 127.0.0.1 2>"$dir/serve-$tag.log" & pids+=($!)
    wait_for "$dir/serve-$tag.log" "listening on"
    local pin
    pin=$(grep -o 'sha256:[0-9a-f]*' "$dir/serve-$tag.log" | head -1)
    $bin proxy --listen 127.0.0.1:$((base + 10)) --path 127.0.0.2=127.0.0.1:$base \
        --path 127.0.0.3=127.0.0.1:$((base + 1)) --pin "$pin" --token bench-token-loopback --control "$dir/ctl-$tag.sock" \
        2>"$dir/proxy-$tag.log" & pids+=($!)
    wait_for "$dir/proxy-$tag.log" "proxy listening"
}
start "$fbdt" 18600 new
kinds="direct proxy"
if [ -n "$before" ]; then start "$before" 18620 before; kinds="direct proxy before"; fi
$fbdt perf --server --plaintext --listen 127.0.0.1:18650 2>"$dir/perf.log" & pids+=($!)
wait_for "$dir/perf.log" "perf server"
host_tcp=$($fbdt perf --plaintext --path 127.0.0.1:18650 --transport tcp --time 2 --json \
    | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["results"][0]["goodput_mbps"]))')
echo "host: one kernel TCP stream over loopback $host_tcp Mbit/s; load $(cat /proc/loadavg)"
load_before=$(cat /proc/loadavg)
: >"$dir/runs"
for r in $(seq "$rounds"); do
    for origin in split one; do
        port=18681; [ $origin = one ] && port=18682
        for kind in $kinds; do
            case $kind in direct) via=-;; proxy) via=127.0.0.1:18610;; before) via=127.0.0.1:18630;; esac
            line=$(python3 $py get 127.0.0.1:$port $via "$n" "$conns")
            echo "{\"round\": $r, \"origin\": \"$origin\", \"kind\": \"$kind\", \"result\": $line}" | tee -a "$dir/runs"
        done
    done
done
load_after=$(cat /proc/loadavg)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
python3 - "$out" "$dir/runs" "$host_tcp" "$load_before" "$load_after" "$commit" "$fbdt" "$before" "$n" "$size" "$conns" <<'PY'
import json, os, socket, statistics, sys, time
out, runs, host, lb, la, commit, binary, before, n, size, conns = sys.argv[1:]
runs = [json.loads(l) for l in open(runs)]
res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": socket.gethostname(),
       "cpus": os.cpu_count(), "host_tcp_loopback_mbps": float(host), "commit": commit,
       "binary": binary, "before": before or None, "files": int(n), "size": int(size),
       "connections": int(conns), "load_before": lb, "load_after": la, "runs": runs, "medians": {}}
for origin in ("split", "one"):
    med = {}
    for kind in {r["kind"] for r in runs}:
        med[kind + "_s"] = statistics.median(r["result"]["total_s"] for r in runs if r["origin"] == origin and r["kind"] == kind)
    for kind in list(med):
        if kind != "direct_s":
            med[kind[:-2] + "_ratio"] = med[kind] / med["direct_s"]
    res["medians"][origin] = med
open(out, "w").write(json.dumps(res, indent=1) + "\n")
for origin, m in res["medians"].items():
    print(origin, " ".join(f"{k} {v:.3f}" for k, v in sorted(m.items())))
print("->", out)
PY
