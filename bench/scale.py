"""zmesh-only measurements: join time, and scale and idle cost with N nodes.

Every node is its own OS process (``python -m bench.meshnode``), local-only
(``interfaces="local"``, ``discovery=False``, ``ZMESH_INTERFACES=127.0.0.1``),
hosting one agent, and joins through the first node's endpoint as its only
seed.

* **Join time**: a mesh of 4 nodes is up and complete; a new node process
  starts with ONE seed (the last node's endpoint) and we time until its
  registry holds every agent of the mesh (from just before its
  ``Node.start()``; also from the orchestrator's ``Popen``), and until every
  old node has the newcomer's agent too.
* **Scale**: N nodes (10, 25, 50). Time until every node reports a complete
  registry (N agents), then, after the mesh has been idle for a few seconds,
  per node over a 5 s window: CPU (% of one core, utime+stime from
  ``/proc/<pid>/stat``), resident memory (``VmRSS``), open file descriptors
  (``/proc/<pid>/fd``, split into sockets and others), threads, and the
  frames/s the node sends and receives (heartbeats: there is no application
  traffic).

Every child is stopped at the end, whatever happened (STOP, end of stdin,
then SIGTERM, then SIGKILL), and every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .control import BenchTimeout, Deadline
from .harness import HOST, PeerFailed

__all__ = [
    "format_join",
    "format_scale",
    "measure_join",
    "measure_scale",
    "proc_sample",
]

_ROOT = str(Path(__file__).resolve().parent.parent)
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: Idle targets (docs/scaling.md): an idle node with ~10 peers.
TARGET_IDLE_CPU_PCT = 1.0
TARGET_RSS_MB = 40.0

Note = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# ------------------------------------------------------------------ processes


class _Child:
    def __init__(self, index: int, args: dict[str, Any], lines: queue.Queue[tuple[int, str | None]]) -> None:
        self.index = index
        self.name = str(args["name"])
        env = dict(os.environ)
        env["PYTHONPATH"] = _ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        env["ZMESH_INTERFACES"] = HOST  # local only, whatever the caller's environment says
        self.t_spawn = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.meshnode", json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
            env=env,
            cwd=_ROOT,
        )
        self.pid = self.proc.pid
        self._lines = lines
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put((self.index, line.rstrip("\n")))
        self._lines.put((self.index, None))

    def send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass


class Fleet:
    """Mesh-node processes; leaving the ``with`` block stops and reaps all of them."""

    def __init__(self) -> None:
        self.children: list[_Child] = []
        self._lines: queue.Queue[tuple[int, str | None]] = queue.Queue()
        self._held: dict[tuple[int, str], list[dict[str, Any]]] = {}
        self._dead: set[int] = set()

    def __enter__(self) -> Fleet:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spawn(self, args: dict[str, Any]) -> _Child:
        child = _Child(len(self.children), args, self._lines)
        self.children.append(child)
        return child

    def send(self, indices: Iterable[int], line: str) -> None:
        for i in indices:
            self.children[i].send(line)

    def expect(
        self,
        indices: Iterable[int],
        word: str,
        deadline: Deadline,
        what: str = "",
        got: dict[int, dict[str, Any]] | None = None,
    ) -> dict[int, dict[str, Any]]:
        """Wait until every child in *indices* has printed ``WORD json``; return their data.

        Pass *got* to keep what arrived even if the wait fails.
        """
        want = set(indices)
        got = {} if got is None else got
        for i in list(want):
            held = self._held.get((i, word))
            if held:
                got[i] = held.pop(0)
                want.discard(i)
        while want:
            dead = want & self._dead
            if dead:
                raise PeerFailed(f"mesh node(s) {sorted(dead)[:10]} exited before {word}")
            try:
                i, line = self._lines.get(timeout=max(0.001, deadline.left()))
            except queue.Empty:
                raise BenchTimeout(
                    f"{what or word}: {len(got)} of {len(got) + len(want)} nodes in time "
                    f"(missing {sorted(want)[:10]})"
                ) from None
            if line is None:
                self._dead.add(i)
                continue
            head, _, rest = line.partition(" ")
            if head == "ERROR":
                raise PeerFailed(f"mesh node {i}: {rest}")
            if head not in ("READY", "COMPLETE", "STATS"):
                continue  # stray output
            data = json.loads(rest) if rest.strip() else {}
            if head == word and i in want:
                got[i] = data
                want.discard(i)
            else:
                self._held.setdefault((i, head), []).append(data)
        return got

    def close(self) -> None:
        """STOP everyone, then close stdin, then SIGTERM, then SIGKILL; always reaps."""
        for c in self.children:
            c.send("STOP")
        for c in self.children:
            try:
                if c.proc.stdin is not None:
                    c.proc.stdin.close()
            except OSError:
                pass
        deadline = Deadline(10.0)
        for c in self.children:
            try:
                c.proc.wait(timeout=max(0.05, deadline.left()))
            except subprocess.TimeoutExpired:
                pass
        for action in ("terminate", "kill"):
            alive = [c for c in self.children if c.proc.poll() is None]
            if not alive:
                break
            for c in alive:
                try:
                    getattr(c.proc, action)()
                except OSError:
                    pass
            for c in alive:
                try:
                    c.proc.wait(timeout=3.0)
                except subprocess.TimeoutExpired:
                    pass


# ------------------------------------------------------------------ /proc


def proc_sample(pid: int) -> dict[str, Any]:
    """CPU ticks, VmRSS, threads and open fds of one process (Linux /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # after "pid (comm)": state is fields[0]; utime and stime are fields 14 and 15 of stat(5)
    ticks = int(fields[11]) + int(fields[12])
    rss_kb = 0
    threads = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fd_dir = f"/proc/{pid}/fd"
    names = os.listdir(fd_dir)
    kinds: dict[str, int] = {}
    for name in names:
        try:
            target = os.readlink(f"{fd_dir}/{name}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target else "file"
        if kind == "anon_inode":
            kind = target.split(":", 1)[1].strip("[]")  # eventfd, eventpoll, ...
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "t": time.monotonic(),
        "ticks": ticks,
        "rss_kb": rss_kb,
        "threads": threads,
        "fds": len(names),
        "fd_kinds": kinds,
    }


def _summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "min": min(values),
        "median": float(statistics.median(values)),
        "max": max(values),
        "sum": sum(values),
    }


# ------------------------------------------------------------------ join time


def _node_args(mesh: str, i: int, seeds: list[str], expect: Any, timeout: float,
               heartbeat: float | None = None) -> dict[str, Any]:  # fmt: skip
    return {"mesh": mesh, "name": f"n{i:03d}", "agent": f"a{i:03d}", "seeds": seeds, "expect": expect,
            "timeout": timeout, "heartbeat": heartbeat}  # fmt: skip


def _start_mesh(fleet: Fleet, mesh: str, n: int, timeout: float, ready_s: float, complete_s: float,
                note: Note, partial: dict[str, Any] | None = None,
                heartbeat: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Start n nodes (node 0 first, the rest seeded with its endpoint); wait until all are complete.

    *partial* receives the progress so far (kept if a wait fails).
    """
    partial = {} if partial is None else partial
    first = fleet.spawn(_node_args(mesh, 0, [], n, timeout, heartbeat))
    ready0 = fleet.expect([0], "READY", Deadline(ready_s), "first node READY")[0]
    seed = str(ready0["endpoint"])
    t_begin = time.monotonic()
    for i in range(1, n):
        fleet.spawn(_node_args(mesh, i, [seed], n, timeout, heartbeat))
    t_spawned = time.monotonic()
    others = list(range(1, n))
    ready = fleet.expect(others, "READY", Deadline(ready_s), f"{n} nodes READY")
    ready[0] = ready0
    t_all_ready = max(float(r["t_ready"]) for r in ready.values() if r is not ready0) if others else t_begin
    partial["all_ready_s"] = t_all_ready - t_begin
    note(f"  N={n}: all {n} nodes bound after {t_all_ready - t_begin:.1f} s; waiting for complete registries")
    done: dict[int, dict[str, Any]] = {}
    partial["complete"] = done
    fleet.expect(range(n), "COMPLETE", Deadline(complete_s), f"N={n} complete registries", done)
    t_all_complete = max(float(d["t"]) for d in done.values())
    return {
        "seed": seed,
        "first_pid": first.pid,
        "spawn_s": t_spawned - t_begin,
        "all_ready_s": t_all_ready - t_begin,
        "all_complete_s": t_all_complete - t_begin,
        "complete_after_last_ready_s": t_all_complete - t_all_ready,
        "ready": ready,
        "complete": done,
    }


def measure_join(repeat: int = 3, existing: int = 4, note: Note = _quiet) -> dict[str, Any]:
    """Join time of a new node process into a complete mesh of *existing* nodes, through one seed."""
    runs: list[dict[str, float]] = []
    mesh = f"bench-join-{uuid.uuid4().hex[:8]}"
    timeout = 60.0 + 20.0 * repeat
    with Fleet() as fleet:
        base = _start_mesh(fleet, mesh, existing, timeout, 30.0, 30.0, note)
        old = list(range(existing))
        seed = str(base["ready"][existing - 1]["endpoint"])  # one seed: the last node, not the first
        expected = [f"a{i:03d}" for i in range(existing)]
        for r in range(repeat):
            index = existing + r
            agent = f"a{index:03d}"
            fleet.send(old, "EXPECT " + json.dumps([*expected, agent]))
            child = fleet.spawn(_node_args(mesh, index, [seed], [*expected, agent], timeout))
            ready = fleet.expect([index], "READY", Deadline(30.0), "newcomer READY")[index]
            mine = fleet.expect([index], "COMPLETE", Deadline(30.0), "newcomer sees every agent")[index]
            theirs = fleet.expect(old, "COMPLETE", Deadline(30.0), "old nodes see the newcomer")
            t_start = float(ready["t_start"])
            runs.append(
                {
                    "join_s": float(mine["t"]) - t_start,
                    "spawn_to_complete_s": float(mine["t"]) - child.t_spawn,
                    "mesh_converged_s": max(float(d["t"]) for d in theirs.values()) - t_start,
                }
            )
            note(f"  join {r + 1}/{repeat}: {runs[-1]['join_s'] * 1000:.1f} ms")
            child.send("STOP")  # leave (BYE): the old nodes drop it before the next newcomer
            try:
                child.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.proc.kill()
    med = {k: float(statistics.median(r[k] for r in runs)) for k in runs[0]}
    return {
        "existing_nodes": existing,
        "seeds": 1,
        "repeat": repeat,
        "runs": runs,
        "median": med,
        "method": "new node process, one seed (an existing node's endpoint); join_s = from just before "
        "Node.start() in the new process to its registry holding every agent; spawn_to_complete_s adds "
        "interpreter start and imports; mesh_converged_s = until every old node also has the newcomer",
    }


def format_join(res: dict[str, Any]) -> str:
    if "error" in res:
        return f"zmesh join time: error: {res['error']}"
    m = res["median"]
    return "\n".join(
        [
            (
                f"zmesh join time (new node process, 1 seed, mesh of {res['existing_nodes']} nodes; "
                f"median of {res['repeat']}):"
            ),
            f"  registry complete in the newcomer   {m['join_s'] * 1000:8.1f} ms  (from Node.start())",
            f"  ... counting process start-up       {m['spawn_to_complete_s'] * 1000:8.1f} ms  (from Popen)",
            f"  every old node has the newcomer     {m['mesh_converged_s'] * 1000:8.1f} ms  (from Node.start())",
        ]
    )


# ------------------------------------------------------------------ scale


_SUMMARY_KEYS = (
    "cpu_pct", "rss_mb", "fds", "socket_fds", "threads", "peers", "frames_out_per_s", "frames_in_per_s",
    "idle_bytes_in_per_s", "join_bytes_in", "join_frames_in",
)  # fmt: skip


def _rx_bytes(data: dict[str, Any]) -> int:
    rx = data.get("rx", {})
    return int(rx.get("direct_bytes", 0)) + int(rx.get("pub_bytes", 0))


def _rx_frames(data: dict[str, Any]) -> int:
    rx = data.get("rx", {})
    return int(rx.get("direct_frames", 0)) + int(rx.get("pub_frames", 0))


def measure_scale(
    n: int, settle: float = 3.0, window: float = 5.0, note: Note = _quiet, heartbeat: float | None = None
) -> dict[str, Any]:
    """Start n node processes, time full registries, then measure idle cost per node.

    *heartbeat* (seconds) replaces zmesh's default liveness with
    ``LivenessConfig(heartbeat, 3 * heartbeat, 6 * heartbeat)``.
    """
    mesh = f"bench-scale{n}-{uuid.uuid4().hex[:8]}"
    ready_s = 30.0 + 1.5 * n
    complete_s = 30.0 + 1.5 * n
    timeout = ready_s + complete_s + settle + window + 120.0
    out: dict[str, Any] = {"n": n, "settle_s": settle, "window_s": window, "heartbeat_s": heartbeat}
    with Fleet() as fleet:
        partial: dict[str, Any] = {}
        try:
            start = _start_mesh(fleet, mesh, n, timeout, ready_s, complete_s, note, partial, heartbeat)
        except (BenchTimeout, PeerFailed) as exc:
            out["error"] = str(exc)
            out["deadlines_s"] = {"all_bound": ready_s, "all_complete_after_bound": complete_s}
            if "all_ready_s" in partial:
                out["all_ready_s"] = partial["all_ready_s"]
                out["nodes_complete"] = len(partial.get("complete", {}))
            note(f"  N={n}: {exc}; taking a census of the live nodes ...")
            _census(fleet, out, window)
            return out
        for k in ("spawn_s", "all_ready_s", "all_complete_s", "complete_after_last_ready_s"):
            out[k] = start[k]
        note(f"  N={n}: every registry complete after {start['all_complete_s']:.1f} s; idle {settle:.0f} s, "
             f"then a {window:.0f} s window")  # fmt: skip
        time.sleep(settle)
        everyone = range(n)
        fleet.send(everyone, "STATS")
        s1 = fleet.expect(everyone, "STATS", Deadline(30.0), "stats before the window")
        p1 = {c.index: proc_sample(c.pid) for c in fleet.children}
        time.sleep(window)
        p2 = {c.index: proc_sample(c.pid) for c in fleet.children}
        fleet.send(everyone, "STATS")
        s2 = fleet.expect(everyone, "STATS", Deadline(30.0), "stats after the window")
        nodes: list[dict[str, Any]] = []
        for c in fleet.children:
            a, b = p1[c.index], p2[c.index]
            dt = b["t"] - a["t"]
            sa, sb = s1[c.index], s2[c.index]
            nodes.append(
                {
                    "node": c.name,
                    "pid": c.pid,
                    "cpu_pct": 100.0 * (b["ticks"] - a["ticks"]) / _CLK_TCK / dt,
                    "rss_mb": b["rss_kb"] / 1024.0,
                    "fds": b["fds"],
                    "socket_fds": b["fd_kinds"].get("socket", 0),
                    "fd_kinds": b["fd_kinds"],
                    "threads": b["threads"],
                    "peers": sb["peers"],
                    "agents": sb["agents"],
                    "frames_out_per_s": (sb["frames_sent"] - sa["frames_sent"]) / dt,
                    "frames_in_per_s": (sb["frames_received"] - sa["frames_received"]) / dt,
                    "idle_bytes_in_per_s": (_rx_bytes(sb) - _rx_bytes(sa)) / dt,
                    "join_bytes_in": _rx_bytes(start["complete"][c.index]),
                    "join_frames_in": _rx_frames(start["complete"][c.index]),
                    "dropped_total": sb["dropped_total"],
                    "events": sb["events"],
                }
            )
        out["nodes"] = nodes
    out["summary"] = {
        key: _summary([float(nd[key]) for nd in nodes])
        for key in _SUMMARY_KEYS
    }
    out["incomplete_nodes"] = [nd["node"] for nd in nodes if nd["peers"] != n - 1 or nd["agents"] != n]
    out["peer_left_events"] = sum(int(nd["events"].get("peer_left", 0)) for nd in nodes)
    out["evasive_events"] = sum(int(nd["events"].get("peer_evasive", 0)) for nd in nodes)
    return out


def _census(fleet: Fleet, out: dict[str, Any], window: float) -> None:
    """After a failure: what the live nodes see and what they burn (best effort, bounded)."""
    alive = [c for c in fleet.children if c.proc.poll() is None]
    out["alive"] = len(alive)
    try:
        p1 = {c.index: proc_sample(c.pid) for c in alive}
        time.sleep(window)
        p2 = {c.index: proc_sample(c.pid) for c in alive}
        cpu = [100.0 * (p2[i]["ticks"] - p1[i]["ticks"]) / _CLK_TCK / (p2[i]["t"] - p1[i]["t"]) for i in p1]
        out["census_cpu_pct"] = _summary(cpu)
    except (OSError, KeyError, ZeroDivisionError):
        pass
    stats: dict[int, dict[str, Any]] = {}
    fleet.send((c.index for c in alive), "STATS")
    try:
        fleet.expect((c.index for c in alive), "STATS", Deadline(60.0), "census", stats)
    except (BenchTimeout, PeerFailed):
        pass  # keep the answers that came
    out["census_answers"] = len(stats)
    if stats:
        out["agents_seen"] = sorted(int(s["agents"]) for s in stats.values())
        out["peers_seen"] = sorted(int(s["peers"]) for s in stats.values())
        events: dict[str, int] = {}
        for st in stats.values():
            for kind, count in st.get("events", {}).items():
                events[kind] = events.get(kind, 0) + int(count)
        out["census_events"] = events
    try:
        out["loadavg_1min"] = os.getloadavg()[0]
    except OSError:
        pass


def scale_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Idle targets, judged on the N=10 (9 peers each) or N=11 run; none without one."""
    ok = [r for r in results if "summary" in r and int(r["n"]) in (10, 11) and not r.get("heartbeat_s")]
    if not ok:
        return []
    r = ok[0]
    cpu = float(r["summary"]["cpu_pct"]["max"])
    rss = float(r["summary"]["rss_mb"]["max"])
    return [
        {"target": f"idle node < {TARGET_IDLE_CPU_PCT:g} % of a core (N={r['n']}, worst node)",
         "value": cpu, "unit": "%", "met": cpu < TARGET_IDLE_CPU_PCT},
        {"target": f"idle node < {TARGET_RSS_MB:g} MB resident (N={r['n']}, worst node)",
         "value": rss, "unit": "MB", "met": rss < TARGET_RSS_MB},
    ]  # fmt: skip


def _census_text(r: dict[str, Any]) -> str:
    parts = [f"{r.get('alive', '?')} of {r['n']} processes alive"]
    if "nodes_complete" in r:
        parts.append(f"{r['nodes_complete']} had reported a complete registry")
    seen = r.get("agents_seen")
    if seen:
        parts.append(
            f"{r.get('census_answers', 0)} answered a census within 60 s: agents seen min/median/max "
            f"{seen[0]}/{statistics.median(seen):.0f}/{seen[-1]}"
        )
    else:
        parts.append("none answered a census within 60 s")
    if r.get("census_events"):
        ev = r["census_events"]
        parts.append("events so far: " + ", ".join(f"{k} {v}" for k, v in sorted(ev.items())))
    if r.get("census_cpu_pct"):
        c = r["census_cpu_pct"]
        parts.append(f"CPU per node median {c['median']:.0f} % (total {c['sum']:.0f} % of one core)")
    if r.get("loadavg_1min") is not None:
        parts.append(f"load average {r['loadavg_1min']:.0f}")
    return "; ".join(parts)


def format_scale(results: list[dict[str, Any]]) -> str:
    lines = [
        "zmesh scale (one process per node, one agent each, 1 seed; idle = heartbeats only):",
    ]
    head = ["N", "all bound s", "all complete s", "after last bound s", "CPU % med/max", "RSS MB med/max",
            "fds med/max", "sockets", "threads", "idle frames/s out+in", "idle B/s in",
            "join kB in"]  # fmt: skip
    rows: list[list[str]] = []
    for r in results:
        if "summary" not in r:
            rows.append([str(r["n"]), f"{r['all_ready_s']:.1f}" if "all_ready_s" in r else "error", "error"]
                        + [""] * (len(head) - 3))  # fmt: skip
            lines.append(f"  N={r['n']} error: {r.get('error', '?')}")
            lines.append("    " + _census_text(r))
            continue
        s = r["summary"]
        rows.append(
            [
                str(r["n"]) + (f" (hb {r['heartbeat_s']:g} s)" if r.get("heartbeat_s") else ""),
                f"{r['all_ready_s']:.1f}",
                f"{r['all_complete_s']:.1f}",
                f"{r['complete_after_last_ready_s']:.2f}",
                f"{s['cpu_pct']['median']:.2f} / {s['cpu_pct']['max']:.2f}",
                f"{s['rss_mb']['median']:.1f} / {s['rss_mb']['max']:.1f}",
                f"{s['fds']['median']:.0f} / {s['fds']['max']:.0f}",
                f"{s['socket_fds']['median']:.0f}",
                f"{s['threads']['median']:.0f}",
                f"{s['frames_out_per_s']['median'] + s['frames_in_per_s']['median']:.0f}",
                f"{s['idle_bytes_in_per_s']['median']:.0f}",
                f"{s['join_bytes_in']['median'] / 1000:,.0f}",
            ]
        )
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    lines.append("  " + "  ".join(h.rjust(w) for h, w in zip(head, widths)))
    lines.append("  " + "  ".join("-" * w for w in widths))
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    for r in results:
        if "summary" in r:
            s = r["summary"]
            extra = []
            if r["incomplete_nodes"]:
                extra.append(f"{len(r['incomplete_nodes'])} node(s) not fully joined at the end")
            if r["peer_left_events"] or r["evasive_events"]:
                extra.append(f"{r['peer_left_events']} peer_left / {r['evasive_events']} evasive events seen")
            lines.append(
                f"  N={r['n']}: mesh total CPU {s['cpu_pct']['sum']:.1f} % of one core, "
                f"RSS {s['rss_mb']['sum']:.0f} MB, {s['socket_fds']['sum']:.0f} socket fds"
                + (f"; {'; '.join(extra)}" if extra else "")
            )
    for t in scale_targets(results):
        lines.append(f"  target: {t['target']}: {t['value']:.2f} {t['unit']} -> {'met' if t['met'] else 'MISSED'}")
    lines.append(
        "  'all bound' = spawn of nodes 1..N-1 -> last READY (Python start-up on this machine); "
        "'all complete' = -> last node with N agents; CPU over a "
        f"{results[0].get('window_s', 5):g} s window after {results[0].get('settle_s', 3):g} s idle; "
        "'join kB in' = bytes a node received until its registry was complete (medians per node)."
        if results
        else ""
    )
    return "\n".join(lines)
