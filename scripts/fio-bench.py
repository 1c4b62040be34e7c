#!/usr/bin/env python3
"""fio, 4 KiB random reads with the psync engine, through the preload library
beside the kernel, in three cases (medians of alternating runs, one call):

  hit100  8 jobs, a 512 MiB file read whole once first, a 1 GiB setcache
          cache; the kernel's page cache held to the same memory.
  hot90   8 jobs, a 4 GiB file, 90% of reads on its first 4% (164 MiB), a
          256 MiB cache; warmed for 10 s first; the kernel held the same.
  miss0   16 jobs, an 8 GiB file, a 64 MiB cache (under 1% hits); the kernel
          run reads with O_DIRECT.

The kernel runs in a memory cgroup (v1) whose limit is the setcache cache
size plus fio's own memory (its peak resident size in a direct-I/O run, which
holds no page cache). Page caches are dropped before every kernel run; every
setcache run is a new process with a cold cache. The runs alternate, and the
engine that goes first changes every round, so a disk whose speed drifts
favours neither; the table gives the medians and the median of the per-round
ratios. In miss0 the kernel reads the store's own backing file (past
its 4 KiB header), so both engines read the same blocks of the disk; the other
cases read a file of their own through the page cache.

  scripts/fio-bench.py --dir /data/fio [--repeat 5] [--runtime 10] [--cases hit100,hot90,miss0]

Installs fio from the distribution's packages if missing; builds the preload
library. Prints a table (and --json FILE writes the runs).
"""
import argparse, json, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "target/release/libsetcache_preload.so")
CG = "/sys/fs/cgroup/memory/setcache-fio-bench"

CASES = {
    "hit100": dict(size="512m", cache=1 << 30, jobs=8, dist=None, warm="read", direct=False),
    "hot90": dict(size="4g", cache=256 << 20, jobs=8, dist="zoned:90/4:10/96", warm="time", direct=False),
    "miss0": dict(size="8g", cache=64 << 20, jobs=16, dist=None, warm=None, direct=True),
}
# Where data begins in a backing file of the store (its header's size).
HEADER_BYTES = 4096


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def fio_args(path, c, runtime, direct, offset=0):
    common = ["--thread", f"--filename={path}", f"--size={c['size']}", "--ioengine=psync",
              "--output-format=json", "--percentile_list=50:99:99.9"]
    if offset:
        common.append(f"--offset={offset}")
    warm = []
    if c["warm"] == "read":
        warm = ["--name=warm", "--rw=read", "--bs=1m"]
    elif c["warm"] == "time":
        warm = ["--name=warm", "--rw=randread", "--bs=4k", f"--numjobs={c['jobs']}",
                f"--random_distribution={c['dist']}", "--time_based", "--runtime=10"]
    run = ["--name=run", "--rw=randread", "--bs=4k", f"--numjobs={c['jobs']}", "--time_based",
           f"--runtime={runtime}", "--group_reporting"]
    if warm:
        run.insert(1, "--stonewall")
    if c["dist"]:
        run.append(f"--random_distribution={c['dist']}")
    if direct:
        run.append("--direct=1")
    # fio applies options given before the first --name to every job.
    return ["fio"] + common + warm + run


def result(out):
    doc = json.loads(out[out.index("{"):])
    for j in doc["jobs"]:
        if j["jobname"] == "run":
            if j["error"]:
                raise SystemExit(f"fio reported error {j['error']}")
            r = j["read"]
            return r["iops"], r["clat_ns"]["percentile"]["99.900000"] / 1000.0
    raise SystemExit("no 'run' job in fio's output")


def setcache_run(work, c, runtime):
    env = dict(os.environ, SETCACHE_DIR=f"{work}/store", SETCACHE_DEVICES=f"{work}/dev0",
               SETCACHE_CACHE_SIZE=str(c["cache"]), LD_PRELOAD=LIB)
    out = sh(fio_args(f"{work}/store/data", c, runtime, False), env=env,
             capture_output=True, text=True).stdout
    return result(out)


def cgroup(limit):
    os.makedirs(CG, exist_ok=True)
    with open(f"{CG}/memory.limit_in_bytes", "w") as f:
        f.write(str(limit))


def kernel_run(work, c, runtime, limit):
    sh(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    cgroup(limit)
    if c["direct"]:
        # The same blocks setcache reads: its backing file on the one device.
        args = fio_args(f"{work}/dev0/data.scf", c, runtime, True, HEADER_BYTES)
    else:
        args = fio_args(f"{work}/kernel/data", c, runtime, False)
    enter = f"echo $$ > {CG}/tasks && exec " + " ".join(f"'{a}'" for a in args)
    out = sh(["sh", "-c", enter], capture_output=True, text=True).stdout
    return result(out)


def fio_memory(work):
    """Peak resident bytes of fio with 16 jobs and O_DIRECT (no page cache)."""
    c = dict(CASES["miss0"], size="64m")
    # The probe's own peak (wait4), not the largest of every child so far
    # (cargo and apt-get run before it).
    p = subprocess.Popen(fio_args(f"{work}/kernel/probe", c, 2, True),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    os.unlink(f"{work}/kernel/probe")
    if p.returncode:
        raise SystemExit(f"fio's memory probe failed (exit {p.returncode})")
    return usage.ru_maxrss * 1024


def lay(work, c):
    """The file, once per case, through each engine."""
    for d in ("store", "dev0", "kernel"):
        os.makedirs(f"{work}/{d}", exist_ok=True)
    for old in os.listdir(f"{work}/kernel"):
        os.unlink(f"{work}/kernel/{old}")
    shutil.rmtree(f"{work}/dev0")
    os.makedirs(f"{work}/dev0")
    lay_args = ["fio", "--thread", "--name=lay", "--rw=write", "--bs=1m", "--ioengine=psync",
                f"--size={c['size']}"]
    if not c["direct"]:
        sh(lay_args + [f"--filename={work}/kernel/data"], capture_output=True)
    env = dict(os.environ, SETCACHE_DIR=f"{work}/store", SETCACHE_DEVICES=f"{work}/dev0",
               SETCACHE_CACHE_SIZE="64M", LD_PRELOAD=LIB)
    sh(lay_args + [f"--filename={work}/store/data"], env=env, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runtime", type=int, default=10)
    ap.add_argument("--cases", default="hit100,hot90,miss0")
    ap.add_argument("--json")
    a = ap.parse_args()
    cases = a.cases.split(",")
    for name in cases:
        if name not in CASES:
            raise SystemExit(f"unknown case {name!r}: one of {', '.join(CASES)}")
    if a.repeat < 1 or a.runtime < 1:
        raise SystemExit("--repeat and --runtime must be at least 1")
    if shutil.which("fio") is None:
        if subprocess.run(["apt-get", "install", "-y", "fio"], capture_output=True).returncode:
            sh(["apt-get", "update"], capture_output=True)
            sh(["apt-get", "install", "-y", "fio"], capture_output=True)
    sh(["cargo", "build", "--quiet", "--release", "-p", "setcache-preload"], cwd=ROOT)
    if not os.path.isdir("/sys/fs/cgroup/memory"):
        raise SystemExit("no memory cgroup (v1) at /sys/fs/cgroup/memory")
    work = os.path.abspath(a.dir)
    os.makedirs(f"{work}/kernel", exist_ok=True)
    own = fio_memory(work)
    print(f"fio's own memory (peak resident, 16 jobs, O_DIRECT): {own / 2**20:.1f} MiB")
    runs = {}
    try:
        for name in cases:
            c = CASES[name]
            lay(work, c)
            limit = c["cache"] + own
            rs = {"setcache": [], "kernel": []}
            for i in range(a.repeat):
                order = ["setcache", "kernel"] if i % 2 == 0 else ["kernel", "setcache"]
                for engine in order:
                    if engine == "setcache":
                        rs["setcache"].append(setcache_run(work, c, a.runtime))
                    else:
                        rs["kernel"].append(kernel_run(work, c, a.runtime, limit))
                print(f"  {name} run {i + 1}: setcache {rs['setcache'][-1][0]:,.0f} IOPS p99.9 "
                      f"{rs['setcache'][-1][1]:.1f} us; kernel {rs['kernel'][-1][0]:,.0f} IOPS "
                      f"p99.9 {rs['kernel'][-1][1]:.1f} us", flush=True)
            runs[name] = dict(rs, limit=limit, cache=c["cache"])
    finally:
        if os.path.isdir(CG):
            os.rmdir(CG)
    print()
    print("| case | setcache IOPS | kernel IOPS | x kernel | per round | setcache p99.9 | kernel p99.9 | p99.9 x kernel |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in runs.items():
        si = statistics.median(x[0] for x in r["setcache"])
        ki = statistics.median(x[0] for x in r["kernel"])
        sp = statistics.median(x[1] for x in r["setcache"])
        kp = statistics.median(x[1] for x in r["kernel"])
        pairs = statistics.median(x[0] / y[0] for x, y in zip(r["setcache"], r["kernel"]))
        kind = "O_DIRECT" if CASES[name]["direct"] else "page cache"
        print(f"| {name} | {si:,.0f} | {ki:,.0f} ({kind}) | {si / ki:.2f} | {pairs:.2f} | {sp:.1f} us | {kp:.1f} us | {sp / kp:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
