#!/usr/bin/env python3
"""What one durable commit costs this machine's disk, by the shape of the write.

    scripts/disk-commit-shapes.py [--dir DIR] [--commits N] [--rounds R]

Times N commits of each shape (pwrite calls then one fdatasync) in a
16 MiB file under DIR (default: the system's temporary directory, which
should be on the disk Creek's data directory uses):

- append, fallocated: one 4 KiB block after the last, into space reserved
  with posix_fallocate and never written (the file system must mark the
  extent written, a metadata change, at each fdatasync);
- append, pre-zeroed: the same into space written with zeros once
  beforehand (the fdatasync flushes data only);
- B-tree commit: a 320-byte header at offset 0 and ten 4 KiB pages at
  random offsets of a pre-zeroed file, about what one of redb's group
  commits writes (docs/bench/cluster.md, "What an op costs the replicas").

Prints one JSON line per shape and round: p50 and p99 latency and the CPU
time of the process per commit, in microseconds. Run it on an idle
machine: fdatasync latency moves with other load on the disk.
"""

import argparse
import json
import os
import random
import tempfile
import time

BLOCK = 4096
FILE_BLOCKS = 4096  # 16 MiB
PAGES_PER_BTREE_COMMIT = 10


def open_file(directory, prezero):
    fd, path = tempfile.mkstemp(dir=directory, prefix="creek-disk-")
    os.unlink(path)
    os.posix_fallocate(fd, 0, FILE_BLOCKS * BLOCK)
    if prezero:
        zeros = bytes(1 << 20)
        for off in range(0, FILE_BLOCKS * BLOCK, len(zeros)):
            os.pwrite(fd, zeros, off)
    os.fsync(fd)
    return fd


def measure(fd, commits, write):
    latencies, cpu = [], 0.0
    for i in range(commits):
        t, c = time.perf_counter(), time.process_time()
        write(fd, i)
        os.fdatasync(fd)
        latencies.append(time.perf_counter() - t)
        cpu += time.process_time() - c
    latencies.sort()
    return {
        "p50_us": round(latencies[len(latencies) // 2] * 1e6),
        "p99_us": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6),
        "cpu_us": round(cpu / commits * 1e6),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--commits", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if not 1 <= args.commits < FILE_BLOCKS:
        ap.error(f"--commits must be between 1 and {FILE_BLOCKS - 1}")
    block = b"x" * BLOCK
    rng = random.Random(1)

    def append(fd, i):
        os.pwrite(fd, block, (i + 1) * BLOCK)

    def btree(fd, _):
        os.pwrite(fd, block[:320], 0)
        for _ in range(PAGES_PER_BTREE_COMMIT):
            os.pwrite(fd, block, rng.randrange(1, FILE_BLOCKS) * BLOCK)

    shapes = [
        ("append, fallocated", False, append),
        ("append, pre-zeroed", True, append),
        ("B-tree commit (header + 10 pages)", True, btree),
    ]
    for r in range(args.rounds):
        for name, prezero, write in shapes:
            fd = open_file(args.dir, prezero)
            try:
                result = measure(fd, args.commits, write)
            finally:
                os.close(fd)
            print(json.dumps({"shape": name, "round": r + 1, **result}), flush=True)


if __name__ == "__main__":
    main()
