#!/usr/bin/env python3
"""O_DIRECT sequential reads of 2 MiB, one at a time, into a buffer of huge pages
(physically contiguous) and into one of 4 KiB pages, 1 GiB each, twice.

    scripts/direct-contiguity.py FILE

On a virtual disk whose throughput depends on the number of scatter-gather segments
per request, the first is much faster: the kernel's buffered reads (large folios)
get it, reads into scattered 4 KiB cache frames do not. FILE must hold 4 GiB.
"""
import ctypes
import mmap
import os
import sys
import time

CHUNK = 2 << 20


def rate(path, huge, start, total=1 << 30):
    m = mmap.mmap(-1, CHUNK * 2, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    off = (-addr) % CHUNK
    buf = memoryview(m)[off:off + CHUNK]
    buf[:] = b"\0" * CHUNK  # fault the pages in before timing
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    t0, done, pos = time.time(), 0, start
    while done < total:
        got = os.preadv(fd, [buf], pos)
        if got <= 0:
            break
        done += got
        pos += got
    secs = time.time() - t0
    os.close(fd)
    buf.release()
    return done / secs / 1e6


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    for i in range(2):
        print(f"huge pages: {rate(path, True, 4096 + 2 * i * (1 << 30)):6.0f} MB/s", flush=True)
        print(f"4 KiB pages: {rate(path, False, 4096 + (2 * i + 1) * (1 << 30)):6.0f} MB/s", flush=True)


if __name__ == "__main__":
    main()
