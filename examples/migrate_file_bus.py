"""Moving a file-bus app onto the mesh while it runs (docs/migration.md).

Stage 2 of the seed design: the app's agents meet on a file bus, a folder
(the seed's FileBroker layout). The new deployment runs the same agents on
the mesh. A DualTrackDispatcher answers every request from the file bus
while mirroring it to the mesh (shadow), compares the answers, and once
they agree the topic moves to the mesh; then the flag moves everything."""

import asyncio
import tempfile
from pathlib import Path

import zmesh
from zmesh.migrate import DualTrackDispatcher, PolicyFlag


def price_v1(msg: zmesh.Message) -> float:  # the app as it runs today
    return round(msg.payload["qty"] * 9.99, 2)


def price_v2_buggy(msg: zmesh.Message) -> float:  # its port to the mesh, with a bug for big orders
    qty = msg.payload["qty"]
    return round(qty * 9.99 * (0.9 if qty >= 10 else 1.0), 2)


async def main() -> None:
    bus = Path(tempfile.mkdtemp()) / "message_bus"
    # the mesh in this one process is "inproc" (the same semantics); across processes it is "zmq"
    async with zmesh.Node("shop", transport=bus.as_uri()) as old, zmesh.Node("shop", transport="inproc") as new:
        legacy_pricer = old.agent("pricer")
        legacy_pricer.add_handler("price.quote", price_v1)
        mesh_pricer = new.agent("pricer")
        mesh_pricer.add_handler("price.quote", price_v2_buggy)
        await old.wait_for_agents("pricer", timeout=10)
        await new.wait_for_agents("pricer", timeout=10)
        print("the file bus has the seed's folders:", (bus / "agents" / "pricer" / "inbox").is_dir())

        flag = PolicyFlag("legacy")
        tracks = DualTrackDispatcher(flag, old.agent("frontend"), new.agent("frontend"), shadow=True)
        tracks.observe(lambda r: r.outcome != "match" and print(
            f"shadow {r.outcome} on {r.topic}: the mesh answered differently"))

        for qty in (1, 3, 12):
            reply = await tracks.request("pricer", "price.quote", {"qty": qty}, timeout=10)
            print(f"quote for {qty}: {reply.payload} (from the file bus)")
        await tracks.drain(10)
        stats = tracks.stats()
        print(f"shadowed {stats['shadow']}: {stats['match']} match, {stats['mismatch']} mismatch")

        mesh_pricer.add_handler("price.quote", price_v1)  # the port fixed (same topic: the handler replaced)
        for qty in (1, 3, 12):
            await tracks.request("pricer", "price.quote", {"qty": qty}, timeout=10)
        await tracks.drain(10)
        print(f"after the fix: {tracks.stats()['mismatch']} mismatch in total, {tracks.stats()['match']} match")

        tracks.set_policy("price.>", "new")
        reply = await tracks.request("pricer", "price.quote", {"qty": 2}, timeout=10)
        print(f"price.quote now served by the mesh: {reply.payload}")
        flag.set("new")
        print(f"flag: {flag.active()}; gone down each track: legacy {tracks.stats()['legacy']}, "
              f"shadow {tracks.stats()['shadow']}, new {tracks.stats()['new']}")
        await tracks.aclose()


asyncio.run(main())
