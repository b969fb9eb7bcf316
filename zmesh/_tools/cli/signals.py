"""How a ``zmesh`` command ends on a signal (internal).

SIGINT (Ctrl-C) and SIGTERM (what Docker and systemd send) cancel the
command's coroutine, so its ``finally`` blocks run: a node closes and tells
its peers goodbye at once. The command then prints one line and exits with
the shell's convention, 128 + the signal number: 130 for SIGINT, 143 for
SIGTERM. A second signal while closing ends the process at once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any, Callable, Coroutine

__all__ = ["Stopped", "run_command", "STOP_SIGNALS"]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(Exception):
    """The command was stopped by a signal; ``exit_code`` is 128 + its number."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(signal.Signals(signum).name)


async def _until_signalled(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    received: list[int] = []

    def on_signal(signum: int) -> None:
        if received:  # the user insists: do not wait for the clean close
            os._exit(128 + signum)
        received.append(signum)
        task.cancel()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        result = await main()
    except asyncio.CancelledError:
        if not received:
            raise
        result = 0
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)
    if received:
        raise Stopped(received[0])
    return result


def run_command(name: str, main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run ``main()`` on a new event loop; on SIGINT/SIGTERM print one line and return 130/143."""
    try:
        try:
            return asyncio.run(_until_signalled(main))
        except KeyboardInterrupt:  # Ctrl-C before the loop's handlers were in place, or after
            raise Stopped(signal.SIGINT) from None
    except Stopped as stop:
        how = "interrupted" if stop.signum == signal.SIGINT else "terminated"
        print(f"zmesh {name}: {how} ({stop})", file=sys.stderr, flush=True)
        return stop.exit_code
