#!/bin/bash
# Replays the public traces through the real cache and the kernel's page cache
# with equal memory (`setcache bench --trace`), the cache holding 10% of each
# trace's footprint, and prints per trace: the simulator's hit ratio for the
# cache's default policy, the real cache's on one pass with one thread and no
# readahead (the two should agree), and then IOPS, hit ratio and p99 of both
# engines replaying the trace in a loop for RUNTIME seconds, REPEAT rounds in
# turns (the median round of each, and linux / setcache per round, median).
#
#   scripts/trace-replay.sh DIR [THREADS] [RUNTIME] [REPEAT]  # defaults: 1, 10, 3
#
# DIR is a scratch directory for the bench files. Traces come from
# $SETCACHE_TRACES (default ../shared/data/traces), the binary from
# $SETCACHE_BIN (default: target/release/setcache, built if absent).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:?usage: scripts/trace-replay.sh DIR [THREADS] [RUNTIME]}
THREADS=${2:-1}
RUNTIME=${3:-10}
REPEAT=${4:-3}
T=${SETCACHE_TRACES:-../shared/data/traces}
BIN=${SETCACHE_BIN:-target/release/setcache}
[ -d "$T/snia" ] || { echo "no traces in $T (set SETCACHE_TRACES)" >&2; exit 1; }
[ -x "$BIN" ] || cargo build --release --bin setcache
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
field() { # json engine-or-policy field
    python3 -c 'import json,sys
d=json.load(open(sys.argv[1])); rs=d.get("runs") or d.get("results")
r=[r for r in rs if r.get("engine", r.get("policy"))==sys.argv[2]][0]
v=r[sys.argv[3]]
print(v["p99"] if sys.argv[3]=="lat_us" else v)' "$@"
}
printf '%-18s %8s %8s %9s %9s | %10s %7s %8s | %10s %7s %8s %6s\n' trace pages cache \
    sim-hit% real-hit% setcache hit% p99us linux hit% p99us l/s
for spec in "msr:$T/snia/msr-cambridge1-sample.csv" \
    "systor:$T/snia/systor17-traces-sample.csv.gz" \
    "cbs:$T/snia/cloud_storage-sample.bz2" \
    "text:$T/cache2k/web07.trace.gz" \
    "text:$T/cache2k/orm-busy.trace.gz"; do
    name=$(basename "${spec#*:}" | sed 's/\..*//')
    "$BIN" sim --trace "$spec" --policy sa-default --cache-size 10% --set-size 12 \
        --warmup 0 --json "$OUT/sim.json" > "$OUT/sim.log" 2>&1 ||
        { cat "$OUT/sim.log" >&2; exit 1; }
    pages=$(field "$OUT/sim.json" sa-adaptive cache_pages)
    footprint=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["footprint_pages"])' "$OUT/sim.json")
    cache=$((pages * 4096))
    "$BIN" bench --dir "$DIR" --trace "$spec" --trace-passes 1 --cache-size "$cache" \
        --engine setcache --threads 1 --iodepth 1 --readahead off --runtime 600 \
        --no-progress --json "$OUT/once.json" > "$OUT/once.log" 2>&1 ||
        { cat "$OUT/once.log" >&2; exit 1; }
    "$BIN" bench --dir "$DIR" --trace "$spec" --cache-size "$cache" \
        --engine setcache,linux-buffered --threads "$THREADS" --runtime "$RUNTIME" \
        --repeat "$REPEAT" \
        --no-progress --json "$OUT/loop.json" > "$OUT/loop.log" 2>&1 ||
        { cat "$OUT/loop.log" >&2; exit 1; }
    pct() { python3 -c 'import sys; print("%.2f" % (100*float(sys.argv[1])))' "$1"; }
    printf '%-18s %8s %8s %9s %9s | %10.0f %7s %8.1f | %10.0f %7s %8.1f %6.3f\n' "$name" \
        "$footprint" "$pages" \
        "$(pct "$(field "$OUT/sim.json" sa-adaptive hit_ratio)")" \
        "$(pct "$(field "$OUT/once.json" setcache hit_ratio)")" \
        "$(field "$OUT/loop.json" setcache iops)" \
        "$(pct "$(field "$OUT/loop.json" setcache hit_ratio)")" \
        "$(field "$OUT/loop.json" setcache lat_us)" \
        "$(field "$OUT/loop.json" linux-buffered iops)" \
        "$(pct "$(field "$OUT/loop.json" linux-buffered hit_ratio)")" \
        "$(field "$OUT/loop.json" linux-buffered lat_us)" \
        "$(field "$OUT/loop.json" linux-buffered vs_first_engine)"
done
