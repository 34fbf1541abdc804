"""A quorum read over Creek's replicas (`creek.bindings.QuorumReader`).

The preliminary view comes from whichever replica answers a weak read
first, the final view from a strong read ordered by a majority. Read 1 is
quiet (the final view confirms the first answer); read 2 races a write
made at another replica, so the first answer may be stale and corrected.
Run it against `creek dev`:

    python clients/python/examples/quorum.py [--addresses 127.0.0.1:7001,...]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import List

import creek
from creek.bindings import QuorumReader


async def main(addresses: List[str]) -> int:
    key = f"headline-{uuid.uuid4().hex[:8]}"
    async with creek.Client(addresses[-1:], timeout=30) as writer, QuorumReader(addresses, timeout=30) as q:
        await writer.kv_put(key, "markets calm", levels=creek.STRONG)
        for round_no, racing in ((1, False), (2, True)):
            change = writer.kv_put(key, "markets rally") if racing else None
            views = [v async for v in q.kv_get(key)]
            if change is not None:
                await change
            print(f"read {round_no}: " + ("racing a write at another replica" if racing else "quiet"))
            for v in views:
                print(f"  {v.kind.value:<12} after {v.latency * 1000:6.2f} ms: {v.value}")
            final = views[-1]
            print(f"  {'confirmed' if final.is_confirmation else 'no preliminary view or corrected'}: "
                  f"{final.value}")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addresses", default="127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.addresses.split(","))))
