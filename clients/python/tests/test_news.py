"""The news reader example (examples/news.py: Correctables §6's timeline
with `speculate`, §4.4's progressive display) against a `creek dev`
cluster: as a script, and with a reader cut off from the majority, whose
screen shows the stale timeline first and settles on the committed one (Correctables §4.2)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import creek
from creek import ViewKind
from conftest import run

T = 20.0
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLES))

import news  # noqa: E402




def test_the_news_reader_example_settles_every_screen_on_the_committed_timeline(dev):
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "news.py"), "--addresses", ",".join(dev.clients)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "audit: every screen settled on the committed timeline" in out.stdout, out.stdout


def test_a_stale_timeline_is_shown_first_then_corrected(dev):
    """Correctables §4.2 on the timeline: the reader's replica is cut off
    when a story is posted, so the preliminary screen misses it; once the
    replica is back, the final timeline has it, the stale stories are undone
    and fetched again."""

    async def body():
        ns = f"news-{uuid.uuid4().hex[:8]}"
        async with creek.Client(dev.clients[:2], timeout=T) as c, creek.Client([dev.clients[2]], timeout=T) as r:
            newsroom, reader = news.NewsService(c, ns), news.NewsService(r, ns)
            await newsroom.follow("ana", "daily")
            await newsroom.post("daily", "Rain expected all week")
            # Until the reader's replica has the story (it heard of it by gossip).
            warm = news.Screen()
            for _ in range(200):
                await reader.get_timeline("ana", warm)
                if warm.settled.value == ["daily: Rain expected all week"]:
                    break
            dev.isolate(2)
            try:
                await newsroom.post("daily", "Breaking: the bridge reopens")
                screen = news.Screen()
                timeline = reader.get_timeline("ana", screen)
                assert (await timeline.preliminary()).value == ["daily: Rain expected all week"]
            finally:
                dev.isolate(2, partitioned=False)
            final = await timeline
            assert final.is_stable and final.value == [
                "daily: Breaking: the bridge reopens",
                "daily: Rain expected all week",
            ]
            stale = ["daily: Rain expected all week"]
            assert screen.refreshes[0] == stale and screen.undone == [stale] and screen.settled is final
            # Back in touch, the replica may first show the new timeline as
            # a second preliminary view, which the final view then confirms.
            assert screen.refreshes[1:] == ([final.value] if final.kind is ViewKind.CONFIRMED else [])

    run(body())
