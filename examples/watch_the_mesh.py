"""Watch a mesh from your own code: what ``zmesh top`` shows, from the public API.

``node.registry`` says who is there, ``node.events()`` what changes, and
``await node.peer_stats(node_id)`` asks any node for its ``stats()``, with
each of its agents' figures in ``"by_agent"``. A rate is the difference of
two answers over the difference of their ``uptime``.
"""

from __future__ import annotations

import asyncio
import time

import zmesh


async def main() -> None:
    async with zmesh.Node("watch", name="node-a", transport="inproc") as here, \
            zmesh.Node("watch", name="node-b", transport="inproc") as there:
        worker = there.agent("worker", capabilities=("work",))
        worker.add_handler("job", lambda msg: msg.payload * 2)
        client = here.agent("client")
        await here.wait_for_agents("worker")
        events = here.events()

        before = await here.peer_stats("node-b")
        for i in range(20):
            await client.request("worker", "job", i)
        started = time.perf_counter()
        after = await here.peer_stats("node-b")
        rtt_ms = (time.perf_counter() - started) * 1000

        for record in here.registry.nodes():
            print(f"{record.node_id}: incarnation {record.incarnation}, agents {sorted(record.agents)}")
        print(f"node-b: up {after['uptime']:.2f} s, {after['peers']} peer(s), asked in {rtt_ms:.2f} ms")
        figures, earlier = after["by_agent"]["worker"], before["by_agent"]["worker"]
        rate = (figures["handled"] - earlier["handled"]) / (after["uptime"] - before["uptime"])
        print(f"worker: handled {figures['handled']} ({rate:.0f}/s), inbox {figures['inbox']}/{figures['inbox_size']}, "
              f"dropped {figures['dropped']}, dead letters {figures['dead_letters']}")

        there.agent("helper")
        event = await asyncio.wait_for(events.__anext__(), 5)
        print(f"event: {event.kind} {event.agent_id} on {event.node_id}")


if __name__ == "__main__":
    asyncio.run(main())
