"""A node process under ``zmesh.run``, for tests/test_run_signals.py.

    python -m tests._run_child MESH SEED STYLE

STYLE ``with``: the node lives in ``async with``; ``bare``: main starts it
and never closes it (``zmesh.run`` must). Serves until a signal stops it.
"""

from __future__ import annotations

import asyncio
import sys

import zmesh


async def main(mesh: str, seed: str, style: str) -> None:
    node = zmesh.Node(mesh, name="child", seeds=[seed], discovery=False)
    if style == "bare":
        await node.start()
        node.agent("child-agent")
        await asyncio.Event().wait()
    async with node:
        node.agent("child-agent")
        await asyncio.Event().wait()


if __name__ == "__main__":
    zmesh.run(main(*sys.argv[1:4]))
