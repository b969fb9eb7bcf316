"""Test helper: a ``zmesh`` command in a subprocess, its output read line by line as it comes."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZMESH = (sys.executable, "-m", "zmesh")


def cli_env() -> dict[str, str]:
    """The test's environment, local-only, importing zmesh from this tree."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "ZMESH_INTERFACES": "127.0.0.1", "PYTHONPATH": path}


async def run_zmesh(*args: str, timeout: float = 30) -> tuple[int, str, str]:
    """Run ``zmesh ARGS`` to the end: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *ZMESH, *args, cwd=ROOT, env=cli_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class CliProcess:
    """``async with CliProcess("sub", ...) as cli``: lines land in ``cli.out``/``cli.err``; killed on exit."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.out: list[str] = []
        self.err: list[str] = []
        self._proc: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> CliProcess:
        self._proc = await asyncio.create_subprocess_exec(
            *ZMESH, *self.args, cwd=ROOT, env=cli_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._readers = [
            asyncio.ensure_future(self._read(self._proc.stdout, self.out)),
            asyncio.ensure_future(self._read(self._proc.stderr, self.err)),
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        await asyncio.gather(*self._readers)

    @staticmethod
    async def _read(stream: asyncio.StreamReader, lines: list[str]) -> None:
        async for line in stream:
            lines.append(line.decode().rstrip("\n"))

    @property
    def proc(self) -> asyncio.subprocess.Process:
        assert self._proc is not None
        return self._proc

    @property
    def exited(self) -> bool:
        return self.proc.returncode is not None

    async def wait_for_output(self, predicate: Callable[[list[str]], bool], timeout: float, what: str) -> None:
        """Poll until ``predicate(self.out)``; fail if the command exits or ``timeout`` passes first."""
        deadline = time.monotonic() + timeout
        while not predicate(self.out):
            if self.exited or time.monotonic() > deadline:
                raise AssertionError(f"no {what} (exited: {self.exited}); stdout {self.out}, stderr {self.err}")
            await asyncio.sleep(0.01)

    async def finish(self, timeout: float = 15) -> int:
        """Wait for the command to exit and for all its output; its exit code."""
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.wait_for(asyncio.gather(*self._readers), timeout)
        return code
