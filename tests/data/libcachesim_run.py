"""Replays an oracleGeneral trace through libCacheSim's policies (the Python
binding, `pip install libcachesim`) and prints their hit ratios as JSON.

usage: python3 libcachesim_run.py TRACE CACHE_OBJECTS
"""

import json
import sys

import libcachesim as lcs

POLICIES = {
    "lru": lcs.LRU,
    "fifo": lcs.FIFO,
    "lfu": lcs.LFU,
    "arc": lcs.ARC,
    "s3fifo": lcs.S3FIFO,
    "sieve": lcs.Sieve,
    "opt": lcs.Belady,
    "lirs": lcs.LIRS,
    "2q": lcs.TwoQ,
    "clock": lcs.Clock,
    "clockpro": lcs.ClockPro,
    "wtinylfu": lcs.WTinyLFU,
}


def main():
    path, cap = sys.argv[1], int(sys.argv[2])
    out = {}
    for name, cls in POLICIES.items():
        reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
        cache = cls(cap)
        res = cache.process_trace(reader)
        miss = res[0] if isinstance(res, (tuple, list)) else res
        out[name] = 1.0 - float(miss)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
