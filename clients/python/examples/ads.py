"""An ad server that speculates: Correctables Listing 4 (§4.2).

A user's personalized ad references live under one key; each ad's content
under its own. `fetch_ads_by_user_id` reads the references with both views
and speculates: `get_ads` fetches and post-processes the ads on the
preliminary view, while the final view is still on its way. If the final
view confirms the references, the ads are delivered as soon as both are
ready; otherwise `abort` undoes the speculation and `get_ads` reruns on the
final view.

Round 1 reads quietly (the speculation should hold). Round 2 changes the
user's interests at another replica at the same moment as the read, which
may make the preliminary view stale (then the speculation is redone).
Run it against `creek dev`:

    python clients/python/examples/ads.py [--addresses 127.0.0.1:7001,...]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import List

import creek

ADS = {
    "a1": "Cheap flights to Lisbon",
    "a2": "Running shoes, 30% off",
    "a3": "Learn Rust in a weekend",
    "a4": "Fresh coffee beans, delivered",
}


async def main(addresses: List[str]) -> int:
    tag = uuid.uuid4().hex[:8]
    near = creek.Client(addresses, timeout=30)
    other = creek.Client(addresses[1:] + addresses[:1], timeout=30)
    try:
        await asyncio.gather(*(near.kv_put(f"ad:{tag}:{k}", v, levels=creek.STRONG) for k, v in ADS.items()))
        user = f"user:{tag}:42"
        await near.kv_put(user, "a1,a2", levels=creek.STRONG)

        async def get_ads(refs_view: creek.View) -> List[str]:
            """Fetch and post-process the ads a view of the references names."""
            refs = refs_view.value.decode().split(",") if refs_view.value else []
            # Ad contents never change: weak reads are enough.
            contents = await asyncio.gather(*(near.invoke_weak("kv.get", f"ad:{tag}:{r}") for r in refs))
            return [f"[{r}] {c.value.decode().upper()}" for r, c in zip(refs, contents)]

        def fetch_ads_by_user_id(uid: str, deliver, undo) -> creek.Correctable:
            """Listing 4: invoke(...).speculate(getAds).setCallbacks(onFinal=deliver)."""
            return near.kv_get(uid).speculate(get_ads, abort=undo).set_callbacks(on_final=deliver)

        for round_no, concurrent_change in ((1, False), (2, True)):
            undone: list = []
            delivered: list = []
            if concurrent_change:
                # The change is under way (it ran tentatively at the other
                # replica); the read below races its commit, so the read's
                # preliminary and final views may disagree.
                change = other.kv_put(user, "a3,a4")
                await change.preliminary()
            ads = fetch_ads_by_user_id(user, delivered.append, undone.append)
            views = [v async for v in ads]
            if concurrent_change:
                await change
            print(f"round {round_no}: "
                  + ("the user's interests change at another replica during the read"
                     if concurrent_change else "a quiet read"))
            for v in views:
                print(f"  {v.kind.value:<12} after {v.latency * 1000:6.1f} ms: {v.value}")
            final = views[-1]
            assert delivered and delivered[0] is final, "on_final delivers the closing view"
            if undone:
                print(f"  misspeculation: abort undid {undone}; get_ads reran on the newer view; "
                      f"delivered {final.latency * 1000:.1f} ms after the request")
            else:
                print(f"  speculation held ({final.kind.value}): the ads were fetched while the final "
                      f"view was on its way; delivered {final.latency * 1000:.1f} ms after the request")
        return 0
    finally:
        await near.close()
        await other.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addresses", default="127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.addresses.split(","))))
