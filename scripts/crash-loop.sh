#!/usr/bin/env bash
# The long forms of the crash loops: the two SIGKILL loops on the checkout's own
# file system (O_DIRECT, real fsyncs), metadata operations then writes through
# the page cache, and the power-cut loop over simulated media. Each prints one
# line of figures. SETCACHE_KILL_CYCLES sets the cycles of each SIGKILL loop and
# SETCACHE_POWER_CUTS the power cuts (1000 unless set); CARGO may name another
# cargo command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
export SETCACHE_KILL_CYCLES=${SETCACHE_KILL_CYCLES:-1000}
export SETCACHE_POWER_CUTS=${SETCACHE_POWER_CUTS:-1000}
run() {
    local test=$1 entry=$2 out
    out=$($cargo test --release --test "$test" -- --include-ignored --exact --nocapture "$entry" 2>&1) || {
        printf '%s\n' "$out" >&2
        echo "$test: FAILED" >&2
        exit 1
    }
    printf '%s\n' "$out" | grep -E '^(kill loop|data kill loop|power cut loop):'
    printf '%s\n' "$out" | grep -E '^test result:'
}
echo "cycles per kill loop: $SETCACHE_KILL_CYCLES; power cuts: $SETCACHE_POWER_CUTS"
run kill_metadata metadata_operations_survive_sigkill_on_disk
run kill_data cached_writes_survive_sigkill_on_disk
run fault_matrix power_cut
