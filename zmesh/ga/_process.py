"""GenericAgent sub-agent processes (internal): launching one as its
master does, and telling whether one is still running.

``python ROOT/agentmain.py --task NAME`` respawns itself detached with
``--nobg`` added, prints ``PID: <pid>`` and exits: the pid printed is the
process that runs the rounds, and the only way to know it finished or died.
A sub-agent started by someone else is found by its command line in
``/proc`` (Linux; elsewhere only the processes this bridge launched are
known).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import ZmeshError

__all__ = ["LaunchError", "Launched", "alive", "find_subagents", "launch", "started_at", "MAX_ARG_INPUT"]

#: Inputs longer than this (in UTF-8 bytes) go in ``input.txt`` rather than on the command line.
MAX_ARG_INPUT = 64 * 1024
_PID_LINE = re.compile(rb"^PID:\s*(\d+)\s*$", re.MULTILINE)
_PROC = Path("/proc")


class LaunchError(ZmeshError):
    """``agentmain.py`` did not start a sub-agent (its exit code and stderr say why)."""


@dataclass(frozen=True)
class Launched:
    pid: int
    command: tuple[str, ...]


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", errors="surrogateescape") for part in raw.split(b"\0") if part]


def _task_of(argv: list[str], script: str, cwd: Path | None) -> str | None:
    """The ``--task`` NAME of a sub-agent worker running ``script``, or None."""
    if "--nobg" not in argv:
        return None  # the launcher, gone in a moment
    ran_script = False
    task: str | None = None
    for i, arg in enumerate(argv):
        if arg.endswith("agentmain.py"):
            path = arg if os.path.isabs(arg) or cwd is None else os.path.join(cwd, arg)
            ran_script = ran_script or os.path.realpath(path) == script
        elif arg == "--task" and i + 1 < len(argv):
            task = argv[i + 1]
        elif arg.startswith("--task="):
            task = arg[len("--task="):]
    return task if ran_script else None


def _cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(_PROC / str(pid) / "cwd"))
    except OSError:
        return None


def find_subagents(root: Path) -> dict[str, int]:
    """Running sub-agent workers of ``root``'s ``agentmain.py``: task name -> pid
    (the newest pid if two run the same task). Empty where there is no /proc."""
    script = os.path.realpath(root / "agentmain.py")
    found: dict[str, int] = {}
    try:
        pids = sorted(int(entry) for entry in os.listdir(_PROC) if entry.isdigit())
    except OSError:
        return found
    for pid in pids:
        argv = _cmdline(pid)
        if not argv or not any(arg.endswith("agentmain.py") for arg in argv):
            continue
        task = _task_of(argv, script, _cwd(pid))
        if task is not None and alive(pid):
            found[task] = pid
    return found


def _reap(pid: int) -> None:
    """A worker whose parent went is adopted by init, or by this process if it
    is the subreaper (pid 1 in a container): reap it so it does not linger."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass


def alive(pid: int) -> bool:
    """Is ``pid`` running (not a zombie)?"""
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except FileNotFoundError:
        return not _PROC.is_dir()  # gone; without /proc, kill() said it is there
    except OSError:
        return True
    return stat[stat.rfind(")") + 2:][:1] not in ("Z", "X")


def started_at(pid: int) -> float | None:
    """When ``pid`` started (seconds since the epoch), from /proc; None if unknown."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
        boot = next(line for line in (_PROC / "stat").read_text().splitlines() if line.startswith("btime "))
    except (OSError, StopIteration):
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        ticks = int(fields[19])  # field 22, starttime, counted from the state (field 3)
        return int(boot.split()[1]) + ticks / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


async def launch(root: Path, name: str, text: str, *, python: str = sys.executable,
                 extra_args: tuple[str, ...] = (), timeout: float = 60.0) -> Launched:
    """Start sub-agent ``name`` on ``text``, as the master does. Short inputs
    go as ``--input``; long ones (or with a NUL) in ``input.txt``, which the
    caller wrote. Raises :class:`LaunchError`."""
    command = [python, str(root / "agentmain.py"), "--task", name, *extra_args]
    if len(text.encode("utf-8")) <= MAX_ARG_INPUT and "\0" not in text:
        command.append(f"--input={text}")  # '=': an input starting with '-' is still the value
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, cwd=root, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        raise LaunchError(f"could not run {python!r}: {exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise LaunchError(f"{root / 'agentmain.py'} printed no PID within {timeout:g} s") from None
    said = _PID_LINE.search(out)
    if proc.returncode != 0 or said is None:
        tail = (err or out).decode("utf-8", errors="replace").strip().splitlines()[-5:]
        raise LaunchError(f"{root / 'agentmain.py'} --task {name} exited with {proc.returncode} and no PID line: "
                          + (" | ".join(tail) or "(no output)"))
    return Launched(int(said[1]), tuple(command))
