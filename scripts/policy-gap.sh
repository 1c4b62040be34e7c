#!/bin/bash
# The gap, in points of whole-trace hit ratio, between set-associative
# policies (12-page sets) and the best global policy other than Belady's, on
# the public traces: LIRS traces and the SNIA samples (MSR, SYSTOR, Tencent
# CBS) at 10/25/50% of their footprint, cache2k traces at 1/5/10%. A '*' marks
# a gap beyond the target (1 point on cache2k and SNIA; 3 on LIRS; 5 on loop
# and scan at 50%).
#
#   scripts/policy-gap.sh [SA_POLICIES]    # default: sa-adaptive,sa-lirs,sa-gclock
#
# With SETCACHE_GAP_YCSB=1 it also runs the YCSB generator (39 M requests, a
# few minutes) at 1/5/10%.
#
# Traces come from $SETCACHE_TRACES (default ../shared/data/traces), the
# binary from $SETCACHE_BIN (default: target/release/setcache, built if absent).
set -euo pipefail
cd "$(dirname "$0")/.."
SA=${1:-sa-adaptive,sa-lirs,sa-gclock}
T=${SETCACHE_TRACES:-../shared/data/traces}
BIN=${SETCACHE_BIN:-target/release/setcache}
[ -d "$T/lirs" ] || { echo "no traces in $T (set SETCACHE_TRACES)" >&2; exit 1; }
[ -x "$BIN" ] || cargo build --release --bin setcache
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() { # name spec sizes
    "$BIN" sim --trace "$2" --policy "global,$SA" --cache-size "$3" --warmup 0 \
        --set-size 12 --json "$OUT/$1.json" > "$OUT/$1.log" 2>&1 ||
        { cat "$OUT/$1.log" >&2; exit 1; }
}
for f in "$T"/lirs/*.trace.gz; do
    run "lirs-$(basename "$f" .trace.gz)" "text:$f" 10%,25%,50%
done
for f in "$T"/cache2k/*.trace.gz; do
    run "cache2k-$(basename "$f" .trace.gz)" "text:$f" 1%,5%,10%
done
run snia-msr "msr:$T/snia/msr-cambridge1-sample.csv" 10%,25%,50%
run snia-systor "systor:$T/snia/systor17-traces-sample.csv.gz" 10%,25%,50%
run snia-cbs "cbs:$T/snia/cloud_storage-sample.bz2" 10%,25%,50%
if [ "${SETCACHE_GAP_YCSB:-0}" = 1 ]; then
    run gen-ycsb "ycsb:records=30000000,ops=30000000" 1%,5%,10%
fi
python3 - "$OUT" "$SA" <<'PY'
import json, glob, os, sys
out, sa = sys.argv[1], sys.argv[2].split(',')
# `sa-default` runs the cache's default policy, which the results name by itself.
sa = ['sa-adaptive' if p == 'sa-default' else p for p in sa]
fails = {p: 0 for p in sa}
print(f"{'trace':18} {'pages':>6} {'best global':>18} " + " ".join(f"{p:>12}" for p in sa))
for f in sorted(glob.glob(out + '/*.json')):
    name = os.path.basename(f)[:-5]
    by = {}
    for r in json.load(open(f))['results']:
        by.setdefault(r['cache_pages'], {})[r['policy']] = 100 * r['hit_ratio_full']
    largest = max(by)
    for pages, rs in sorted(by.items()):
        glob_ = {k: v for k, v in rs.items() if not k.startswith('sa-') and k != 'opt'}
        best = max(glob_, key=glob_.get)
        short = name.split('-', 1)[1]
        limit = 3.0 if name.startswith('lirs-') else 1.0
        if short in ('loop', 'scan') and pages == largest:
            limit = 5.0
        cells = []
        for p in sa:
            gap = rs[p] - glob_[best]
            bad = gap < -limit
            fails[p] += bad
            cells.append(f"{gap:+11.2f}{'*' if bad else ' '}")
        print(f"{name:18} {pages:6} {best:>10} {glob_[best]:6.2f}% " + " ".join(cells))
print("rows beyond target: " + ", ".join(f"{p} {n}" for p, n in fails.items()))
PY
