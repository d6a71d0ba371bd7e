"""A worker that dies in the middle of a step, for the README's "Surviving a
crash". ``python -m examples.crash LOG`` runs one logged step of three calls
(look the order up, charge the card, reserve the stock) and is killed with
SIGKILL, by its own hand, inside ``charge_card``, just after the charge
reached the ledger (``ledger.txt`` beside the log): the worst moment, when
the side effect is done and its result is not logged.

:func:`shop_tools` registers the same tools in the process that recovers.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolCall, ToolRuntime, tool

#: Set by :func:`main` only: the worker dies inside ``charge_card``.
CRASH = False
LEDGER = "ledger.txt"

STEP = (
    ToolCall(id="call_1", name="lookup_order", arguments='{"order": "A7"}'),
    ToolCall(id="call_2", name="charge_card", arguments='{"order": "A7", "amount": 30}'),
    ToolCall(id="call_3", name="reserve_stock", arguments='{"order": "A7"}'),
)


@tool(idempotent=True)
def lookup_order(order: str) -> str:
    """Look an order up (a read: running it twice does no harm)."""
    return f"order {order}: 1 item, 30 EUR"


@tool  # not idempotent: a second run charges the customer twice
def charge_card(order: str, amount: int) -> str:
    """Charge the order's card."""
    with open(LEDGER, "a") as ledger:
        ledger.write(f"charged {amount} for {order}\n")
    if CRASH:
        os.kill(os.getpid(), signal.SIGKILL)  # the process dies here
    return f"charged {amount} EUR for order {order}"


@tool(idempotent=True)
def reserve_stock(order: str) -> str:
    """Reserve the order's items (keyed by order: a second run changes nothing)."""
    return f"stock reserved for order {order}"


def shop_tools(runtime: ToolRuntime) -> None:
    for definition in (lookup_order, charge_card, reserve_stock):
        runtime.tools.register(definition)


def main(log: str) -> None:
    global CRASH, LEDGER
    CRASH = True
    LEDGER = str(Path(log).parent / "ledger.txt")
    with ToolRuntime() as rt:
        shop_tools(rt)
        shop = Agent("shop", session=Session(log))
        rt.tools.execute(ToolBatchInput(calls=STEP, agent=shop, log=LogStep(turn=1, step=1)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shop.jsonl")
