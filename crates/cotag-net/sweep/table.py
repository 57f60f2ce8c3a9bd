#!/usr/bin/env python3
"""Tabulates run.sh's results JSONs and checks the paper's qualitative claims (PASS/MISS).
Usage: table.py [dir] — prints Markdown."""
import glob, json, os, sys

d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/cotag-sweep"
rows = {}
for f in sorted(glob.glob(os.path.join(d, "cotag-corr-*.json"))):
    point = os.path.basename(f)[len("cotag-corr-"):-len(".json")]
    corr, delay, per = point.split("-")
    res = json.load(open(f))["results"]
    rows[(corr, delay[1:], per[3:])] = {r["scheme"]: r for r in res}
if not rows:
    sys.exit(f"no results in {d}")
schemes = list(next(iter(rows.values())).keys())

def cell(r, s):
    """Goodput; * marks a run the emulator's fidelity monitors flagged (out of tolerance)."""
    if s not in r:
        return "-"
    return f"{r[s]['goodput_mbps']:.1f}" + ("*" if r[s].get("faithful") is False else "")
print("| corr | delay ms | PER | " + " | ".join(schemes) + " | COTAG T=1 retrans / failed cohorts / overhead | dual-rr retrans |")
print("|---|---:|---:|" + "---:|" * len(schemes) + "---|---:|")
for (corr, delay, per), r in rows.items():
    c = (r.get("cotag+T=1") or {}).get("cotag") or {}
    dr = (r.get("dual-rr") or {}).get("cotag") or {}
    oh = c.get("coding_overhead")
    print(f"| {corr} | {delay} | {per} | " + " | ".join(cell(r, s) for s in schemes)
          + f" | {c.get('tcp_retransmissions', '-')} / {c.get('cohorts_failed', '-')} / {oh * 100 if oh is not None else float('nan'):.1f}% | {dr.get('tcp_retransmissions', '-')} |")

def g(r, s):
    return r[s]["goodput_mbps"] if s in r else float("nan")

best = lambda r: max(g(r, s) for s in r if s.startswith("cotag"))
print()
wins = [(k, best(r), g(r, "dual-rr")) for k, r in rows.items()]
n = sum(b > x for _, b, x in wins)
print(f"* COTAG (best T) beats dual-rr: {n}/{len(wins)} points — {'PASS' if n == len(wins) else 'MISS'}")
wins = [(k, best(r), g(r, "mptcp")) for k, r in rows.items()]
n = sum(b > x for _, b, x in wins)
print(f"* COTAG (best T) beats kernel MPTCP: {n}/{len(wins)} points — {'PASS' if n == len(wins) else 'MISS'}")
ratio = {}
for corr in ("neg", "zero", "pos"):
    v = [best(r) / g(r, "dual-rr") for k, r in rows.items() if k[0] == corr]
    ratio[corr] = sum(v) / len(v) if v else float("nan")
ok = ratio["neg"] < ratio["zero"] < ratio["pos"]
print(f"* COTAG's gain over dual-rr grows with correlation (mean best-COTAG / dual-rr: neg {ratio['neg']:.2f}, "
      f"zero {ratio['zero']:.2f}, pos {ratio['pos']:.2f}) — {'PASS' if ok else 'MISS'}")
def latency_ratio(pick):
    v = []
    for (corr, delay, per), r in rows.items():
        if delay == "5" and (corr, "1", per) in rows:
            v.append(pick(r) / pick(rows[(corr, "1", per)]))
    return sum(v) / len(v) if v else float("nan")
lc, ld, lm = latency_ratio(best), latency_ratio(lambda r: g(r, "dual-rr")), latency_ratio(lambda r: g(r, "mptcp"))
ok = lc > ld and lc > lm
print(f"* COTAG less affected by latency (mean goodput at 5 ms / at 1 ms: COTAG {lc:.2f}, dual-rr {ld:.2f}, "
      f"MPTCP {lm:.2f}) — {'PASS' if ok else 'MISS'}")
