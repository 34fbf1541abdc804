"""A ticket seller on a queue: Correctables Listing 5 (§4.3).

An organizer enqueues the tickets of an event, numbered so that a ticket's
number says how many are left (the first out is #STOCK, the last #1).
Retailers, each near a different replica, sell them to buyers with one
`queue.dequeue` per purchase, invoked with both views:

- on the preliminary view (from the replica's tentative state, fast): if
  the ticket number is above THRESHOLD, many tickets are left, so the sale
  is confirmed at once and the dequeue completes in the background;
- otherwise, on the final view (the committed order, slower): the buyer
  gets a ticket if the final view holds one, else "Sold out. Sorry!".

The final views decide who holds which ticket; the run ends with an audit
that no ticket was sold twice and that everyone sold a ticket on a
preliminary view holds one. Selling on a preliminary view is safe only while
the sales a replica has not yet heard of are fewer than THRESHOLD; each
retailer therefore keeps one dequeue in flight (its buyer may already have
been answered). Without that, three retailers selling a ticket per
millisecond outrun the replicas' gossip, every preliminary view looks full,
and the audit catches the overselling. Run it against `creek dev`:

    python clients/python/examples/tickets.py [--addresses 127.0.0.1:7001,...]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from dataclasses import dataclass, field
from typing import List, Optional

import creek

THRESHOLD = 20


@dataclass
class Sale:
    buyer: int
    # How the buyer was answered: "preliminary", "final" or "sold out".
    decided_on: Optional[str] = None
    decided_ms: float = 0.0
    # The ticket the buyer was told about, and the one the final view gave.
    told_ticket: Optional[int] = None
    final_ticket: Optional[int] = None
    error: Optional[BaseException] = None
    decided: asyncio.Event = field(default_factory=asyncio.Event)


def purchase_ticket(client: creek.Client, event: str, sale: Sale) -> creek.Correctable:
    """Listing 5, line by line."""
    done = False

    def confirm_purchase(view: creek.View, how: str) -> None:
        sale.decided_on, sale.decided_ms = how, view.latency * 1000
        sale.told_ticket = int(view.value)
        sale.decided.set()

    def on_update(weak_result: creek.View) -> None:
        nonlocal done
        if not done and weak_result.value is not None and int(weak_result.value) > THRESHOLD:
            done = True  # many tickets left, so we can buy
            confirm_purchase(weak_result, "preliminary")

    def on_final(strong_result: creek.View) -> None:
        nonlocal done
        sale.final_ticket = None if strong_result.value is None else int(strong_result.value)
        if done:
            return
        done = True
        if strong_result.value is not None:
            confirm_purchase(strong_result, "final")  # we managed to get a ticket
        else:
            sale.decided_on, sale.decided_ms = "sold out", strong_result.latency * 1000
            sale.decided.set()

    def on_error(e: BaseException) -> None:
        sale.error = e
        sale.decided.set()

    return client.queue_dequeue(event).set_callbacks(on_update=on_update, on_final=on_final, on_error=on_error)


async def retailer(client: creek.Client, event: str, sales: List[Sale], ops: list) -> None:
    """Serve buyers one after another. A buyer may be answered on the
    preliminary view, but the retailer starts the next dequeue only once the
    previous one completed: with one dequeue in flight per retailer, a
    replica's preliminary view misses at most about one sale per other
    retailer, far fewer than THRESHOLD, so selling on it cannot oversell."""
    for sale in sales:
        op = purchase_ticket(client, event, sale)
        ops.append(op)
        await sale.decided.wait()
        try:
            await op.final()
        except creek.CreekError:
            pass  # on_error recorded it


async def main(addresses: List[str], stock: int, buyers: int) -> int:
    event = f"tickets-{uuid.uuid4().hex[:8]}"
    # Each retailer talks to a different replica first (and fails over to
    # the others).
    retailers = [creek.Client(addresses[i:] + addresses[:i], timeout=30) for i in range(len(addresses))]
    organizer = retailers[0]
    try:
        for n in range(stock, 0, -1):
            await organizer.queue_enqueue(event, str(n), levels=creek.STRONG)
        print(f"{stock} tickets for {event}; threshold {THRESHOLD}; {len(retailers)} retailers "
              f"at {', '.join(addresses)}; {buyers} buyers")

        sales = [Sale(buyer=b) for b in range(buyers)]
        ops: list = []
        await asyncio.gather(
            *(retailer(r, event, sales[i :: len(retailers)], ops) for i, r in enumerate(retailers))
        )
        # The final views still on their way decide who holds which ticket.
        await asyncio.gather(*(op.final() for op in ops), return_exceptions=True)
    finally:
        for r in retailers:
            await r.close()

    failed = [s for s in sales if s.error is not None]
    early = [s for s in sales if s.decided_on == "preliminary"]
    late = [s for s in sales if s.decided_on == "final"]
    sold_out = [s for s in sales if s.decided_on == "sold out"]

    def mean_ms(group: List[Sale]) -> str:
        return f"{statistics.mean(s.decided_ms for s in group):.1f} ms" if group else "-"

    print(f"sold {len(early) + len(late)} tickets: {len(early)} on the preliminary view "
          f"(mean {mean_ms(early)}), {len(late)} on the final view (mean {mean_ms(late)})")
    print(f'{len(sold_out)} buyers were told "Sold out. Sorry!"')
    corrected = [s for s in early if s.final_ticket != s.told_ticket]
    if corrected:
        print(f"{len(corrected)} early sales got a different ticket number in the final view "
              "(another replica sold the one they saw first); every one still got a ticket")
    for s in failed:
        print(f"buyer {s.buyer}: error {s.error}")

    # The audit, from the final views only.
    held = [s.final_ticket for s in sales if s.final_ticket is not None]
    problems = []
    if len(held) != len(set(held)):
        problems.append("a ticket was sold twice")
    if len(held) > stock:
        problems.append("more tickets held than printed")
    if any(s.final_ticket is None for s in early + late):
        problems.append("a buyer was sold a ticket that the final view did not give them")
    if failed:
        problems.append(f"{len(failed)} purchases failed")
    if problems:
        print("AUDIT FAILED: " + "; ".join(problems))
        return 1
    print(f"audit: {len(held)} distinct tickets held, none sold twice, none oversold")
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--addresses", default="127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003")
    p.add_argument("--stock", type=int, default=60)
    p.add_argument("--buyers", type=int, default=75)
    a = p.parse_args()
    sys.exit(asyncio.run(main(a.addresses.split(","), a.stock, a.buyers)))
