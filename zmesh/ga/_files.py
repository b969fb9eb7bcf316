"""The GenericAgent sub-agent folder, file by file (internal): what the
master reads and writes in ``ROOT/temp/NAME/``, as GenericAgent's
``agentmain.py`` at 6d2cf09 reads and writes it. No asyncio, no processes.

The child rewrites ``output.txt`` (round 0), ``output1.txt``, ... in place
as the round goes, without renaming, and ends a round by rewriting it as
the round's text + ``"\\n\\n[ROUND END]\\n"``: a read may see a torn file,
so a round is over only once the text, ``\\r\\n`` read as ``\\n``, ends
with the marker. Master to child, everything is written here under a
temporary name and renamed into place, so the child never reads half a
reply.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CONTROL_FILES", "LAUNCH_LEFTOVERS", "ROUND_END", "Round", "clean_for_launch", "input_file",
           "is_subagent_folder", "output_file", "read_round", "remove", "reply_pending", "write_atomic",
           "write_control", "write_reply", "latest_round"]

ROUND_END = "[ROUND END]\n"
_ROUND_SUFFIX = "\n\n" + ROUND_END
#: What the master writes and the child consumes (reads, then deletes).
CONTROL_FILES = {"stop": "_stop", "keyinfo": "_keyinfo", "intervene": "_intervene"}
#: What an earlier run may have left that a new child would take as its own.
LAUNCH_LEFTOVERS = ("reply.txt", "_stop", "_keyinfo", "_intervene", "_history.json")


@dataclass(frozen=True)
class Round:
    """One read of a round's output file: ``done`` once it ends with the marker;
    ``text`` without the marker (what the round said so far, if not done)."""

    done: bool
    text: str


def output_file(folder: Path, round_no: int) -> Path:
    """``output.txt`` for round 0, ``outputN.txt`` for round N (there is no output0)."""
    return folder / ("output.txt" if round_no == 0 else f"output{round_no}.txt")


def input_file(folder: Path) -> Path:
    return folder / "input.txt"


def is_subagent_folder(folder: Path) -> bool:
    """A sub-agent's folder has its task's ``input.txt`` (``temp/`` holds other folders too)."""
    return input_file(folder).is_file()


def read_round(path: Path) -> Round | None:
    """The round's output as it is now; None while there is no such file."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").removeprefix("\ufeff")
    if text.endswith(_ROUND_SUFFIX):
        return Round(True, text[: -len(_ROUND_SUFFIX)])
    if text.endswith(ROUND_END):  # the marker alone: a round _stop cancelled at its first step
        return Round(True, text[: -len(ROUND_END)].rstrip("\n"))
    return Round(False, text)


def latest_round(folder: Path, since: float | None = None) -> int:
    """The highest round with an output file (written at ``since`` or later, if
    given: a file of an earlier run is not this process's), or -1."""
    best = -1
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return -1
    for entry in entries:
        name = entry.name
        if not (name.startswith("output") and name.endswith(".txt")):
            continue
        digits = name[len("output"):-len(".txt")]
        if digits == "":
            number = 0
        elif digits.isdigit() and digits[0] != "0":
            number = int(digits)
        else:
            continue
        if since is not None:
            try:
                if entry.stat().st_mtime < since:
                    continue
            except OSError:
                continue
        best = max(best, number)
    return best


def remove(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def write_atomic(path: Path, text: str) -> None:
    """``path`` holds ``text`` (UTF-8, no BOM) at once or not at all, for any reader."""
    tmp = path.with_name(f".{path.name}.zmesh-{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise


def clean_for_launch(folder: Path) -> None:
    """Clear what a new child must not take for its own: control files and the
    outputs of an earlier run (the child deletes its outputs only once it
    got as far as reading ``--input``, and a stale ``output.txt`` ending with
    the marker would pass for round 0 until then)."""
    for name in LAUNCH_LEFTOVERS:
        remove(folder / name)
    for entry in list(os.scandir(folder)):
        if entry.name.startswith("output") and entry.name.endswith(".txt"):
            remove(Path(entry.path))


def write_reply(folder: Path, text: str) -> None:
    """The next round's input. A ``_stop`` left from a stop that came as the
    last round ended would cancel this round at its first step: gone first."""
    remove(folder / "_stop")
    write_atomic(folder / "reply.txt", text)


def reply_pending(folder: Path) -> bool:
    """Is a reply written and not yet taken by the child?"""
    return (folder / "reply.txt").exists()


def write_control(folder: Path, kind: str, text: str) -> None:
    """``_stop``, ``_keyinfo`` or ``_intervene``. The child acts on ``_stop``
    only if it is not empty; text for the other two is added to what is
    there and not yet consumed, after a blank line."""
    path = folder / CONTROL_FILES[kind]
    if kind == "stop":
        write_atomic(path, text or "stop\n")
        return
    try:
        earlier = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        earlier = ""
    write_atomic(path, f"{earlier}\n\n{text}" if earlier else text)
