#!/usr/bin/env bash
# Proxy benchmarks on loopback (two paths 127.0.0.2/.3 → 127.0.0.1, TLS), side by side in
# one run:
#  1. 100 sequential 1 KiB HTTP requests, direct TCP vs through `fbdt proxy` (SOCKS5) and
#     through a second proxy with --early-reply ("proxy2"), and the time to the first
#     answer byte of each (a fresh connection / stream every time);
#  2. bulk download through the proxy vs `fbdt perf` on the same two paths, alternating.
# Usage: crates/fbdt/bench/proxy_bench.sh [ROUNDS] [BULK_BYTES] [OUT.json]
#   (after cargo build --release -p fbdt; FBDT=path/to/fbdt picks another binary)
# Prints the raw lines as it goes and writes the summary (raw figures, medians, ratios,
# load, host, commit) as JSON to OUT.json (default: proxy_bench.json in the current dir).
set -euo pipefail
out=$(realpath -m "${3:-proxy_bench.json}")
cd "$(dirname "$0")/../../.."
rounds=${1:-5}
bulk=${2:-1073741824}
fbdt=${FBDT:-./target/release/fbdt}
py=crates/fbdt/bench/proxy_bench.py
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
wait_for() { for _ in $(seq 100); do grep -q "$2" "$1" 2>/dev/null && return; sleep 0.1; done; echo "no '$2' in $1" >&2; cat "$1" >&2; exit 1; }

load_before=$(cat /proc/loadavg)
echo "load before: $load_before"
python3 $py origin 18181 & pids+=($!)
$fbdt serve --listen 127.0.0.1:18400 --listen 127.0.0.1:18401 --key-dir "$dir/keys" --token bench-token-loopback \
    --allow 127.0.0.1 2>"$dir/serve.log" & pids+=($!); serve_pid=$!
wait_for "$dir/serve.log" "listening on"
pin=$(grep -o 'sha256:[0-9a-f]*' "$dir/serve.log" | head -1)
$fbdt proxy --listen 127.0.0.1:18080 --path 127.0.0.2=127.0.0.1:18400 --path 127.0.0.3=127.0.0.1:18401 \
    --pin "$pin" --token bench-token-loopback --control "$dir/ctl.sock" 2>"$dir/proxy.log" & pids+=($!); proxy_pid=$!
wait_for "$dir/proxy.log" "proxy listening"
# The same with --early-reply (SOCKS/CONNECT answered before the server connected), if this
# binary has it (so that older binaries can be measured with the same script).
proxy2=
if $fbdt proxy --help | grep -q -- --early-reply; then
proxy2=127.0.0.1:18081
$fbdt proxy --listen 127.0.0.1:18081 --path 127.0.0.2=127.0.0.1:18400 --path 127.0.0.3=127.0.0.1:18401 \
    --pin "$pin" --token bench-token-loopback --control "$dir/ctl2.sock" --early-reply 2>"$dir/proxy2.log" & pids+=($!)
wait_for "$dir/proxy2.log" "proxy listening"
fi
$fbdt perf --server --listen 127.0.0.1:18500 --listen 127.0.0.1:18510 --key-dir "$dir/keys" 2>"$dir/perf.log" & pids+=($!); perfd_pid=$!
# CPU seconds (user + system, all threads) a process used so far.
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{printf "%.3f", ($14 + $15) / t}' "/proc/$1/stat"; }
add() { python3 -c 'import sys; print(round(sum(float(x) for x in sys.argv[1:]), 3))' "$@"; }
sleep 0.5

short=$(python3 $py seq 127.0.0.1:18080 127.0.0.1:18181 100 "$rounds" $proxy2)
echo "short: $short"
: >"$dir/bulk_proxy"
: >"$dir/bulk_perf"
# Each bulk line gets "fbdt_cpu_s": CPU seconds the fbdt processes spent on it (proxy +
# serve; perf client + perf server) — a figure the host's other load disturbs less than
# the wall clock does.
for i in $(seq "$rounds"); do
    c0=$(add "$(cpu $proxy_pid)" "$(cpu $serve_pid)")
    r=$(python3 $py bulk 127.0.0.1:18080 127.0.0.1:18181 "$bulk")
    c1=$(add "$(cpu $proxy_pid)" "$(cpu $serve_pid)")
    echo "$r" | python3 -c 'import json,sys; r=json.load(sys.stdin); r["fbdt_cpu_s"]=round(float(sys.argv[2])-float(sys.argv[1]),3); print(json.dumps(r))' "$c0" "$c1" \
        | tee -a "$dir/bulk_proxy" | sed "s/^/bulk proxy run $i: /"
    c0=$(cpu $perfd_pid)
    python3 -c 'import resource,subprocess,sys; o=subprocess.run(sys.argv[1:], capture_output=True, check=True).stdout; r=resource.getrusage(resource.RUSAGE_CHILDREN); sys.stdout.write(o.decode()); print(r.ru_utime + r.ru_stime, file=sys.stderr)' \
        $fbdt perf --path 127.0.0.2=127.0.0.1:18500 --path 127.0.0.3=127.0.0.1:18510 --pin "$pin" --bytes "$bulk" --json \
        >"$dir/perf.json" 2>"$dir/perf.cpu"
    c1=$(cpu $perfd_pid)
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); d=r["duration_s"]; n=int(sys.argv[2]); print(json.dumps({"bytes": n, "seconds": d, "goodput_mbps": n * 8 / d / 1e6, "fbdt_cpu_s": round(float(open(sys.argv[3]).read()) + float(sys.argv[5]) - float(sys.argv[4]), 3)}))' \
        "$dir/perf.json" "$bulk" "$dir/perf.cpu" "$c0" "$c1" | tee -a "$dir/bulk_perf" | sed "s/^/bulk perf run $i: /"
done
load_after=$(cat /proc/loadavg)
echo "load after: $load_after"
# The checkout's commit names the binary only when it is the checkout's own build.
if [ -n "${FBDT:-}" ]; then commit="unknown (FBDT=$FBDT)"; else commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown); fi
python3 - "$out" "$dir" "$short" "$load_before" "$load_after" "$commit" "$fbdt" <<'PY'
import json, socket, statistics, sys, time
out, d, short, lb, la, commit, binary = sys.argv[1:]
proxy = [json.loads(l) for l in open(d + "/bulk_proxy")]
perf = [json.loads(l) for l in open(d + "/bulk_perf")]
mp = statistics.median(r["goodput_mbps"] for r in proxy)
mf = statistics.median(r["goodput_mbps"] for r in perf)
cp = statistics.median(r["fbdt_cpu_s"] for r in proxy)
cf = statistics.median(r["fbdt_cpu_s"] for r in perf)
res = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": socket.gethostname(),
       "cpus": __import__("os").cpu_count(), "commit": commit, "binary": binary,
       "load_before": lb, "load_after": la, "short": json.loads(short),
       "bulk": {"proxy": proxy, "perf": perf, "proxy_median_mbps": mp, "perf_median_mbps": mf,
                "ratio_median": mp / mf, "proxy_cpu_median_s": cp, "perf_cpu_median_s": cf,
                "cpu_ratio_median": cp / cf}}
open(out, "w").write(json.dumps(res, indent=1) + "\n")
sh = res["short"]
early = (f" (early reply {sh['proxy2_ratio_median']:.2f}x, ttfb extra {sh['ttfb_proxy2_extra_median_ms']:.3f} ms)"
         if "proxy2_ratio_median" in sh else "")
print(f"short ratio {sh['proxy_ratio_median']:.2f}x, ttfb extra {sh['ttfb_proxy_extra_median_ms']:.3f} ms{early}; "
      f"bulk {mp:.0f} vs {mf:.0f} Mbit/s = {mp / mf:.2f}x, fbdt CPU {cp:.2f} vs {cf:.2f} s = {cp / cf:.2f}x -> {out}")
PY
