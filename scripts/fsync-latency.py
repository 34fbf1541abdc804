#!/usr/bin/env python3
"""fdatasync latency of this machine's disk, alone and with 2 and 3
processes syncing at once (a 3-replica cluster on one machine does that):
each process overwrites 100 bytes of a 1 MiB preallocated file and syncs,
2,000 times, in the system's temporary directory. Prints one JSON line per
process count with each process's p50 and p99 in microseconds.

    scripts/fsync-latency.py [--syncs N]
"""
import argparse
import json
import multiprocessing as mp
import os
import tempfile
import time


def run(i, n, q):
    fd, path = tempfile.mkstemp(prefix=f"fsync-latency-{i}-")
    try:
        os.write(fd, b"\0" * (1 << 20))
        os.fsync(fd)
        lat = []
        for k in range(n):
            os.pwrite(fd, b"x" * 100, (k * 4096) % (1 << 20))
            t = time.perf_counter()
            os.fdatasync(fd)
            lat.append(time.perf_counter() - t)
        lat.sort()
        q.put((round(lat[len(lat) // 2] * 1e6), round(lat[int(len(lat) * 0.99)] * 1e6)))
    finally:
        os.close(fd)
        os.unlink(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=2000)
    args = ap.parse_args()
    for procs in (1, 2, 3):
        q = mp.Queue()
        ps = [mp.Process(target=run, args=(i, args.syncs, q)) for i in range(procs)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        got = [q.get() for _ in ps]
        print(json.dumps({"processes": procs, "p50_us": [g[0] for g in got], "p99_us": [g[1] for g in got]}))


if __name__ == "__main__":
    main()
