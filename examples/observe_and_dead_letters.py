"""Observe outcomes, catch failures, and redeliver a dead letter.

Run: python examples/observe_and_dead_letters.py

A handler that raises is contained: the caller gets HandlerError, a dead
letter records it, and zmesh logs it (logger ``zmesh``) with the traceback.
This example prints each log record as one line, so the crash it causes on
purpose reads as what it is; drop ``one_line_logs()`` to see the traceback.
"""

import asyncio
import logging
import sys

import zmesh


class OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"log {record.levelname.lower()}: {record.getMessage()}"  # no traceback


def one_line_logs() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(OneLineFormatter())
    logging.getLogger("zmesh").addHandler(handler)


async def main() -> None:
    one_line_logs()
    async with zmesh.Node("observed", transport="inproc") as node:
        node.observe(lambda r: print(f"receipt: {r.kind:9} {r.outcome:9} {r.sender}->{r.target} {r.topic}"))
        a = node.agent("a")
        flaky = node.agent("flaky")

        @flaky.on("divide")
        def divide(msg: zmesh.Message) -> float:
            return 1 / msg.payload

        print("1 / 4 =", (await a.request("flaky", "divide", 4, timeout=5)).payload)
        try:
            await a.request("flaky", "divide", 0, timeout=5)
        except zmesh.HandlerError as exc:
            print("remote error, at once:", exc.remote_type, exc.remote_message)

        with zmesh.trace_context("trace-42"):
            try:
                await a.send("late", "hello", "are you there?")
            except zmesh.AgentNotRegistered as exc:
                print("not delivered:", exc)
        late = node.agent("late")
        late.add_handler("hello", lambda msg: print("late got", msg.payload, "trace", msg.trace_id))
        for letter in node.dead_letters:
            print("dead letter:", letter.reason, letter.target, letter.trace_id)
            if letter.target == "late":
                await node.dead_letters.redeliver(letter)


if __name__ == "__main__":
    asyncio.run(main())
