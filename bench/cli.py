"""``python -m bench``: run the selected systems and workloads, then report."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .envelope import encode
from .report import ATTR, METRICS, SystemResult, fill_spread, more_table, ratios, table, write_chart, write_json
from .systems import BASELINE, DEFAULT, REGISTRY, load_class
from .roles import PACE_EVERY
from .systems.base import WORKLOADS, Sizes, System
from .targets import evaluate, format_targets, format_vs

#: Node counts of the zmesh scale section (``--quick``: the first only).
SCALE_N = (10, 25, 50)

QUICK = Sizes(
    throughput_n=20_000, rtt_n=1_000, fanout_n=5_000, warmup=1_000, rtt_warmup=200, timeout=60.0, repeat=3,
    paced_n=5_000, inflight_n=10_000, payload_64k_n=1_000, payload_1m_n=100,
)  # fmt: skip
FULL = Sizes(
    throughput_n=200_000,
    rtt_n=10_000,
    fanout_n=50_000,
    warmup=5_000,
    rtt_warmup=1_000,
    timeout=300.0,
    repeat=3,
    paced_n=50_000,
    inflight_n=100_000,
    payload_64k_n=10_000,
    payload_1m_n=1_000,
)


class Progress:
    """tqdm if installed, else one plain line per finished step."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self._bar: Any = None
        try:
            tqdm = importlib.import_module("tqdm").tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, unit="run", file=sys.stderr, dynamic_ncols=True)

    def start(self, what: str) -> None:
        if self._bar is not None:
            self._bar.set_description(what)
        else:
            print(f"[{self.done + 1}/{self.total}] {what} ...", file=sys.stderr, flush=True)

    def finish(self, what: str, outcome: str) -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(f"{what}: {outcome}")
            self._bar.update(1)
        else:
            print(f"[{self.done}/{self.total}] {what}: {outcome}", file=sys.stderr, flush=True)

    def skip(self, count: int) -> None:
        """Count *count* planned steps that will not run."""
        if count <= 0:
            return
        self.done += count
        if self._bar is not None:
            self._bar.update(count)

    def note(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Side-by-side one-way throughput, request/reply RTT and fan-out on 127.0.0.1.",
    )
    p.add_argument("--quick", action="store_true", help="small counts: the whole run in three to four minutes")
    p.add_argument(
        "--systems",
        default=",".join(DEFAULT),
        help=f"comma-separated subset of: {', '.join(REGISTRY)} (default: {','.join(DEFAULT)})",
    )
    p.add_argument("--workloads", default=",".join(WORKLOADS), help=f"subset of: {', '.join(WORKLOADS)}")
    p.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "out", help="output directory"
    )
    p.add_argument("-n", "--throughput-n", type=int, help="one-way messages (after warm-up)")
    p.add_argument("--rtt-n", type=int, help="measured round trips (after warm-up)")
    p.add_argument("--fanout-n", type=int, help="messages per subscriber in fan-out")
    p.add_argument("--subscribers", type=int, help="fan-out subscriber processes (default 4)")
    p.add_argument("--repeat", type=int, help="runs per workload, median reported (default 3)")
    p.add_argument("--no-chart", action="store_true", help="skip the PNG")
    p.add_argument("--list", action="store_true", help="list the systems and exit")
    p.add_argument(
        "--scale",
        action="store_true",
        help="run only the zmesh join-time and scale/cost section (N=10,25,50; --quick: N=10); "
        "writes OUT/scale.json",
    )
    p.add_argument("--scale-n", help="node counts for the scale section, e.g. 10,25 (default 10,25,50)")
    p.add_argument(
        "--scale-heartbeat",
        type=float,
        help="zmesh heartbeat in seconds for the scale section (evasive 3x, expire 6x; default: zmesh's 0.5)",
    )
    p.add_argument(
        "--no-scale",
        action="store_true",
        help="skip the zmesh join-time and scale section that runs after the table when zmesh is selected",
    )
    return p.parse_args(argv)


def _sizes(ns: argparse.Namespace) -> Sizes:
    base = QUICK if ns.quick else FULL
    return Sizes(
        throughput_n=ns.throughput_n or base.throughput_n,
        rtt_n=ns.rtt_n or base.rtt_n,
        fanout_n=ns.fanout_n or base.fanout_n,
        subscribers=ns.subscribers or base.subscribers,
        warmup=base.warmup,
        rtt_warmup=base.rtt_warmup,
        timeout=base.timeout,
        repeat=max(1, ns.repeat or base.repeat),
        paced_n=base.paced_n,
        inflight_n=base.inflight_n,
        payload_64k_n=base.payload_64k_n,
        payload_1m_n=base.payload_1m_n,
    )


def _select(spec: str, known: Sequence[str], what: str) -> list[str]:
    chosen = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return chosen


def _fmt(workload: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, (tuple, list)):
        return f"p50 {value[0]:,.0f} us, p99 {value[1]:,.0f} us"
    return f"{value:,.0f}/s"


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _runner(system: System, workload: str, sizes: Sizes) -> Callable[[], Any]:
    """One run of *workload* on *system*."""
    return lambda: system.measure(workload, sizes.count(workload))


def _record(res: SystemResult, workload: str, values: list[Any]) -> None:
    """Store every repeat's value and the medians of one workload (each of its metrics)."""
    if not values or workload in res.errors:
        return
    res.runs[workload] = [list(v) if isinstance(v, tuple) else v for v in values]
    for metric, (w, index) in METRICS.items():
        if w == workload:
            setattr(res, ATTR[metric], _median([v[index] if index is not None else v for v in values]))
    fill_spread(res)


def rotation(members: Sequence[Any], i: int) -> list[Any]:
    """Repeat *i*'s order: every member once, starting at member ``i % len``."""
    if not members:
        return []
    k = i % len(members)
    return [*members[k:], *members[:k]]


def _run_interleaved(
    plan: list[tuple[System, SystemResult, list[str]]],
    workloads: list[str],
    sizes: Sizes,
    progress: Progress,
) -> None:
    """Every system's server up for the whole run; then, per workload, each
    repeat runs every system once (the start rotating) before the next repeat,
    so a drift in the machine's load touches every system alike."""
    ready: list[tuple[System, SystemResult, list[str]]] = []
    started: list[System] = []  # every system whose setup() was called, even if it failed
    try:  # teardown runs whatever happens, Ctrl-C included
        for system, res, todo in plan:
            try:
                started.append(system)
                system.setup()
                res.versions = system.versions()
                ready.append((system, res, todo))
            except Exception as exc:  # noqa: BLE001 - a server that will not start fails its workloads only
                for w in todo:
                    res.errors[w] = f"setup failed: {exc}"
                progress.skip(len(todo) * sizes.repeat)
                progress.note(f"{system.key}: setup failed: {exc}")
        for w in workloads:
            members = [(system, res) for system, res, todo in ready if w in todo and w not in res.errors]
            values: dict[str, list[Any]] = {res.key: [] for _, res in members}
            done: set[str] = set()  # failed or not applicable: no more repeats
            for i in range(sizes.repeat):
                for system, res in rotation(members, i):
                    if res.key in done:
                        continue
                    what = f"{res.key} {w}"
                    progress.start(what if sizes.repeat == 1 else f"{what} {i + 1}/{sizes.repeat}")
                    t = time.monotonic()
                    try:
                        value = _runner(system, w, sizes)()
                    except Exception as exc:  # noqa: BLE001 - one failed run is reported, the bench goes on
                        res.errors[w] = f"{type(exc).__name__}: {exc}"[:500]
                        value, outcome = None, "error"
                    else:
                        outcome = _fmt(w, value)
                    res.seconds[w] = round(res.seconds.get(w, 0.0) + time.monotonic() - t, 2)
                    progress.finish(what, outcome)
                    if value is None:
                        done.add(res.key)
                        progress.skip(sizes.repeat - i - 1)
                        continue
                    values[res.key].append(value)
            for _, res in members:
                _record(res, w, values[res.key])
    finally:
        for system in reversed(started):
            system.teardown()


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _applicable(system: System, workloads: list[str]) -> list[str]:
    supports = getattr(system, "supports", None)
    return [w for w in workloads if supports is None or w in supports]


def _scale_ns(ns: argparse.Namespace) -> list[int]:
    if ns.scale_n:
        try:
            values = [int(x) for x in ns.scale_n.split(",") if x.strip()]
        except ValueError:
            raise SystemExit(f"--scale-n: not a list of integers: {ns.scale_n!r}") from None
        if not values or any(v < 2 for v in values):
            raise SystemExit("--scale-n: every node count must be at least 2")
        return values
    return list(SCALE_N[:1] if ns.quick else SCALE_N)


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run_zmesh_extras(ns: argparse.Namespace, repeat: int) -> dict[str, Any]:
    """zmesh join time and the scale/cost section (bench/scale.py); errors are recorded, not raised."""
    from .scale import (
        format_join,
        format_scale,
        measure_join,
        measure_scale,
        scale_targets,
    )
    from .systems.zmesh_mesh import zmesh_versions

    out: dict[str, Any] = {"zmesh_versions": zmesh_versions()}
    _note("zmesh join time: a new node process joins a mesh of 4 through one seed ...")
    try:
        out["zmesh_join"] = measure_join(repeat=repeat, note=_note)
    except Exception as exc:  # noqa: BLE001 - report and go on
        out["zmesh_join"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    scale: list[dict[str, Any]] = []
    for n in _scale_ns(ns):
        _note(f"zmesh scale: {n} node processes ...")
        t = time.monotonic()
        try:
            res = measure_scale(n, note=_note, heartbeat=ns.scale_heartbeat)
        except Exception as exc:  # noqa: BLE001 - report and go on
            res = {"n": n, "error": f"{type(exc).__name__}: {exc}"[:500]}
        res["wall_s"] = round(time.monotonic() - t, 1)
        scale.append(res)
    out["zmesh_scale"] = scale
    out["zmesh_scale_targets"] = scale_targets(scale)
    out["_text"] = format_join(out["zmesh_join"]) + "\n\n" + format_scale(scale)
    return out


def _scale_only(ns: argparse.Namespace) -> int:
    """``python -m bench --scale``: only the zmesh join-time and scale section."""
    started = time.monotonic()
    load_before = _loadavg()
    try:
        extras = _run_zmesh_extras(ns, 3)
    except KeyboardInterrupt:
        print("interrupted: every node process was stopped", file=sys.stderr)
        return 130
    text = extras.pop("_text")
    out: Path = ns.out
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scale.json"
    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": "scale" + (" (quick)" if ns.quick else ""),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": _loadavg(),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    path.write_text(json.dumps({"meta": meta, **extras}, indent=2) + "\n")
    print()
    print(text)
    print()
    print(f"results: {path}")
    print(f"total time: {time.monotonic() - started:.1f} s")
    return 0


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through every finally: peers and servers get stopped


def main(argv: Sequence[str] | None = None) -> int:
    ns = _parse(sys.argv[1:] if argv is None else argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    if ns.list:
        for key, target in REGISTRY.items():
            print(f"{key:14} {target}{'' if key in DEFAULT else '  (only when named)'}")
        return 0
    if ns.scale:
        return _scale_only(ns)
    keys = _select(ns.systems, list(REGISTRY), "system")
    workloads = _select(ns.workloads, WORKLOADS, "workload")
    sizes = _sizes(ns)
    started = time.monotonic()

    plan: list[tuple[System, SystemResult, list[str]]] = []
    results: list[SystemResult] = []
    for key in keys:
        try:
            cls = load_class(key)
        except ImportError as exc:
            results.append(SystemResult(key=key, label=key, skipped=f"cannot import: {exc}"))
            print(f"{key}: cannot import: {exc}", file=sys.stderr)
            continue
        system = cls(sizes)
        res = SystemResult(key=key, label=cls.label, notes=cls.notes)
        results.append(res)
        ok, note = system.available()
        if not ok:
            res.skipped = note
            print(note, file=sys.stderr)
            continue
        plan.append((system, res, _applicable(system, workloads)))

    mode = "quick" if ns.quick else "full"
    print(
        f"bench ({mode}): one-way n={sizes.throughput_n:,}, RTT n={sizes.rtt_n:,}, "
        f"fan-out n={sizes.fanout_n:,} x {sizes.subscribers} subscribers, paced n={sizes.paced_n:,}, "
        f"64 in flight n={sizes.inflight_n:,}, 64 KiB n={sizes.payload_64k_n:,}, 1 MiB n={sizes.payload_1m_n:,}; "
        f"envelope {len(encode(0))} bytes; median of {sizes.repeat} run(s) each, interleaved",
        file=sys.stderr,
    )
    load_before = _loadavg()
    if load_before is not None and load_before > 0.5:
        print(
            f"note: load average {load_before:.2f} before start: other processes share the "
            f"{os.cpu_count()} CPUs, so the numbers will be noisier",
            file=sys.stderr,
        )
    progress = Progress(sum(len(w) for _, _, w in plan) * sizes.repeat)
    interrupted = False
    try:
        _run_interleaved(plan, workloads, sizes, progress)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        progress.close()
    if interrupted:
        print("interrupted: reporting what finished", file=sys.stderr)
    extras: dict[str, Any] = {}
    if "zmesh" in keys and not ns.no_scale and not interrupted:
        try:
            extras = _run_zmesh_extras(ns, sizes.repeat)
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted: zmesh scale section skipped", file=sys.stderr)
    extra_text = extras.pop("_text", "")
    targets = evaluate(results)
    extras = {
        "ratios_vs_nats": ratios(results, "nats"),
        "targets": targets,
        **extras,
    }
    elapsed = time.monotonic() - started

    meta = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "sizes": sizes.__dict__,
        "envelope_bytes": len(encode(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "elapsed_s": round(elapsed, 1),
        "interrupted": interrupted,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": _loadavg(),
        "repeat": sizes.repeat,
        "aggregate": "median over repeats (RTT: median of the p50s and of the p99s); spread = min..max",
        "order": "per workload, each repeat runs every system once, the first one rotating; "
        "servers stay up for the whole run",
        "pace_every": PACE_EVERY,
        "method": {
            "throughput": "sender clock before its first measured envelope -> receiver clock at its n-th "
            "(CLOCK_MONOTONIC, same host); after a warm-up the receiver counts and discards",
            "rtt": "one request at a time, encode -> reply decoded, p50/p99 nearest rank, after warm-up",
            "fanout": "subscribers x n deliveries / (publisher start -> last subscriber's n-th envelope)",
            "paced": "as throughput, the sender yielding to its event loop (asyncio.sleep(0)) after every send",
            "inflight64": "n requests / (first timed request -> last reply), 64 outstanding all along",
            "payload-64k": "as throughput, every data envelope 65,536 bytes",
            "payload-1m": "as throughput, every data envelope 1,048,576 bytes",
            "rtt-loaded": "as rtt, while a second sender floods an agent on the echo server's node",
        },
    }
    out: Path = ns.out
    json_path, png_path = out / "results.json", out / "results.png"
    write_json(json_path, meta, results, BASELINE, extras)
    print()
    print(table(results, BASELINE, sizes.subscribers))
    print()
    more = more_table(results, BASELINE)
    if more:
        print(more)
        print()
    if any(r.key.startswith("zmesh") and not r.skipped for r in results):
        print(format_vs(results, "nats"))
        print()
        print(format_targets(targets))
        print()
    if extra_text:
        print(extra_text)
        print()
    print(f"results: {json_path}")
    if ns.no_chart:
        print("chart: skipped (--no-chart)")
    else:
        note = write_chart(
            png_path,
            results,
            f"zmesh bench ({mode}), {platform.node() or 'host'}, "
            f"{os.cpu_count()} CPUs, {len(encode(0))}-byte msgpack envelope",
            sizes.subscribers,
        )
        print(f"chart: {note}" if note else f"chart: {png_path}")
    print(f"total time: {elapsed:.1f} s")
    return 130 if interrupted else 0
