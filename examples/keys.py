"""Two nodes with keys (CurveZMQ) on 127.0.0.1, then one is cut off. Run: python examples/keys.py

On a LAN the same two lines of set-up apply: `zmesh keygen NAME --dir keys`
on each host, copy every NAME.key (never a .key_secret) into every host's
keys directory, and start each node with key= and trusted=.
"""

import asyncio
import tempfile

import zmesh


async def main() -> None:
    with tempfile.TemporaryDirectory() as keys:
        zmesh.keygen("alice", keys)  # keys/alice.key (public), keys/alice.key_secret (mode 0600)
        zmesh.keygen("bob", keys)
        async with zmesh.Node("keyed", key=f"{keys}/alice.key_secret", trusted=keys, discovery=False) as alice, \
                zmesh.Node("keyed", key=f"{keys}/bob.key_secret", trusted=keys, discovery=False,
                           seeds=[alice.endpoint]) as bob:
            print("alice's endpoint carries her public key:", alice.endpoint.partition("#")[2] == alice.public_key)
            alice.agent("echo").add_handler("ping", lambda msg: f"pong {msg.payload}")
            await bob.wait_for_agents("echo")
            reply = await bob.agent("asker").request("echo", "ping", 1, timeout=5)
            print("over CurveZMQ:", reply.payload)

            alice.distrust(bob.public_key)  # no restart: bob's connections are cut, his key refused
            print("bob still a peer of alice:", bob.id in alice.peers)


asyncio.run(main())
