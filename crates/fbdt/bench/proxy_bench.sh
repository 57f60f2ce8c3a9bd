#!/usr/bin/env bash
# Proxy benchmarks on loopback (two paths 127.0.0.2/.3 → 127.0.0.1, TLS), side by side in
# one run:
#  1. 100 sequential 1 KiB HTTP requests, direct TCP vs through `fbdt proxy` (SOCKS5);
#  2. bulk download through the proxy vs `fbdt perf` on the same two paths.
# Usage: crates/fbdt/bench/proxy_bench.sh [ROUNDS] [BULK_BYTES]   (after cargo build --release -p fbdt)
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
bulk=${2:-1073741824}
fbdt=./target/release/fbdt
py=crates/fbdt/bench/proxy_bench.py
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
wait_for() { for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.1; done; echo "no '$2' in $1" >&2; cat "$1" >&2; exit 1; }

echo "load before: $(cat /proc/loadavg)"
python3 $py origin 18181 & pids+=($!)
$fbdt serve --listen 127.0.0.1:18400 --listen 127.0.0.1:18401 --key-dir "$dir/keys" --token bench \
    --allow 127.0.0.1 2>"$dir/serve.log" & pids+=($!)
wait_for "$dir/serve.log" "listening on"
pin=$(grep -o 'sha256:[0-9a-f]*' "$dir/serve.log" | head -1)
$fbdt proxy --listen 127.0.0.1:18080 --path 127.0.0.2=127.0.0.1:18400 --path 127.0.0.3=127.0.0.1:18401 \
    --pin "$pin" --token bench --control "$dir/ctl.sock" 2>"$dir/proxy.log" & pids+=($!)
wait_for "$dir/proxy.log" "proxy listening"
$fbdt perf --server --listen 127.0.0.1:18500 --listen 127.0.0.1:18510 --key-dir "$dir/keys" 2>"$dir/perf.log" & pids+=($!)
sleep 0.5

echo "short: $(python3 $py seq 127.0.0.1:18080 127.0.0.1:18181 100 "$rounds")"
for i in $(seq "$rounds"); do
    echo "bulk proxy run $i: $(python3 $py bulk 127.0.0.1:18080 127.0.0.1:18181 "$bulk")"
    echo "bulk perf run $i: $($fbdt perf --path 127.0.0.2=127.0.0.1:18500 --path 127.0.0.3=127.0.0.1:18510 \
        --pin "$pin" --bytes "$bulk" --json | python3 -c 'import json,sys; r=json.load(sys.stdin); d=r["duration_s"]; print(json.dumps({"bytes": int(sys.argv[1]), "seconds": d, "goodput_mbps": int(sys.argv[1]) * 8 / d / 1e6}))' "$bulk")"
done
echo "load after: $(cat /proc/loadavg)"
