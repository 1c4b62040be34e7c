#!/usr/bin/env python3
"""SQLite through the preload library beside SQLite on the kernel, with the same
memory: point lookups (uniform and Zipf 0.99) with the database fitting in the
setcache cache and with the database 4x the cache, and commits per second with
synchronous=FULL on one device directory in journal modes PERSIST, DELETE and
TRUNCATE. SQLite's own page cache is 2 MiB in every run; each run first reads
the whole table and index once (SQLBENCH_WARM), then is timed.

The kernel runs in a memory cgroup (v1) whose limit is the setcache cache size
plus the driver's own memory (its peak resident size, measured in a short run
on the kernel: a pread leaves nothing resident). setcache and kernel runs
alternate, the engine that goes first changing every round; the table gives
the medians of --repeat and the median of the per-round ratios (each round's
two runs minutes closer together than the medians' on a disk and a machine
whose speed drifts).

  scripts/sqlite-bench.py --dir /data/sql [--rows 1100000] [--repeat 3] [--runtime 10] [--only PERSIST]

Builds the driver (sqlite/sqlbench.c) and the preload library; installs sqlite3
and libsqlite3-dev from the distribution's packages if missing.
"""
import argparse, os, shutil, statistics, subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "target/release/libsetcache_preload.so")
CG = "/sys/fs/cgroup/memory/setcache-sqlite-bench"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def drop_caches():
    sh(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")


def setcache_env(work, cache):
    return dict(os.environ, SETCACHE_DIR=f"{work}/view", SETCACHE_DEVICES=f"{work}/dev0",
                SETCACHE_CACHE_SIZE=str(cache), LD_PRELOAD=LIB, SQLBENCH_WARM="1")


def rate(out):
    return float(out.split()[-1])


def on_setcache(work, cache, args):
    out = sh([f"{work}/sqlbench"] + args, env=setcache_env(work, cache), capture_output=True, text=True).stdout
    return rate(out)


def on_kernel(work, limit, args):
    drop_caches()
    os.makedirs(CG, exist_ok=True)
    with open(f"{CG}/memory.limit_in_bytes", "w") as f:
        f.write(str(limit))
    cmd = f"echo $$ > {CG}/tasks && exec " + " ".join(f"'{a}'" for a in [f"{work}/sqlbench"] + args)
    out = sh(["sh", "-c", cmd], env=dict(os.environ, SQLBENCH_WARM="1"), capture_output=True, text=True).stdout
    return rate(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--rows", type=int, default=1_100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--runtime", type=float, default=10)
    ap.add_argument("--fit-cache", default=str(1536 << 20), help="bytes: the cache that holds the database")
    ap.add_argument("--only", default="", help="run only the cases whose label holds this text (e.g. PERSIST)")
    a = ap.parse_args()
    if a.rows < 1000 or a.repeat < 1 or a.runtime <= 0:
        raise SystemExit("--rows at least 1000, --repeat at least 1, --runtime above 0")
    for pkg, probe in (("sqlite3", shutil.which("sqlite3")), ("libsqlite3-dev", os.path.exists("/usr/include/sqlite3.h") or None)):
        if not probe:
            if subprocess.run(["apt-get", "install", "-y", pkg], capture_output=True).returncode:
                sh(["apt-get", "update"], capture_output=True)
                sh(["apt-get", "install", "-y", pkg], capture_output=True)
    if not os.path.isdir("/sys/fs/cgroup/memory"):
        raise SystemExit("no memory cgroup (v1) at /sys/fs/cgroup/memory")
    sh(["cargo", "build", "--quiet", "--release", "-p", "setcache-preload"], cwd=ROOT)
    work = os.path.abspath(a.dir)
    for d in ("view", "dev0", "kernel"):
        os.makedirs(f"{work}/{d}", exist_ok=True)
    sh(["cc", "-O2", "-Wall", "-Werror", f"{ROOT}/sqlite/sqlbench.c", "-o", f"{work}/sqlbench", "-lsqlite3", "-lm"])
    sdb, kdb = f"{work}/view/bench.db", f"{work}/kernel/bench.db"
    fit = int(a.fit_cache)
    if not os.path.exists(f"{work}/kernel/bench.db"):
        sh([f"{work}/sqlbench", "load", kdb, str(a.rows)], capture_output=True)
        sh([f"{work}/sqlbench", "load", sdb, str(a.rows)], env=setcache_env(work, 256 << 20), capture_output=True)
    size = os.path.getsize(kdb)
    small = max(size // 4, 16 << 20)
    # The driver's own peak resident size, of this one run (wait4 reports it).
    p = subprocess.Popen([f"{work}/sqlbench", "lookup", kdb, "1", "uniform"], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    if status != 0:
        raise SystemExit("the driver failed on the kernel's database")
    own = usage.ru_maxrss * 1024
    print(f"database {size / 2**20:.0f} MiB ({a.rows} rows); the driver's own memory {own / 2**20:.1f} MiB", flush=True)
    cases = []
    for label, cache in (("fits", fit), ("4x the cache", small)):
        for dist in ("uniform", "zipf"):
            cases.append((f"lookups, {dist}, database {label}", cache, ["lookup", None, str(a.runtime), dist]))
    for mode in ("PERSIST", "DELETE", "TRUNCATE"):
        cases.append((f"commits, journal {mode}", fit, ["commit", None, str(a.runtime), mode]))
    cases = [c for c in cases if a.only in c[0]]
    if not cases:
        raise SystemExit(f"--only {a.only!r} matches no case")
    rows = []
    try:
        for label, cache, args in cases:
            sc, kn = [], []
            for i in range(a.repeat):
                sargs = [args[0], sdb] + args[2:]
                kargs = [args[0], kdb] + args[2:]
                if i % 2 == 0:
                    sc.append(on_setcache(work, cache, sargs))
                    kn.append(on_kernel(work, cache + own, kargs))
                else:
                    kn.append(on_kernel(work, cache + own, kargs))
                    sc.append(on_setcache(work, cache, sargs))
                print(f"  {label} run {i + 1}: setcache {sc[-1]:,.1f}/s, kernel {kn[-1]:,.1f}/s", flush=True)
            pairs = statistics.median(x / y for x, y in zip(sc, kn))
            rows.append((label, cache, statistics.median(sc), statistics.median(kn), pairs))
    finally:
        if os.path.isdir(CG):
            os.rmdir(CG)
    print()
    print("| run | setcache cache (kernel limit: + driver) | setcache per s | kernel per s | x kernel | per round |")
    print("|---|---|---|---|---|---|")
    for label, cache, s, k, pairs in rows:
        print(f"| {label} | {cache / 2**20:.0f} MiB | {s:,.1f} | {k:,.1f} | {s / k:.2f} | {pairs:.2f} |")


if __name__ == "__main__":
    main()
