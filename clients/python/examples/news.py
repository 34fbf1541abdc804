"""A news reader over Creek: the Twissandra-like timeline of Correctables §6
(`get_timeline` with `speculate`) with the progressive display of §4.4
(Listing 6).

Publishers post stories; readers follow publishers. Posting stores the
story once under its id (it never changes) and appends the id to each
follower's timeline (a `list.append`). Reading a timeline takes two steps:
the list of ids, then the stories. The ids are read with both views; the
stories are fetched on the preliminary ids at once (`speculate`), with weak
reads since stories never change, and fetched again only if the final ids
differ. The screen is refreshed on each speculative result (`on_update`)
and settles on the final one (`on_final`).

Read 1 is quiet (the speculation holds); read 2 races a new story posted at
another replica, so its preliminary timeline may miss it (then the stories
are fetched again). Run it against `creek dev`:

    python clients/python/examples/news.py [--addresses 127.0.0.1:7001,...]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from dataclasses import dataclass, field
from typing import Callable, List, Optional

import creek

#: Stories on one screen, newest first.
SCREEN = 5


@dataclass
class Screen:
    """What a reader's phone shows: each refresh, and whether it settled."""

    refreshes: List[List[str]] = field(default_factory=list)
    undone: List[List[str]] = field(default_factory=list)
    settled: Optional[creek.View] = None

    def refresh(self, view: creek.View) -> None:
        self.refreshes.append(view.value)

    def settle(self, view: creek.View) -> None:
        self.settled = view


class NewsService:
    """Stories, follows and timelines of one deployment (`ns` keeps the
    keys of separate runs apart)."""

    def __init__(self, client: creek.Client, ns: str):
        self.client = client
        self.ns = ns

    def _story(self, story_id: str) -> str:
        return f"{self.ns}:story:{story_id}"

    def _followers(self, publisher: str) -> str:
        return f"{self.ns}:followers:{publisher}"

    def _timeline(self, reader: str) -> str:
        return f"{self.ns}:timeline:{reader}"

    async def follow(self, reader: str, publisher: str) -> None:
        await self.client.set_add(self._followers(publisher), reader)

    async def post(self, publisher: str, headline: str) -> str:
        """Store the story, then put its id on every follower's timeline.
        Returns the id."""
        story_id = uuid.uuid4().hex[:12]
        await self.client.kv_put(self._story(story_id), f"{publisher}: {headline}")
        followers = await self.client.call("set.read", self._followers(publisher))
        await asyncio.gather(*(self.client.list_append(self._timeline(r.decode()), story_id) for r in followers))
        return story_id

    async def stories(self, ids_view: creek.View) -> List[str]:
        """The newest SCREEN stories a view of a timeline names, newest
        first. Stories never change once posted: weak reads suffice."""
        ids = [i.decode() for i in reversed(ids_view.value[-SCREEN:])]
        reads = await asyncio.gather(*(self.client.invoke_weak("kv.get", self._story(i)) for i in ids))
        return [r.value.decode() if r.value is not None else f"(story {i} not here yet)" for i, r in zip(ids, reads)]

    def get_timeline(self, reader: str, screen: Screen) -> creek.Correctable:
        """Correctables §6's `get_timeline`: the ids with both views, the
        stories fetched speculatively on the preliminary ids, the screen
        refreshed on each result (§4.4, Listing 6)."""
        return (
            self.client.list_read(self._timeline(reader))
            .speculate(self.stories, abort=screen.undone.append)
            .set_callbacks(on_update=screen.refresh, on_final=screen.settle)
        )


async def read_and_show(news: NewsService, reader: str, title: str,
                        during: Optional[Callable] = None) -> Screen:
    screen = Screen()
    timeline = news.get_timeline(reader, screen)
    if during is not None:
        await during()
    await timeline
    print(title)
    for i, shown in enumerate(screen.refreshes):
        print(f"  refresh {i + 1} (preliminary): {len(shown)} stories, newest: {shown[0] if shown else '-'}")
    final = screen.settled
    assert final is not None
    print(f"  settled after {final.latency * 1000:.1f} ms ({final.kind.value}): {len(final.value)} stories")
    for line in final.value:
        print(f"    {line}")
    if screen.undone:
        print("  misspeculation: the final timeline differed; stories fetched again")
    else:
        print("  speculation held: the stories were fetched while the final timeline was on its way")
    return screen


async def main(addresses: List[str]) -> int:
    ns = f"news-{uuid.uuid4().hex[:8]}"
    async with creek.Client(addresses, timeout=30) as near, \
            creek.Client(addresses[1:] + addresses[:1], timeout=30) as other:
        news, newsroom = NewsService(near, ns), NewsService(other, ns)
        for publisher in ("daily", "weekly"):
            await news.follow("ana", publisher)
        for publisher, headline in [
            ("daily", "Rain expected all week"),
            ("weekly", "A long read on rivers"),
            ("daily", "Local team wins the cup"),
        ]:
            await news.post(publisher, headline)

        quiet = await read_and_show(news, "ana", "read 1: a quiet timeline")

        async def breaking() -> None:
            await newsroom.post("daily", "Breaking: the bridge reopens")

        racing = await read_and_show(news, "ana", "read 2: a story posted at another replica meanwhile",
                                     during=breaking)

        # The audit: the settled screen is the timeline's newest stories at
        # the read's place in the committed order, with or without the
        # racing story (whichever the order says).
        everything = await news.stories(await near.list_read(news._timeline("ana"), levels=creek.STRONG))
        ok = quiet.settled.is_confirmation and racing.settled.value in (everything, everything[1:])
        print("audit: " + ("every screen settled on the committed timeline" if ok else "FAILED"))
        return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addresses", default="127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.addresses.split(","))))
