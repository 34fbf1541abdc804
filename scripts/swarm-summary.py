#!/usr/bin/env python3
"""Summarise swarm logs: seeds, ops checked, faults injected by type,
failures, and (from --json logs) the longest settling time after the faults
healed against its liveness bound. Reads both `creek sim --seeds` line
output and `--json` output (one object per line). Usage:
swarm-summary.py LOG..."""
import json
import re
import sys

seeds = ops = failed = 0
faults = {}
settle_max = {}  # links -> (settled_after_ms, bound_ms, workload, seed)
failures = []
for path in sys.argv[1:]:
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            seeds += 1
            ops += r["ops"]["total"]
            ok = r["checks"]["ok"]
            failed += not ok
            if not ok:
                failures.append(f'{r["workload"]} {r.get("links", "lan")} seed {r["seed"]}')
            for k, v in r.get("faults", {}).items():
                faults[k] = faults.get(k, 0) + v
            t = r.get("settled_after_ms")
            if t is not None:
                links = r.get("links", "lan")
                if links not in settle_max or t > settle_max[links][0]:
                    settle_max[links] = (t, r["liveness_bound_ms"], r["workload"], r["seed"])
            continue
        m = re.match(r"seed (\d+): (ok|FAIL)\s+ops=(\d+) faults=(\{.*\}) hash=", line)
        if not m:
            continue
        seeds += 1
        ops += int(m.group(3))
        failed += m.group(2) == "FAIL"
        if m.group(2) == "FAIL":
            failures.append(f"{path} seed {m.group(1)}")
        for k, v in json.loads(m.group(4)).items():
            faults[k] = faults.get(k, 0) + v
out = {"seeds": seeds, "failed": failed, "ops_checked": ops, "faults": dict(sorted(faults.items()))}
if settle_max:
    out["longest_settle_ms"] = {
        links: {"settled_after_ms": t, "bound_ms": b, "workload": w, "seed": s}
        for links, (t, b, w, s) in sorted(settle_max.items())
    }
if failures:
    out["failures"] = failures[:50]
print(json.dumps(out))
