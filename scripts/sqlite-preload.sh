#!/usr/bin/env bash
# SQLite, unmodified, on files of a setcache store through the preload library:
# a database of a table with an integer key and a text payload (about 1 KiB a
# row) and an index; point lookups (uniform and Zipf 0.99) and one-row update
# transactions with synchronous=FULL in journal modes DELETE, TRUNCATE and
# PERSIST, by compiled drivers (sqlite/sqlbench.c) using prepared statements;
# PRAGMA integrity_check by the sqlite3 shell; WAL refused with a clear error
# (its -shm file is mapped into memory, which the library refuses), the
# database it left in WAL mode brought back, and WAL in exclusive locking mode
# (no -shm file) working; and a
# crash loop: a writer committing numbered transactions killed with SIGKILL at
# random moments, the database checked (integrity, and every transaction the
# writer saw committed) after each kill, and the writer started again.
#
#   scripts/sqlite-preload.sh [--short]
#
# Full: 1.1 million rows (a 1.5 GB database), 100 kills. --short: 20,000
# rows, 20 kills. Installs sqlite3 and libsqlite3-dev from the distribution's
# packages if missing; SETCACHE_PRELOAD_LIB names a library built already.
set -euo pipefail
cd "$(dirname "$0")/.."

rows=1100000
kills=100
if [ "${1:-}" = --short ]; then
    rows=20000
    kills=20
elif [ -n "${1:-}" ]; then
    echo "usage: $0 [--short]" >&2
    exit 2
fi

install() {
    apt-get install -y "$@" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$@" >/dev/null; }
}
command -v sqlite3 >/dev/null || install sqlite3
[ -f /usr/include/sqlite3.h ] || install libsqlite3-dev

lib=${SETCACHE_PRELOAD_LIB:-}
if [ -z "$lib" ]; then
    cargo build --quiet --release -p setcache-preload
    lib=target/release/libsetcache_preload.so
fi
lib=$(realpath "$lib")
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/view" "$work/dev0" "$work/dev1"
cc -O2 -Wall -Werror sqlite/sqlbench.c -o "$work/sqlbench" -lsqlite3 -lm

export SETCACHE_DIR=$work/view SETCACHE_DEVICES=$work/dev0,$work/dev1 SETCACHE_CACHE_SIZE=256M
# The library goes only into the programs under test (not this shell's tools).
on_store() {
    LD_PRELOAD=$lib "$@"
}
db=$work/view/bench.db
bench=$work/sqlbench

echo "loading $rows rows"
on_store "$bench" load "$db" "$rows"
on_store ls -l "$work/view"
for dist in uniform zipf; do
    echo "lookups, $dist: $(on_store "$bench" lookup "$db" 3 "$dist")"
done
for mode in DELETE TRUNCATE PERSIST; do
    echo "commits, journal $mode: $(on_store "$bench" commit "$db" 3 "$mode")"
done
check=$(on_store sqlite3 "$db" "PRAGMA integrity_check")
echo "integrity_check: $check"
[ "$check" = ok ]

# WAL: refused, with the mapping's error and the library's message.
wal=$(on_store "$bench" wal "$work/view/wal.db" 2>"$work/wal.err")
echo "$wal"
grep -q "extended 5386" <<<"$wal" || { echo "WAL was not refused with SQLITE_IOERR_SHMMAP" >&2; exit 1; }
grep -q "mmap of a file in SETCACHE_DIR" "$work/wal.err" || { echo "no message for the refused mapping" >&2; exit 1; }
# The database that refusal left in WAL mode is not lost: in exclusive locking
# mode (its WAL index in the process's memory, no mapping) it opens, and goes
# back to a rollback journal; after that it opens as any other.
back=$(on_store sqlite3 "$work/view/wal.db" "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=DELETE; PRAGMA integrity_check;" | tr '\n' ' ')
echo "the WAL database back to a rollback journal: $back"
[ "$back" = "exclusive delete ok " ] || { echo "the WAL database did not come back: $back" >&2; exit 1; }
again=$(on_store sqlite3 "$work/view/wal.db" "PRAGMA journal_mode; PRAGMA integrity_check;" | tr '\n' ' ')
[ "$again" = "delete ok " ] || { echo "the WAL database after it came back: $again" >&2; exit 1; }
# And WAL mode itself works in exclusive locking mode, across opens.
walx=$work/view/walx.db
on_store sqlite3 "$walx" "PRAGMA locking_mode=EXCLUSIVE; PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES(1),(2),(3);" >/dev/null
ex=$(on_store sqlite3 "$walx" "PRAGMA locking_mode=EXCLUSIVE; INSERT INTO t VALUES(4); SELECT count(*) FROM t; PRAGMA journal_mode; PRAGMA integrity_check;" | tr '\n' ' ')
echo "WAL in exclusive locking mode: $ex"
[ "$ex" = "exclusive 4 wal ok " ] || { echo "WAL in exclusive locking mode failed: $ex" >&2; exit 1; }

# The crash loop, over the three journal modes in turn.
crashdb=$work/view/crash.db
log=$work/committed.log
modes=(DELETE TRUNCATE PERSIST)
for ((i = 1; i <= kills; i++)); do
    mode=${modes[$((i % 3))]}
    # Started directly (no subshell in between): $! is the writer itself.
    SQLBENCH_JOURNAL=$mode LD_PRELOAD=$lib "$bench" crash-write "$crashdb" "$log" &
    pid=$!
    sleep "0.$(printf '%03d' $((RANDOM % 400 + 50)))"
    # The writer must still be running when it is killed: one that had
    # died (say, on an I/O error) would make the check below vacuous.
    if ! kill -9 "$pid" 2>/dev/null; then
        rc=0
        wait "$pid" || rc=$?
        echo "kill $i (journal $mode): the writer had ended by itself (status $rc)" >&2
        exit 1
    fi
    wait "$pid" 2>/dev/null || true
    if ! out=$(on_store "$bench" crash-check "$crashdb" "$log" 2>&1); then
        echo "kill $i (journal $mode): $out" >&2
        exit 1
    fi
    last=$out
done
echo "crash loop: $kills kills, $last"
# The writers committed between the kills: at least one confirmed
# transaction a kill on average.
confirmed=$(sed -n 's/.*the log confirmed \([0-9]*\)).*/\1/p' <<<"$last")
[ "${confirmed:-0}" -ge "$kills" ] || { echo "only ${confirmed:-0} transactions confirmed over $kills kills" >&2; exit 1; }
