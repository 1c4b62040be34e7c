#!/usr/bin/env bash
# fio, unmodified, on files of a setcache store through the preload library:
# every engine of {psync, pvsync, sync, splice} x pattern of {read, write, randread,
# randwrite, randrw} x block size of {512, 4k, 64k} x {1, 4, 16} jobs, with
# fio's own verification (crc32c, verify_fatal). Read patterns first lay the
# files down with a verifiable write job. The cache (16 MiB) is smaller than
# the data (4 MiB per job), so pages are evicted and written back meanwhile.
#
#   scripts/fio-preload.sh [--short] [--strace]
#
# --short: block size 4k and 4 jobs only, plus 512 B and 64 KiB with 1 job.
# --strace: run every fio under `strace -f -y` and fail if any read, write or
#           mmap system call reached a placeholder descriptor (the store's
#           directory opened with O_PATH): the library must serve them all.
# Installs fio (and strace) from the distribution's packages if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

short=0
trace=0
for a in "$@"; do
    case $a in
        --short) short=1 ;;
        --strace) trace=1 ;;
        *) echo "usage: $0 [--short] [--strace]" >&2; exit 2 ;;
    esac
done

need() {
    command -v "$1" >/dev/null && return
    apt-get install -y "$1" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$1" >/dev/null; }
}
need fio
[ "$trace" = 1 ] && need strace

# SETCACHE_PRELOAD_LIB names a library built already (CI passes its debug build).
lib=${SETCACHE_PRELOAD_LIB:-}
if [ -z "$lib" ]; then
    cargo build --quiet --release -p setcache-preload
    lib=$PWD/target/release/libsetcache_preload.so
fi
[ -f "$lib" ] || { echo "no library at $lib" >&2; exit 1; }
lib=$(realpath "$lib")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "$short" = 1 ]; then
    combos="4k:4 512:1 64k:1"
else
    combos=""
    for bs in 512 4k 64k; do for j in 1 4 16; do combos="$combos $bs:$j"; done; done
fi

runs=0
failed=0
for engine in psync pvsync sync splice; do
    for pattern in read write randread randwrite randrw; do
        for combo in $combos; do
            bs=${combo%:*}
            jobs=${combo#*:}
            rm -rf "$work"/*
            mkdir -p "$work/dir" "$work/d0" "$work/d1"
            common=(--thread --directory="$work/dir" --ioengine="$engine" --bs="$bs"
                --numjobs="$jobs" --size=4m --verify=crc32c --verify_fatal=1
                --verify_state_save=0
                --filename_format='f.$jobnum' --group_reporting)
            case $pattern in
                read | randread)
                    job=(--name=lay --rw=write --do_verify=0 --name=run --stonewall --rw="$pattern") ;;
                *)
                    job=(--name=run --rw="$pattern") ;;
            esac
            env_args=(-E "SETCACHE_DIR=$work/dir" -E "SETCACHE_DEVICES=$work/d0,$work/d1"
                -E "SETCACHE_CACHE_SIZE=16M" -E "LD_PRELOAD=$lib")
            status=ok
            if [ "$trace" = 1 ]; then
                strace -f -y -qq -o "$work/trace" \
                    -e trace=read,write,pread64,pwrite64,readv,writev,preadv,pwritev,preadv2,pwritev2,mmap,splice,tee \
                    "${env_args[@]}" fio "${common[@]}" "${job[@]}" >"$work/out" 2>&1 || status=failed
                # A placeholder is the store's directory: strace -y shows it as <dir>.
                touched=$(grep -c "<$work/dir>" "$work/trace" || true)
                succeeded=$(grep "<$work/dir>" "$work/trace" | grep -vc '= -1 ' || true)
                if [ "$touched" != 0 ]; then
                    status="failed: $touched calls on a placeholder ($succeeded succeeded)"
                    grep "<$work/dir>" "$work/trace" | head -3 >>"$work/out"
                fi
            else
                env SETCACHE_DIR="$work/dir" SETCACHE_DEVICES="$work/d0,$work/d1" \
                    SETCACHE_CACHE_SIZE=16M LD_PRELOAD="$lib" \
                    fio "${common[@]}" "${job[@]}" >"$work/out" 2>&1 || status=failed
            fi
            if grep -q "verify:\|err= *[1-9]" "$work/out"; then
                status=failed
            fi
            # The data went through the store: every job's file is striped
            # over both devices, and nothing was written into the directory
            # fio was given (a library that served nothing would leave fio's
            # files there, verified all the same).
            local_files=$(find "$work/dir" -mindepth 1 | wc -l)
            for d in d0 d1; do
                for ((k = 0; k < jobs; k++)); do
                    [ -f "$work/$d/f.$k.scf" ] || status="failed: no f.$k on $d"
                done
            done
            if [ "$local_files" != 0 ]; then
                status="failed: $local_files entries in fio's directory itself"
            fi
            runs=$((runs + 1))
            printf '%-7s %-10s bs=%-4s jobs=%-3s %s\n' "$engine" "$pattern" "$bs" "$jobs" "$status"
            if [ "$status" != ok ]; then
                failed=$((failed + 1))
                sed 's/^/    /' "$work/out" | grep -v '^ *$' | head -20
            fi
        done
    done
done
echo "fio through the preload library: $runs runs, $failed failed"
[ "$failed" = 0 ]
