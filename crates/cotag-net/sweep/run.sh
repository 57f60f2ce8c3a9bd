#!/usr/bin/env bash
# The COTAG sweep on the emulated testbed: correlation × PER × latency, each with COTAG at
# several T, dual-rr, one AP alone, kernel MPTCP and FBDT (`fbdt-lab run --backend emu`,
# one kernel TCP bulk flow per scheme). Writes one results JSON per point into $OUT.
# Usage (root): run.sh [fbdt-lab binary] — env OUT, SCALE, DURATION, SCHEMES override.
set -euo pipefail
LAB=${1:-target/release/fbdt-lab}
OUT=${OUT:-/tmp/cotag-sweep}
SCALE=${SCALE:-0.1}
DURATION=${DURATION:-6}
SCHEMES=${SCHEMES:-cotag+T=0.5,cotag+T=1,cotag+T=2,dual-rr,tcp:ap1,mptcp,fbdt}
HERE=$(cd "$(dirname "$0")" && pwd)
SCEN=$HERE/../../../scenarios
mkdir -p "$OUT"
for corr in pos zero neg; do
  for delay in 1 5; do
    for per in 0 0.005; do
      name=cotag-corr-$corr-d$delay-per$per
      # The built-in scenario with this path delay and loss (both paths).
      sed -e "s/^delay_ms = .*/delay_ms = $delay/" -e "s/^queue_packets = \(.*\)/queue_packets = \1\nloss = $per/" \
        "$SCEN/cotag-corr-$corr.toml" > "$OUT/$name.toml"
      [ -s "$OUT/$name.json" ] && continue
      "$LAB" run "$OUT/$name.toml" --backend emu --schemes "$SCHEMES" --duration "$DURATION" \
        --scale "$SCALE" --json "$OUT/$name.json" > "$OUT/$name.log" 2>&1 || echo "FAILED: $name (see $OUT/$name.log)"
      cat /proc/loadavg >> "$OUT/$name.log"
    done
  done
done
