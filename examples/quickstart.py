"""Two agents on one node: a request, a broadcast, a handoff. Run: python examples/quickstart.py"""

import asyncio

import zmesh


async def main() -> None:
    async with zmesh.Node("quickstart", transport="inproc") as node:
        a = node.agent("a")
        b = node.agent("b", capabilities=("math.add",))

        @b.on("math.add")
        async def add(msg: zmesh.Message) -> int:
            return msg.payload["x"] + msg.payload["y"]

        @b.on_handoff
        def take(offer: zmesh.Handoff) -> bool:
            print(f"b is offered {offer.task_id} by {offer.sender} with {offer.artifacts}")
            return True

        reply = await a.request("b", "math.add", {"x": 1, "y": 2}, timeout=5)
        print("1 + 2 =", reply.payload)

        await b.subscribe("research.*", lambda msg: print("b heard", msg.topic, msg.payload), inline=True)
        reached = await a.broadcast("research.found", {"paper": 42})
        print("broadcast reached", reached, "agent(s)")

        result = await a.handoff("b", "task-1", {"step": 3}, artifacts=["notes.md"], timeout=5)
        print("handoff accepted:", result.accepted, "| b owns", sorted(b.tasks), "| a owns", sorted(a.tasks))
        await node.settled()


if __name__ == "__main__":
    asyncio.run(main())
