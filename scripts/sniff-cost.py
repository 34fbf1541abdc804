#!/usr/bin/env python3
"""CPU a replica spends on client connections that send a byte and stop.

Usage: scripts/sniff-cost.py PORT PID [CONNECTIONS]

PORT is a replica's client port, PID its process. Measures the process's
CPU time (user + system, from /proc) over 5 s idle, then over 5 s with
CONNECTIONS (default 200) connections open that each sent one byte — fewer
than the 4 a connection's protocol is told by — and prints both as a share
of one core. CPU time, not wall time, so other load on the machine does not
inflate it.
"""
import os
import socket
import sys
import time


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share(pid, seconds=5.0):
    before = cpu_s(pid)
    time.sleep(seconds)
    return (cpu_s(pid) - before) / seconds


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    idle = share(pid)
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.send(b"C")
        socks.append(s)
    busy = share(pid)
    for s in socks:
        s.close()
    print(f'{{"connections": {n}, "idle_core_share": {idle:.3f}, "one_byte_core_share": {busy:.3f}}}')


main()
