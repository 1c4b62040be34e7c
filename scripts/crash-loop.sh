#!/usr/bin/env bash
# The two SIGKILL loops' long forms on the checkout's own file system (O_DIRECT,
# real fsyncs): metadata operations, then writes through the page cache. Each
# prints one line of figures. SETCACHE_KILL_CYCLES sets the cycles of each
# (1000 unless set); CARGO may name another cargo command.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
export SETCACHE_KILL_CYCLES=${SETCACHE_KILL_CYCLES:-1000}
run() {
    local test=$1 entry=$2 out
    out=$($cargo test --release --test "$test" -- --ignored --exact --nocapture "$entry" 2>&1) || {
        printf '%s\n' "$out" >&2
        echo "$test: FAILED" >&2
        exit 1
    }
    printf '%s\n' "$out" | grep -E '^(kill loop|data kill loop):'
    printf '%s\n' "$out" | grep -E '^test result:'
}
echo "cycles per loop: $SETCACHE_KILL_CYCLES"
run kill_metadata metadata_operations_survive_sigkill_on_disk
run kill_data cached_writes_survive_sigkill_on_disk
