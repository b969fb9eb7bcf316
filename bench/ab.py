"""``python -m bench.ab BASE [HEAD]``: is HEAD slower than BASE? A regression guard for speed.

    python -m bench.ab 2032d30                 # that commit against this working tree
    python -m bench.ab 2032d30 HEAD            # against the commit HEAD
    python -m bench.ab main ../other-tree      # a directory works for either side
    python -m bench.ab HEAD HEAD --quick       # A against A: how much the machine moves

BASE and HEAD are git revisions of this checkout's repository (anything
``git rev-parse`` takes) or directories holding a ``zmesh/`` package. A
revision is exported (``git archive``) into a temporary directory; HEAD
left out means **this working tree as it is now**, uncommitted edits
included (its ``zmesh/`` is copied at the start, so editing during a run
changes nothing). Every temporary tree is removed at the end, also on
Ctrl-C or SIGTERM.

Both trees are measured with the bench of *this* checkout: a copy of its
``bench/`` package goes first on ``PYTHONPATH``, the tree second, so
``zmesh`` comes from the tree and the workloads are the same code for both
(they use only API that old trees have; what a tree lacks, such as
``inline=`` or ``Node.wait_acked``, is worked around and said under the
table). Each measurement is a fresh ``python -m bench.ab_measure`` process.

For each Python (default: the oldest and the newest supported one
installed, see :func:`find_pythons`; ``--python`` to choose), each round
runs every workload once on BASE and once on HEAD, back to back, BASE
first in odd rounds and HEAD first in even ones (A B, B A, ...), so a drift
in the machine's load touches both alike. Per round the figure becomes a
cost ratio, **HEAD cost / BASE cost** (for a rate, BASE's rate over HEAD's;
for a time, HEAD's time over BASE's): below 1 HEAD is faster. The table
gives, per Python and workload, both medians, the median ratio, its
min..max over the rounds, and a verdict:

* ``same``: every round's ratio within the dead band (default ±2 %, ``--band``);
* ``faster`` / ``slower``: every round's ratio below / above 1 (and not all within the band);
* ``inconclusive``: the rounds straddle 1; the spread cannot tell.

With ``--check`` the exit status is 1 when any row says ``slower``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT",
    "WORKLOADS",
    "Summary",
    "Tree",
    "Workload",
    "cost_ratio",
    "find_pythons",
    "main",
    "parse",
    "pick_pythons",
    "summarise",
    "trees",
    "verdict",
]

HERE = Path(__file__).resolve().parent  # this checkout's bench/
ROOT = HERE.parent
MIN_ROUNDS = 5
BAND = 0.02
#: What one measurement may take before it counts as failed (seconds).
MEASURE_TIMEOUT = 900.0


@dataclass(frozen=True)
class Workload:
    """One row: what is measured, its unit, which way is better, its count at ``--scale 1``."""

    name: str
    what: str
    unit: str
    higher_is_better: bool
    n: int


#: Every workload bench.ab knows (bench/ab_measure.py runs them), in table order.
WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    Workload("oneway", "one-way, 2 processes, plain handler with inline=True", "msg/s", True, 50_000),
    Workload("oneway-async", "one-way, 2 processes, async def handler", "msg/s", True, 50_000),
    Workload("rtt", "request round trip p50, inline=True echo", "us", False, 3_000),
    Workload("rtt-async", "request round trip p50, async def echo", "us", False, 3_000),
    Workload("paced", "one-way, sender yields to its loop after every send", "msg/s", True, 20_000),
    Workload("fanout", "broadcast to 4 subscriber processes", "deliv/s", True, 10_000),
    Workload("inflight64", "requests with 64 outstanding", "req/s", True, 30_000),
    Workload("qos1", "one-way at QoS 1, until every ack is in", "msg/s", True, 30_000),
    # not run unless named (--workloads), or with --workloads all
    Workload("qos1-async", "one-way at QoS 1, async def handler", "msg/s", True, 30_000),
    Workload("rtt-p99", "request round trip p99, inline=True echo", "us", False, 3_000),
    Workload("rtt-loaded-p99", "round trip p99 while a second sender floods the echo's node", "us", False, 3_000),
    Workload("payload-64k", "one-way, 64 KiB envelopes", "msg/s", True, 2_000),
    Workload("payload-1m", "one-way, 1 MiB envelopes", "msg/s", True, 200),
    Workload("send-cost", "CPU per message, send + inline receive, one process (inproc)", "us CPU", False, 20_000),
    Workload("send-cost-async", "the same, async def handler", "us CPU", False, 20_000),
    Workload("request-async", "CPU per request + reply, async def echo (inproc)", "us CPU", False, 5_000),
    Workload("sender-cost", "CPU per message of the send path alone (zmq, frames dropped)", "us CPU", False, 20_000),
    Workload("send-cost-qos1", "CPU per QoS 1 message, inline handler (inproc)", "us CPU", False, 20_000),
    Workload("send-cost-qos1-async", "CPU per QoS 1 message, async def handler (inproc)", "us CPU", False, 20_000),
)}  # fmt: skip
#: The workloads of issue 23, run by default.
DEFAULT = ("oneway", "oneway-async", "rtt", "rtt-async", "paced", "fanout", "inflight64", "qos1")


# ------------------------------------------------------------------ judging


def cost_ratio(base: float, head: float, higher_is_better: bool) -> float:
    """HEAD cost / BASE cost: below 1, HEAD is faster."""
    return base / head if higher_is_better else head / base


def verdict(lo: float, hi: float, band: float = BAND) -> str:
    """``same``, ``faster``, ``slower`` or ``inconclusive`` for a min..max range of cost ratios."""
    if lo >= 1 - band and hi <= 1 + band:
        return "same"
    if hi < 1:
        return "faster"
    if lo > 1:
        return "slower"
    return "inconclusive"


@dataclass
class Summary:
    """One row of the table."""

    workload: str
    base: float | None  # median figure
    head: float | None
    ratio: float | None  # median of the rounds' cost ratios
    lo: float | None
    hi: float | None
    rounds: int
    verdict: str  # same / faster / slower / inconclusive / n/a


def summarise(workload: Workload, pairs: Sequence[tuple[float, float]], band: float = BAND) -> Summary:
    """Median figures, median cost ratio and its min..max over the rounds' (base, head) pairs."""
    if not pairs:
        return Summary(workload.name, None, None, None, None, None, 0, "n/a")
    ratios = [cost_ratio(b, h, workload.higher_is_better) for b, h in pairs]
    lo, hi = min(ratios), max(ratios)
    return Summary(
        workload.name,
        float(statistics.median(b for b, _ in pairs)),
        float(statistics.median(h for _, h in pairs)),
        float(statistics.median(ratios)),
        lo,
        hi,
        len(pairs),
        verdict(lo, hi, band),
    )


def order(round_index: int) -> tuple[str, str]:
    """Which side runs first in round *round_index* (0-based): A B, then B A, ..."""
    return ("base", "head") if round_index % 2 == 0 else ("head", "base")


# ------------------------------------------------------------------ trees


@dataclass
class Tree:
    """One side: where its ``zmesh/`` is, and what to call it."""

    spec: str  # what the user gave ("" = the working tree)
    path: Path
    label: str
    commit: str = ""  # full sha, when known
    temporary: bool = False


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout.strip()


def _is_tree(path: Path) -> bool:
    return (path / "zmesh" / "__init__.py").is_file()


def export(repo: Path, commit: str, dest: Path) -> None:
    """Write the tree of *commit* into *dest* (``git archive``; no worktree, nothing left in the repo)."""
    dest.mkdir(parents=True)
    with subprocess.Popen(["git", "-C", str(repo), "archive", "--format=tar", commit],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(dest, filter="data")
                else:  # pragma: no cover - Pythons before the tarfile filters
                    tar.extractall(dest)  # noqa: S202 - our own repository's archive
        except tarfile.TarError as exc:
            raise SystemExit(f"git archive {commit}: {proc.stderr.read().decode(errors='replace').strip() or exc}")
        err = proc.stderr.read().decode(errors="replace")
        if proc.wait(timeout=60) != 0:
            raise SystemExit(f"git archive {commit}: {err.strip() or 'failed'}")


def resolve(spec: str | None, repo: Path, tmp: Path, side: str) -> Tree:
    """*spec* (a revision, a directory, or None for the working tree) as a :class:`Tree` under *tmp*."""
    if spec is None:  # the working tree, frozen now
        dest = tmp / f"{side}-worktree"
        shutil.copytree(repo / "zmesh", dest / "zmesh", ignore=shutil.ignore_patterns("__pycache__"))
        head = _git(repo, "rev-parse", "HEAD")
        dirty = _git(repo, "status", "--porcelain", "--", "zmesh")
        label = f"working tree ({head[:7]}{' + uncommitted changes to zmesh/' if dirty else ', clean'})"
        return Tree("", dest, label, head if not dirty else "", temporary=True)
    path = Path(spec).expanduser()
    if path.is_dir():
        if not _is_tree(path):
            raise SystemExit(f"{spec}: a directory without zmesh/__init__.py")
        return Tree(spec, path.resolve(), f"directory {path.resolve()}")
    done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{spec}: neither a revision of {repo} nor a directory")
    commit = done.stdout.strip()
    subject = _git(repo, "log", "-1", "--format=%s", commit)
    dest = tmp / f"{side}-{commit[:12]}"
    export(repo, commit, dest)
    if not _is_tree(dest):
        raise SystemExit(f"{spec} ({commit[:7]}) has no zmesh/__init__.py")
    return Tree(spec, dest, f"{commit[:7]} {subject[:60]}", commit, temporary=True)


@contextlib.contextmanager
def trees(base: str, head: str | None, repo: Path = ROOT) -> Iterator[tuple[Tree, Tree, Path]]:
    """BASE and HEAD as trees, and a copy of this checkout's bench to put first on PYTHONPATH;
    everything temporary is removed on the way out, whatever happened."""
    tmp = Path(tempfile.mkdtemp(prefix="zmesh-ab-"))
    try:
        shim = tmp / "bench-path"
        shutil.copytree(HERE, shim / "bench", ignore=shutil.ignore_patterns("__pycache__", "out"))
        yield resolve(base, repo, tmp, "base"), resolve(head, repo, tmp, "head"), shim
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------ Pythons


def _min_python(root: Path = ROOT) -> tuple[int, int]:
    try:
        text = (root / "pyproject.toml").read_text()
    except OSError:
        return (3, 10)
    found = re.search(r'requires-python\s*=\s*">=\s*(\d+)\.(\d+)', text)
    return (int(found.group(1)), int(found.group(2))) if found else (3, 10)


_PROBE = (
    "import importlib.util as u, sys; "
    "print(sys.version_info[0], sys.version_info[1], sys.prefix, "
    "all(u.find_spec(m) is not None for m in ('zmq', 'msgpack', 'zeroconf', 'ifaddr')))"
)


def _candidates() -> list[str]:
    """Interpreters to look at: this one, venvs beside this one's, the CI's venvs,
    pyenv's versions, then python3.X on PATH."""
    out = [sys.executable]
    with contextlib.suppress(OSError):
        out += sorted(str(d / "bin" / "python") for d in Path(sys.prefix).parent.iterdir()
                      if (d / "pyvenv.cfg").is_file())  # fmt: skip
    out += sorted(str(p) for p in ROOT.glob(".ci/venv-*/bin/python"))
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    out += sorted(str(p) for p in pyenv.glob("versions/3.*/bin/python"))
    for minor in range(10, 20):
        found = shutil.which(f"python3.{minor}")
        if found:
            out.append(found)
    return list(dict.fromkeys(p for p in out if os.access(p, os.X_OK)))


def _probe(python: str) -> tuple[tuple[int, int], str, bool] | None:
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=30)
        major, minor, prefix, ok = done.stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return (int(major), int(minor)), prefix, ok == "True"


def pick_pythons(probed: Sequence[tuple[str, tuple[int, int], bool]], minimum: tuple[int, int]) -> list[str]:
    """The first interpreter of the oldest and of the newest version >= *minimum* that can import zmesh's
    dependencies (one if they are the same version)."""
    by_version: dict[tuple[int, int], str] = {}
    for python, version, ok in probed:
        if ok and version >= minimum and version not in by_version:
            by_version[version] = python
    if not by_version:
        return []
    versions = sorted(by_version)
    return list(dict.fromkeys([by_version[versions[0]], by_version[versions[-1]]]))


def find_pythons() -> list[str]:
    """The oldest and the newest supported Python installed that have pyzmq, msgpack, zeroconf, ifaddr."""
    probed = []
    seen: set[str] = set()
    for python in _candidates():
        got = _probe(python)
        if got is None or got[1] in seen:  # the same environment under another name
            continue
        seen.add(got[1])
        probed.append((python, got[0], got[2]))
    return pick_pythons(probed, _min_python())


# ------------------------------------------------------------------ measuring


def measure(python: str, tree: Tree, shim: Path, workload: Workload, scale: float) -> tuple[float | None, str]:
    """One measurement in a fresh process: (figure, "") or (None, why not)."""
    n = max(10, int(workload.n * scale))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(shim), str(tree.path)]),
               ZMESH_INTERFACES="127.0.0.1", ZMESH_AB_TREE=str(tree.path), PYTHONUNBUFFERED="1")  # fmt: skip
    # cwd = the bench copy: ``-m`` puts the cwd first on sys.path, and no zmesh/ may be there
    proc = subprocess.Popen([python, "-m", "bench.ab_measure", workload.name, str(n), repr(scale)],
                            cwd=shim, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=MEASURE_TIMEOUT)
    except subprocess.TimeoutExpired:
        _stop(proc)
        return None, f"no result within {MEASURE_TIMEOUT:.0f} s"
    except BaseException:  # Ctrl-C, SIGTERM: let it stop its peers, then make sure
        _stop(proc)
        raise
    for line in out.splitlines():
        if line.startswith("AB_RESULT "):
            data = json.loads(line[10:])
            return float(data["value"]), "\n".join(data.get("notes") or [])
        if line.startswith("AB_ERROR "):
            return None, line[9:]
    return None, f"exit {proc.returncode}: {err.strip()[-500:]}"


def _stop(proc: subprocess.Popen[str]) -> None:
    for action in (proc.terminate, proc.kill):
        if proc.poll() is not None:
            break
        action()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            continue


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if unit.startswith("us") else f"{value:,.0f}"


def table(summaries: Sequence[Summary]) -> str:
    head = ["workload", "unit", "BASE", "HEAD", "HEAD/BASE cost", "min..max", "rounds", "verdict"]
    rows = []
    for s in summaries:
        w = WORKLOADS[s.workload]
        rows.append([
            s.workload, w.unit, _fmt(s.base, w.unit), _fmt(s.head, w.unit),
            "-" if s.ratio is None else f"{s.ratio:.3f}",
            "-" if s.lo is None or s.hi is None else f"{s.lo:.3f}..{s.hi:.3f}",
            str(s.rounds), s.verdict,
        ])  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        padded = (c.ljust(w) if i in (0, 1, 7) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def _version(python: str) -> str:
    try:
        return subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or "?"  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "?"


def _loadavg() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def run(ns: argparse.Namespace, base: Tree, head: Tree, shim: Path) -> dict[str, Any]:
    """Every round on every Python; prints each Python's table as it is done."""
    names: list[str] = ns.workloads
    doc: dict[str, Any] = {"base": base.__dict__ | {"path": str(base.path)},
                           "head": head.__dict__ | {"path": str(head.path)},
                           "rounds": ns.rounds, "scale": ns.scale, "band": ns.band, "pythons": []}  # fmt: skip
    print(f"BASE: {base.label}\nHEAD: {head.label}")
    print(f"{ns.rounds} rounds, BASE and HEAD back to back (A B, B A, ...), scale {ns.scale:g}; "
          f"ratio = HEAD cost / BASE cost (< 1: HEAD faster; for a rate BASE/HEAD, for a time HEAD/BASE), "
          f"the median and min..max of the rounds' ratios; verdict: same = every round within "
          f"±{ns.band * 100:g} %, faster/slower = every round on that side of 1, "
          f"inconclusive = the rounds straddle 1.", flush=True)  # fmt: skip
    for python in ns.python:
        version = _version(python)
        pairs: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        errors: dict[str, list[str]] = {name: [] for name in names}
        notes: dict[str, set[str]] = {"base": set(), "head": set()}
        values: dict[str, list[dict[str, float | None]]] = {name: [] for name in names}
        started = time.monotonic()
        load_before = _loadavg()
        for r in range(ns.rounds):
            for name in names:
                w = WORKLOADS[name]
                got: dict[str, float | None] = {}
                for side in order(r):
                    tree = base if side == "base" else head
                    value, text = measure(python, tree, shim, w, ns.scale)
                    got[side] = value
                    if value is None:
                        errors[name].append(f"{side} round {r + 1}: {text}")
                    elif text:
                        notes[side].update(text.splitlines())
                values[name].append(dict(got))
                b, h = got["base"], got["head"]
                if b is not None and h is not None and b > 0 and h > 0:
                    pairs[name].append((b, h))
                    ratio = f"cost {cost_ratio(b, h, w.higher_is_better):.3f}"
                else:
                    ratio = "failed"
                _note(f"Python {version} round {r + 1}/{ns.rounds} {name}: BASE {_fmt(b, w.unit)} "
                      f"HEAD {_fmt(h, w.unit)} {w.unit} ({ratio})")  # fmt: skip
        summaries = [summarise(WORKLOADS[name], pairs[name], ns.band) for name in names]
        load_after = _loadavg()
        print(f"\nPython {version} ({python}), {time.monotonic() - started:.0f} s, "
              f"load average (1 min) {load_before} before, {load_after} after:")
        print(table(summaries))
        for side, tree in (("base", base), ("head", head)):
            for text in sorted(notes[side]):
                print(f"  {side.upper()} ({tree.label.split(' ')[0]}): {text}")
        for name in names:
            for text in errors[name][:3]:
                print(f"  {name} failed: {text}")
            if len(errors[name]) > 3:
                print(f"  {name}: {len(errors[name]) - 3} more failures")
        sys.stdout.flush()
        doc["pythons"].append({
            "python": python, "version": version, "runs": values,
            "loadavg_1min": [load_before, load_after],
            "summaries": [s.__dict__ for s in summaries],
            "errors": errors, "notes": {k: sorted(v) for k, v in notes.items()},
        })  # fmt: skip
    return doc


# ------------------------------------------------------------------ command line


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.ab",
        description="Two zmesh revisions against each other, interleaved round by round, "
        "on the oldest and the newest Python: median HEAD/BASE cost ratio, its spread, a verdict.",
    )
    p.add_argument("base", nargs="?", help="git revision (or directory with zmesh/) to compare against")
    p.add_argument("head", nargs="?", help="git revision or directory (default: this working tree, as it is now)")
    p.add_argument("--rounds", type=int, help=f"rounds (default {MIN_ROUNDS}; at least {MIN_ROUNDS} unless --quick)")
    p.add_argument("--scale", type=float, help="multiply every message count (default 1; --quick: 0.2)")
    p.add_argument("--workloads", default=",".join(DEFAULT),
                   help=f"comma-separated, or 'all' (default: {','.join(DEFAULT)}; known: {', '.join(WORKLOADS)})")
    p.add_argument("--python", action="append", help="interpreter to run (repeatable; default: the oldest and "
                   "the newest supported Python installed with zmesh's dependencies)")  # fmt: skip
    p.add_argument("--band", type=float, default=BAND, help=f"dead band of 'same' (default {BAND})")
    p.add_argument("--quick", action="store_true", help="a trial: scale 0.2, 3 rounds, fewer than 5 allowed")
    p.add_argument("--json", type=Path, help="also write every round's figures and the summaries here")
    p.add_argument("--check", action="store_true", help="exit status 1 if any workload is 'slower'")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    ns = p.parse_args(argv)
    if ns.list:
        return ns
    if ns.base is None:
        p.error("BASE is required (a git revision or a directory with zmesh/)")
    if ns.rounds is None:
        ns.rounds = 3 if ns.quick else MIN_ROUNDS
    if ns.rounds < 1 or (ns.rounds < MIN_ROUNDS and not ns.quick):
        p.error(f"--rounds: at least {MIN_ROUNDS} (fewer only with --quick)")
    if ns.scale is None:
        ns.scale = 0.2 if ns.quick else 1.0
    if ns.scale <= 0:
        p.error("--scale must be positive")
    if not 0 <= ns.band < 1:
        p.error("--band must be in [0, 1)")
    spec = [s.strip() for s in ns.workloads.split(",") if s.strip()]
    names = list(WORKLOADS) if spec == ["all"] else spec
    unknown = [s for s in names if s not in WORKLOADS]
    if unknown or not names:
        p.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'} (known: {', '.join(WORKLOADS)})")
    ns.workloads = list(dict.fromkeys(names))
    if ns.python:
        found = [shutil.which(py) or py for py in ns.python]
        missing = [py for py in found if not os.access(py, os.X_OK)]
        if missing:
            p.error(f"--python: not an interpreter: {', '.join(missing)}")
        ns.python = found
    return ns


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through trees(): the temporary trees are removed


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse(sys.argv[1:] if argv is None else argv)
    if ns.list:
        for w in WORKLOADS.values():
            flag = "" if w.name in DEFAULT else "  (only when named)"
            print(f"{w.name:22} {w.unit:8} {w.what}{flag}")
        return 0
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    if not ns.python:
        ns.python = find_pythons()
        if not ns.python:
            raise SystemExit("no Python with pyzmq, msgpack, zeroconf and ifaddr found: give one with --python")
    _note(f"Pythons: {', '.join(ns.python)}")
    try:
        with trees(ns.base, ns.head) as (base, head, shim):
            doc = run(ns, base, head, shim)
    except KeyboardInterrupt:
        _note("interrupted: the temporary trees are removed")
        return 130
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"\nresults: {ns.json}")
    slower = [s["workload"] for p in doc["pythons"] for s in p["summaries"] if s["verdict"] == "slower"]
    return 1 if ns.check and slower else 0


if __name__ == "__main__":
    sys.exit(main())
