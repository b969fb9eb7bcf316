"""Fault injection with real processes: what each QoS level loses, repeats and dead-letters.

    python -m bench.faults                       # every scenario x QoS 0,1,2; rewrites docs/reliability.md
    python -m bench.faults --quick               # fewer messages, shorter faults (a smoke run)
    python -m bench.faults --scenario cut,kill --qos 1
    python -m bench.faults --render bench/out/faults.json   # rebuild the docs table from a saved run

Each run builds a fresh lab (tests/netns.py): two network-namespace hosts
on one bridge.  A sender process (``bench/_fault_node.py``, agent ``tx``)
and a receiver process (agent ``rx``, seeded with the sender's router
endpoint; mDNS on inside the lab) are real zmesh nodes over ZeroMQ with the
default liveness settings.  The sender sends N numbered messages at a paced
rate with one QoS level (QoS >= 1: ttl 120 s; QoS 2: both nodes get a
store, when this zmesh has ``Node(store=...)``); the receiver's handler
prints each sequence number it handled.  One fault is injected while the
stream runs (see SCENARIOS); then the harness waits for the stream to drain
and counts, per run:

* sent: messages the sender tried to send (each ``send`` call);
* handled: distinct sequence numbers handled, over every receiver process;
* duplicated: handler runs beyond the first for a sequence number;
* dead-lettered: ``node.dead_letters.total`` of the sender plus the
  (last) receiver, with reasons;
* send errors: ``send`` calls that raised (by type; not retried);
* lost: sent - handled;
* RSS of the receiver and the sender (MB) just before the stream and after
  it drained.

Targets (the reliability issue): QoS 1 and 2 lose 0; QoS 2 duplicates 0;
memory flat (end within MEMORY_SLACK_MB of the start).

Needs root, iproute2 and ``tc`` with cls_bpf (faults use a classic-BPF drop
program on clsact ingress: netem, nft and iptables are not needed); without
them it says why and exits 0.  All traffic stays inside the lab's own
namespaces (10.231.x.0/24).  Every wait has a deadline; every process and
namespace is removed at the end.  Run it under ``flock
/tmp/zmesh-bench.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import platform
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.netns import Child, Host, NetnsLab

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "faults.json"
DOC = REPO_ROOT / "docs" / "reliability.md"
BEGIN = "<!-- bench.faults:begin -->"
END = "<!-- bench.faults:end -->"
MEMORY_SLACK_MB = 10.0
QUIET = 3.0  # seconds without a newly handled message that end a drain
DRAIN_MAX = 60.0  # longest drain after the sender is done (and acked)
ACK_WAIT = 60.0  # QoS >= 1: how long the sender waits in wait_acked after its last send


@dataclass(frozen=True)
class Params:
    count: int = 2000  # messages per run
    rate: float = 100.0  # messages per second
    ttl: float = 120.0  # of QoS >= 1 messages
    fault_at: float = 0.25  # the fault starts when this share of the messages was sent
    cut_for: float = 10.0
    block_for: float = 60.0
    loss: float = 0.10
    slow: float = 0.02  # seconds per message, one at a time


FULL = Params()
QUICK = Params(count=600, rate=80.0, cut_for=4.0, block_for=8.0)


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str


SCENARIOS = {
    s.name: s
    for s in (
        Scenario("baseline", "no fault (the control)"),
        Scenario("kill", "SIGKILL the receiver process once {fault_at:.0%} of the messages were sent; start a "
                         "replacement process at once with the same node name and agent id (and, at QoS 2, "
                         "the same store file)"),
        Scenario("cut", "drop every packet on the receiver's link (both ways) for {cut_for:g} s, starting at "
                        "{fault_at:.0%} of the messages, then restore it"),
        Scenario("loss", "drop {loss:.0%} of the IPv4 packets on the receiver's link, at random, each way, "
                         "for the whole run"),
        Scenario("slow", "the receiver handles one message at a time and each takes {slow_ms:g} ms "
                         "(an async sleep), slower than the sender sends"),
        Scenario("blocked", "the receiver's event loop is blocked ({block_for:g} s `time.sleep` on the loop "
                            "thread) from {fault_at:.0%} of the messages on"),
    )
}


def describe(scenario: Scenario, params: Params) -> str:
    return scenario.what.format(**asdict(params), slow_ms=params.slow * 1000)


@dataclass
class RunResult:
    scenario: str
    qos: int
    sent: int = 0
    handled: int = 0
    handler_runs: int = 0
    duplicated: int = 0
    dead_letters_tx: int = 0
    dead_letters_rx: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    send_errors: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    acked: bool | None = None
    rss_rx: tuple[float, float, float] = (0.0, 0.0, 0.0)  # start, end, peak
    rss_tx: tuple[float, float, float] = (0.0, 0.0, 0.0)
    dropped_rx: dict[str, int] = field(default_factory=dict)
    dropped_tx: dict[str, int] = field(default_factory=dict)
    store: bool = False
    qos_api: bool = False
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def dead_lettered(self) -> int:
        return self.dead_letters_tx + self.dead_letters_rx

    def verdict(self) -> str:
        """The issue's targets for this row: '' (met) or what missed."""
        misses = []
        if self.qos >= 1 and self.lost:
            misses.append("lost")
        if self.qos == 2 and self.duplicated:
            misses.append("dup")
        for who, (start, end, _) in (("rx", self.rss_rx), ("tx", self.rss_tx)):
            if start and end - start > MEMORY_SLACK_MB:
                misses.append(f"{who} mem")
        if any(n.startswith("timed out") for n in self.notes):
            misses.append("timeout")
        return ", ".join(misses)


class Proc:
    """One ``bench._fault_node`` child and what it printed so far."""

    def __init__(self, lab: NetnsLab, host: Host, argv: Sequence[str]) -> None:
        self.child: Child = lab.run(host, [sys.executable, "-m", "bench._fault_node", *argv], stdin=True)
        self.events: list[dict[str, Any]] = []
        self.handled: Counter[int] = Counter()
        self._seen = 0

    def poll(self) -> None:
        lines = self.child.lines
        while self._seen < len(lines):
            line = lines[self._seen]
            self._seen += 1
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            if "h" in obj:
                self.handled[int(obj["h"])] += 1
            else:
                self.events.append(obj)

    def last(self, kind: str, **match: Any) -> dict[str, Any] | None:
        self.poll()
        for item in reversed(self.events):
            if item.get("event") == kind and all(item.get(k) == v for k, v in match.items()):
                found: dict[str, Any] = item
                return found
        return None

    def command(self, **fields: Any) -> None:
        try:
            self.child.send(json.dumps(fields))
        except (BrokenPipeError, OSError):
            pass

    @property
    def alive(self) -> bool:
        return self.child.proc.poll() is None


def _unavailable() -> str | None:
    sys.path.insert(0, str(REPO_ROOT))
    try:
        from tests.netns import netns_unavailable
    except ImportError as exc:  # pytest missing, say
        return f"the lab harness cannot be imported ({exc})"
    reason = netns_unavailable()
    if reason is None and shutil.which("tc") is None:
        reason = "tc (iproute2) is not installed"
    return reason


def run_one(lab: NetnsLab, scenario: str, qos: int, params: Params,
            say: Callable[[str], None] = lambda text: None) -> RunResult:
    """One stream through one fault at one QoS level, in ``lab`` (which the caller closes)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {sorted(SCENARIOS)}")
    result = RunResult(scenario=scenario, qos=qos)
    began = time.monotonic()
    deadline = began + 90 + 4 * params.count / params.rate + params.cut_for + params.block_for + params.ttl
    tmp = Path(tempfile.mkdtemp(prefix="zmesh-faults-"))
    mesh = f"faults-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    tx_host, rx_host = lab.add_hosts(2)
    receivers: list[Proc] = []
    tx: Proc | None = None

    def wait(predicate: Callable[[], bool], timeout: float, what: str) -> bool:
        """Pump output until ``predicate()``; False (and a note) at the timeout or the run's deadline."""
        until = min(time.monotonic() + timeout, deadline)
        while not predicate():
            if time.monotonic() >= until:
                result.notes.append(f"timed out waiting for {what}")
                return False
            lab.pump(0.05)
        return True

    try:
        store = qos == 2
        tx = Proc(lab, tx_host, [
            "sender", "--mesh", mesh, "--name", "tx-node", "--agent", "tx", "--target", "rx",
            "--qos", str(qos), "--count", str(params.count), "--rate", str(params.rate),
            "--ttl", str(params.ttl), "--ack-timeout", str(ACK_WAIT),
            *(["--store", str(tmp / "tx.db")] if store else []),
        ])
        if not wait(lambda: tx.last("start") is not None, 30, "the sender to start"):
            raise _Abort
        start = tx.last("start")
        assert start is not None
        result.qos_api = bool(start.get("qos_api"))
        rx_argv = [
            "receiver", "--mesh", mesh, "--name", "rx-node", "--agent", "rx", "--seed", str(start["endpoint"]),
            "--count", str(params.count),
            *(["--store", str(tmp / "rx.db")] if store else []),
            *(["--slow", str(params.slow)] if scenario == "slow" else []),
        ]
        receivers.append(Proc(lab, rx_host, rx_argv))
        rx = receivers[0]
        if not wait(lambda: rx.last("start") is not None and tx.last("peer") is not None, 40,
                    "the sender to see the receiver's agent"):
            raise _Abort
        rx_start = rx.last("start")
        result.store = bool(rx_start and rx_start.get("store"))
        if scenario == "loss":
            lab.drop_random(rx_host, params.loss)
        for node in (tx, rx):
            node.command(op="stats", id="start")
        wait(lambda: all(n.last("stats", id="start") for n in (tx, rx)), 20, "the start stats")
        result.rss_tx = (_stat(tx, "start", "rss"), 0.0, 0.0)
        result.rss_rx = (_stat(rx, "start", "rss"), 0.0, 0.0)
        tx.command(op="go")
        go_at = time.monotonic()
        fault_at = max(1, int(params.count * params.fault_at))
        fired: float | None = None
        restored = scenario != "cut"
        last_say = go_at

        def sent() -> int:
            done = tx.last("done")
            if done is not None:
                return int(done["sent"])
            progress = tx.last("progress")
            return int(progress["sent"]) if progress else 0

        while tx.last("done") is None or not restored:
            if time.monotonic() >= deadline:
                result.notes.append("timed out while sending")
                break
            lab.pump(0.05)
            now = time.monotonic()
            if fired is None and sent() >= fault_at and scenario in ("kill", "cut", "blocked"):
                fired = now
                if scenario == "kill":
                    # This loop wakes on the children's output, so a kill right now would
                    # land just after the receiver wrote a handled line, in the ~0.1 ms
                    # before its node records the message as handled: not a random moment.
                    time.sleep(random.uniform(0.0, 1.0 / params.rate))
                    victim = receivers[-1]
                    pid = victim.last("start")
                    os.kill(int(pid["pid"]) if pid else victim.child.proc.pid, signal.SIGKILL)
                    victim.child.proc.wait(10)
                    receivers.append(Proc(lab, rx_host, rx_argv))
                    say(f"    SIGKILL receiver at {sent()} sent; replacement started")
                elif scenario == "cut":
                    lab.drop_random(rx_host, 1.0, protocol="all")
                    say(f"    link cut at {sent()} sent")
                else:
                    receivers[-1].command(op="block", seconds=params.block_for)
                    say(f"    receiver loop blocked for {params.block_for:g} s at {sent()} sent")
            if scenario == "cut" and fired is not None and not restored and now - fired >= params.cut_for:
                lab.clear_drops(rx_host)
                restored = True
                say(f"    link restored after {now - fired:.1f} s at {sent()} sent")
            if now - last_say >= 5:
                last_say = now
                say(f"    {now - go_at:5.1f} s: sent {sent()}/{params.count}, handled {_handled(receivers)}")
        if not restored:
            lab.clear_drops(rx_host)
        done = tx.last("done")
        if done is not None:
            result.send_errors = dict(done.get("errors") or {})
        if qos >= 1 and done is not None:
            wait(lambda: tx.last("acked") is not None, ACK_WAIT + 15, "the sender's wait_acked")
            acked = tx.last("acked")
            result.acked = None if acked is None or acked.get("ok") is None else bool(acked["ok"])
        if scenario == "blocked" and fired is not None:
            wait(lambda: receivers[-1].last("unblocked") is not None, params.block_for + 30, "the loop to unblock")
        _drain(lab, receivers, params.count, deadline)
        if scenario == "loss":
            lab.clear_drops(rx_host)
        rx = receivers[-1]
        for node in (tx, rx):
            node.command(op="stats", id="end")
        wait(lambda: all(n.last("stats", id="end") for n in (tx, rx)), 20, "the end stats")
        result.rss_tx = (result.rss_tx[0], _stat(tx, "end", "rss"), _stat(tx, "end", "rss_peak"))
        rx_start_rss = result.rss_rx[0] if len(receivers) == 1 else float((rx.last("start") or {}).get("rss", 0))
        result.rss_rx = (rx_start_rss, _stat(rx, "end", "rss"), _stat(rx, "end", "rss_peak"))
        for node, attr in ((tx, "tx"), (rx, "rx")):
            stats = node.last("stats", id="end") or {}
            setattr(result, f"dead_letters_{attr}", int(stats.get("dead_letters", 0)))
            setattr(result, f"dropped_{attr}", {k: v for k, v in (stats.get("dropped") or {}).items() if v})
            for reason, n in (stats.get("dead_letter_reasons") or {}).items():
                key = f"{attr}:{reason}"
                result.dead_letter_reasons[key] = result.dead_letter_reasons.get(key, 0) + int(n)
        if len(receivers) > 1:
            result.notes.append("rx dead letters and RSS are the replacement process's")
    except _Abort:
        pass
    finally:
        for node in [*receivers, *([tx] if tx else [])]:
            _close_stdin(node)
        for node in [*receivers, *([tx] if tx else [])]:
            lab.stop(node.child, timeout=10)
            node.poll()
        shutil.rmtree(tmp, ignore_errors=True)
    handled: Counter[int] = Counter()
    for node in receivers:
        handled.update(node.handled)
    if tx is not None:
        final = tx.last("done") or tx.last("progress") or {}
        result.sent = int(final.get("sent", 0))
    result.handled = len(handled)
    result.handler_runs = sum(handled.values())
    result.duplicated = result.handler_runs - result.handled
    result.lost = result.sent - result.handled
    result.elapsed = time.monotonic() - began
    if any(c.proc.returncode not in (0, None, -signal.SIGKILL) for c in (n.child for n in receivers)):
        result.notes.append("a process exited abnormally: " + "; ".join(
            c.stderr()[-300:] for c in (n.child for n in [*receivers, *([tx] if tx else [])]) if c.stderr()))
    return result


class _Abort(Exception):
    """A start-up step timed out; the run is reported with what it has."""


def _close_stdin(node: Proc) -> None:
    stdin = node.child.proc.stdin
    if stdin is not None and not stdin.closed:
        try:
            stdin.close()
        except OSError:
            pass


def _stat(node: Proc, which: str, key: str) -> float:
    stats = node.last("stats", id=which) or {}
    return round(float(stats.get(key, 0.0)), 1)


def _handled(receivers: Sequence[Proc]) -> int:
    seen: set[int] = set()
    for node in receivers:
        node.poll()
        seen.update(node.handled)
    return len(seen)


def _drain(lab: NetnsLab, receivers: Sequence[Proc], count: int, deadline: float) -> None:
    """Wait until every message was handled, or nothing new was for QUIET s (at most DRAIN_MAX s)."""
    until = min(time.monotonic() + DRAIN_MAX, deadline)
    last_count, last_change = -1, time.monotonic()
    while time.monotonic() < until:
        now_count = _handled(receivers)
        if now_count >= count:
            return
        if now_count != last_count:
            last_count, last_change = now_count, time.monotonic()
        elif time.monotonic() - last_change >= QUIET:
            return
        lab.pump(0.1)


# -- report --------------------------------------------------------------------------------------------

def _errors(result: RunResult) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(result.send_errors.items())) or "0"


def _reasons(result: RunResult) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(result.dead_letter_reasons.items()))


def table(results: Sequence[RunResult]) -> str:
    """The markdown table: one row per scenario and QoS level."""
    rows = [
        "| scenario | QoS | sent | handled | duplicated | dead-lettered | send errors | lost "
        "| rx RSS MB start→end (peak) | tx RSS MB start→end (peak) | s | targets |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- | ---: | --- | --- | ---: | --- |",
    ]
    for r in results:
        dead = str(r.dead_lettered) + (f" ({_reasons(r)})" if r.dead_lettered else "")
        verdict = r.verdict()
        target = "—" if r.qos == 0 and not verdict else ("✗ " + verdict if verdict else "✓")
        if r.qos >= 1 and not r.qos_api:
            target += " (no QoS 1/2 yet)"
        rows.append(
            f"| {r.scenario} | {r.qos} | {r.sent} | {r.handled} | {r.duplicated} | {dead} | {_errors(r)} "
            f"| {r.lost} | {r.rss_rx[0]:.1f}→{r.rss_rx[1]:.1f} ({r.rss_rx[2]:.1f}) "
            f"| {r.rss_tx[0]:.1f}→{r.rss_tx[1]:.1f} ({r.rss_tx[2]:.1f}) | {r.elapsed:.0f} | {target} |"
        )
    return "\n".join(rows)


def block(results: Sequence[RunResult], params: Params, scenarios: Sequence[str], when: str) -> str:
    """What goes between the markers of docs/reliability.md."""
    qos_api = any(r.qos_api for r in results)
    stores = any(r.store for r in results)
    notes = [f"- {r.scenario}/QoS {r.qos}: {'; '.join(r.notes)}" for r in results if r.notes]
    drops = [f"- {r.scenario}/QoS {r.qos}: rx {r.dropped_rx or '{}'}, tx {r.dropped_tx or '{}'}"
             for r in results if r.dropped_rx or r.dropped_tx]
    lines = [
        f"Measured {when} on a {os.cpu_count()}-CPU Linux machine (Python "
        f"{platform.python_version()}): {params.count} messages per run at {params.rate:g}/s, "
        f"QoS >= 1 ttl {params.ttl:g} s. This zmesh {'has' if qos_api else 'does not have'} "
        f"`Node.wait_acked` (QoS 1/2){'' if qos_api else ': QoS 1 and 2 rows behave as QoS 0'}; "
        f"QoS 2 nodes {'had' if stores else 'had no'} store.",
        "",
        table(results),
    ]
    if drops:
        lines += ["", "Drops counted by the nodes (`stats()['dropped']`, non-zero reasons):", "", *drops]
    if notes:
        lines += ["", "Notes:", "", *notes]
    return "\n".join(lines)


def write_doc(content: str, params: Params, scenarios: Sequence[str]) -> None:
    """Put ``content`` between the markers of docs/reliability.md (creating the file if needed)."""
    text = DOC.read_text() if DOC.exists() else ""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{DOC} has no {BEGIN} ... {END} markers; add them where the table goes")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{content}\n{END}{tail}")


def render(path: Path, write: bool) -> int:
    """Print (and put into the docs) the table of an earlier run's JSON."""
    data = json.loads(path.read_text())
    names = {f.name for f in fields(RunResult)}
    results = []
    for row in data["results"]:
        kwargs = {k: v for k, v in row.items() if k in names}
        for key in ("rss_rx", "rss_tx"):
            kwargs[key] = tuple(kwargs.get(key, (0.0, 0.0, 0.0)))
        results.append(RunResult(**kwargs))
    params = Params(**data["params"])
    content = block(results, params, list(data.get("scenarios", {})), data["when"][:10])
    print(content)
    if write:
        write_doc(content, params, list(data.get("scenarios", {})))
        print(f"updated {DOC.relative_to(REPO_ROOT)}")
    return 0


# -- command line ---------------------------------------------------------------------------------------

def _csv(text: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SystemExit(f"--{what}: unknown {bad or text!r}; choose from {', '.join(allowed)}")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--qos", default="0,1,2", help="comma-separated QoS levels (default 0,1,2)")
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK.count} messages at {QUICK.rate:g}/s, cut {QUICK.cut_for:g} s, "
                             f"block {QUICK.block_for:g} s (does not touch the docs)")
    parser.add_argument("--count", type=int, help="messages per run (overrides)")
    parser.add_argument("--rate", type=float, help="messages per second (overrides)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output file")
    docs = parser.add_mutually_exclusive_group()
    docs.add_argument("--docs", action="store_true", help="write the table into docs/reliability.md anyway")
    docs.add_argument("--no-docs", action="store_true", help="never touch docs/reliability.md")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="measure nothing: rebuild the table from a JSON file this command wrote")
    args = parser.parse_args(argv)
    if args.render:
        return render(args.render, write=not args.no_docs)
    scenarios = _csv(args.scenario, list(SCENARIOS), "scenario")
    levels = [int(q) for q in _csv(args.qos, ["0", "1", "2"], "qos")]
    params = QUICK if args.quick else FULL
    if args.count:
        params = replace(params, count=args.count)
    if args.rate:
        params = replace(params, rate=args.rate)
    os.environ.setdefault("ZMESH_INTERFACES", "127.0.0.1")  # this process runs no node; children get theirs

    reason = _unavailable()
    if reason is not None:
        print(f"bench.faults: skipped: {reason}")
        return 0
    from tests.netns import NetnsLab

    total = len(scenarios) * len(levels)
    print(f"bench.faults: {total} runs ({', '.join(scenarios)} x QoS {','.join(map(str, levels))}), "
          f"{params.count} messages at {params.rate:g}/s each", flush=True)
    results: list[RunResult] = []
    started = time.monotonic()
    for scenario in scenarios:
        print(f"{scenario}: {describe(SCENARIOS[scenario], params)}", flush=True)
        for qos in levels:
            print(f"  [{len(results) + 1}/{total}] {scenario} QoS {qos} ...", flush=True)
            lab = NetnsLab()
            try:
                result = run_one(lab, scenario, qos, params, say=lambda text: print(text, flush=True))
            finally:
                lab.close()
            results.append(result)
            print(f"    sent {result.sent}, handled {result.handled}, duplicated {result.duplicated}, "
                  f"dead-lettered {result.dead_lettered}, send errors {_errors(result)}, lost {result.lost}, "
                  f"rx RSS {result.rss_rx[0]:.1f}→{result.rss_rx[1]:.1f} MB, {result.elapsed:.0f} s"
                  + (f"  [{'; '.join(result.notes)}]" if result.notes else ""), flush=True)
    when = time.strftime("%Y-%m-%d")
    content = block(results, params, scenarios, when)
    print()
    print(content)
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "bench": "faults",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "params": asdict(params),
        "scenarios": {name: describe(SCENARIOS[name], params) for name in scenarios},
        "results": [{**asdict(r), "dead_lettered": r.dead_lettered, "verdict": r.verdict()} for r in results],
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    full = not args.quick and set(scenarios) == set(SCENARIOS) and levels == [0, 1, 2] and not args.count
    if (full or args.docs) and not args.no_docs:
        write_doc(content, params, scenarios)
        print(f"updated {DOC.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
