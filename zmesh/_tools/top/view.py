"""The drawing of ``zmesh top`` (internal), with ``rich`` (``pip install 'zmesh-agents[top]'``).

:func:`render` turns one view (:meth:`zmesh._tools.top.app.TopCollector.snapshot`)
into tables: nodes, agents, recent events. :func:`live` redraws it in place
every interval until ``q`` (read from stdin, a key at a time on a terminal)
or a signal; on an output that is not a terminal it prints one view after
another instead, like ``top -b``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Iterator, TypeVar

from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

if sys.platform != "win32":
    import termios
    import tty

from ..cli.commands import CLI_NODE_PREFIX

if TYPE_CHECKING:
    from .app import TopCollector

__all__ = ["render", "print_view", "live", "probes_line", "EVENTS_SHOWN"]

#: How many of the latest events the view shows.
EVENTS_SHOWN = 10

T = TypeVar("T")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _count(value: Any) -> str:
    return "-" if value is None else str(value)


def _per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}/s"


def _of(value: Any, limit: Any) -> str:
    return "-" if value is None else f"{value}/{limit}"


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, expand=False,
                  pad_edge=False)
    for column in columns:
        numeric = column.isupper() and column not in ("NODE", "ENDPOINT", "INCARNATION", "AGENT", "CAPABILITIES",
                                                       "SUBSCRIPTIONS", "STATUS", "TIME", "EVENT", "DETAIL")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=not numeric and column != "DETAIL")
    return table


def _fit(title: str, columns: list[str], rows: list[list[Any]], width: int | None, drop_first: list[str]) -> Table:
    """A table of ``columns``, leaving out those in ``drop_first`` (in that
    order) while it would be wider than ``width``: on an 80-column terminal
    the numbers stay and the long identifiers go."""
    keep = list(range(len(columns)))

    def needed() -> int:
        return sum(max([len(columns[i]), *(len(str(r[i])) for r in rows)]) + 3 for i in keep)  # with padding

    for name in drop_first:
        if width is None or needed() <= width:
            break
        keep.remove(columns.index(name))
    table = _table(title, *(columns[i] for i in keep))
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _nodes(view: dict[str, Any], width: int | None = None) -> Table:
    columns = ["NODE", "ENDPOINT", "INCARNATION", "UP", "RTT", "PEERS", "AGENTS", "HANDLED", "SENT", "PENDING",
               "DROPPED", "DEAD", "STATUS"]
    rows: list[list[Any]] = []
    for n in view["nodes"]:
        status = Text("ok", style="green") if n["answered"] else Text(n["error"] or "no answer", style="red")
        rtt = "-" if n["rtt_ms"] is None else f"{n['rtt_ms']:.1f} ms"
        name = Text.assemble(n["node_id"], (" (cli probe)", "dim")) if n.get("cli_probe") else n["node_id"]
        rows.append([name, n["endpoint"], n["incarnation"], _duration(n["uptime"]), rtt, _count(n["peers"]),
                     str(n["agents"]), _per_second(n["handled_per_s"]), _per_second(n["sent_per_s"]),
                     _count(n["pending_requests"]), _count(n["dropped_total"]), _count(n["dead_letters"]), status])
    return _fit("Nodes", columns, rows, width, ["INCARNATION", "ENDPOINT", "PEERS", "AGENTS", "SENT"])


def _agents(view: dict[str, Any], width: int | None = None) -> Table:
    columns = ["AGENT", "NODE", "CAPABILITIES", "SUBSCRIPTIONS", "RATE", "HANDLED", "RUNNING", "INBOX", "DROPPED",
               "DEAD", "REQUESTS", "ERRORS", "AVG"]
    rows: list[list[Any]] = []
    for a in view["agents"]:
        dropped = _count(a["dropped"])
        rows.append([a["agent_id"], a["node_id"], ",".join(a["capabilities"]) or "-",
                     ",".join(a["subscriptions"]) or "-", _per_second(a["handled_per_s"]), _count(a["handled"]),
                     _of(a["running"], a["concurrency"]), _of(a["inbox"], a["inbox_size"]),
                     Text(dropped, style="red") if a["dropped"] else dropped, _count(a["dead_letters"]),
                     _count(a.get("requests")), _count(a.get("errors")), _ms(a.get("average_ms"))])
    return _fit("Agents", columns, rows, width, ["SUBSCRIPTIONS", "CAPABILITIES", "HANDLED", "REQUESTS", "ERRORS", "AVG"])


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when))


def probes_line(probes: dict[str, Any]) -> str:
    """The one line the joins and leaves of CLI probe nodes fold into (``""``: none seen)."""
    came, went = probes.get("came", 0), probes.get("went", 0)
    if not came and not went:
        return ""
    if came == went:
        return f"{came} CLI probe node{'s' if came != 1 else ''} came and went"
    return f"CLI probe nodes: {came} came, {went} went"


def _events(view: dict[str, Any]) -> Table:
    table = _table(f"Events since top joined (latest {EVENTS_SHOWN})", "TIME", "EVENT", "NODE", "AGENT", "DETAIL")
    for e in view["events"][-EVENTS_SHOWN:]:
        table.add_row(_clock(e["time"]), e["kind"], e["node_id"], e["agent_id"] or "-", e["detail"] or "")
    probes = view.get("cli_probes", {})
    folded = probes_line(probes)
    if folded:  # zmesh commands' joins and leaves, four events each: one line for all
        table.add_row(_clock(probes["last"]), "cli_probes", f"{CLI_NODE_PREFIX}*", "-",
                      Text(f"{folded} (folded)", style="dim"))
    elif not view["events"]:
        table.add_row("", "(none yet)", "", "", "")
    return table


def _node_count(nodes: list[dict[str, Any]]) -> str:
    probes = sum(1 for n in nodes if n.get("cli_probe"))
    return f"{len(nodes) - probes} nodes" + (f" (+{probes} CLI probe)" if probes else "")


def render(view: dict[str, Any], hint: str = "", width: int | None = None) -> RenderableType:
    """One view as a group of tables, narrowed to ``width`` columns if given."""
    header = Text.assemble(
        ("zmesh top", "bold"),
        f"  mesh {view['mesh']!r}: {_node_count(view['nodes'])}, {len(view['agents'])} agents, "
        f"seen from {view['observer']} at {time.strftime('%H:%M:%S', time.localtime(view['time']))}",
        (f"  {hint}" if hint else "", "dim"),
    )
    return Group(header, _nodes(view, width), _agents(view, width), _events(view))


def print_view(view: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(render(view, width=console.width))


def _cbreak(fd: int) -> Any:
    """Put the terminal on ``fd`` in cbreak mode (keys arrive one at a time,
    Ctrl-C still signals); return its settings to restore, or None."""
    if sys.platform == "win32" or not os.isatty(fd):
        return None
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    return saved


@contextmanager
def _keys(loop: asyncio.AbstractEventLoop, on_quit: Callable[[], None]) -> Iterator[None]:
    """Call ``on_quit`` when ``q`` arrives on stdin (a terminal, or a pipe)."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # no stdin at all
        yield
        return
    saved = _cbreak(fd)

    def readable() -> None:
        try:
            data = os.read(fd, 64)
        except OSError:
            data = b""
        if not data:  # end of input: only a signal stops us now
            loop.remove_reader(fd)
        elif b"q" in data.lower():
            on_quit()

    try:
        loop.add_reader(fd, readable)
        reading = True
    except (NotImplementedError, OSError, ValueError):  # a loop without add_reader; a regular file
        reading = False
    try:
        yield
    finally:
        if reading:
            loop.remove_reader(fd)
        if saved is not None and sys.platform != "win32":
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _unless_quit(quit: asyncio.Event, work: Coroutine[Any, Any, T]) -> T | None:
    """``await work``, or None once ``quit`` is set first."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(quit.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, waiter):
            pending.cancel()
        await asyncio.gather(task, waiter, return_exceptions=True)
    return None if task.cancelled() else task.result()


async def _quit_within(quit: asyncio.Event, seconds: float) -> bool:
    try:
        await asyncio.wait_for(quit.wait(), seconds)
    except asyncio.TimeoutError:
        return False
    return True


async def live(collector: TopCollector, interval: float, console: Console | None = None) -> int:
    """Redraw the view every ``interval`` s until ``q``; returns the exit code (0)."""
    console = console or Console()
    quit = asyncio.Event()
    with _keys(asyncio.get_running_loop(), quit.set):
        if not console.is_terminal:
            while (view := await _unless_quit(quit, collector.snapshot())) is not None:
                console.print(render(view, width=console.width))
                if await _quit_within(quit, interval):
                    break
            return 0
        hint = "q quits"
        with Live(console=console, screen=True, auto_refresh=False) as screen:
            while (view := await _unless_quit(quit, collector.snapshot())) is not None:
                screen.update(render(view, hint, console.width), refresh=True)
                if await _quit_within(quit, interval):
                    break
    return 0
