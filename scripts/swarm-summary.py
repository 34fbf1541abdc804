#!/usr/bin/env python3
"""Summarise swarm logs (creek sim --seeds output): seeds, ops checked,
faults injected by type, failures. Usage: swarm-summary.py LOG..."""
import json
import re
import sys

seeds = ops = failed = 0
faults = {}
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"seed (\d+): (ok|FAIL)\s+ops=(\d+) faults=(\{.*\}) hash=", line)
        if not m:
            continue
        seeds += 1
        ops += int(m.group(3))
        failed += m.group(2) == "FAIL"
        for k, v in json.loads(m.group(4)).items():
            faults[k] = faults.get(k, 0) + v
print(json.dumps({"seeds": seeds, "failed": failed, "ops_checked": ops, "faults": dict(sorted(faults.items()))}))
