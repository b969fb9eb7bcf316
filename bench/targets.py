"""The project's performance targets for zmesh, judged on one bench run.

Targets (zmesh over ZeroMQ, the ``zmesh`` row):

* one-way throughput >= NATS, and >= 0.6 x raw pyzmq;
* RTT p50 below every broker in the run, and <= 1.5 x raw pyzmq;
* fan-out deliveries/s >= NATS.

A target whose reference system did not run (or failed) is ``n/a``.
"""

from __future__ import annotations

from typing import Any

from .report import SystemResult, ratios

__all__ = ["BROKERS", "SUBJECT", "evaluate", "format_targets", "format_vs"]

#: The row the targets are about.
SUBJECT = "zmesh"
#: Systems that route through a broker process.
BROKERS = ("nats", "mqtt", "redis", "redis-plain")


def _get(results: list[SystemResult], key: str) -> SystemResult | None:
    return next((r for r in results if r.key == key and not r.skipped), None)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def evaluate(results: list[SystemResult], subject: str = SUBJECT) -> list[dict[str, Any]]:
    """Each target: what it says, the measured ratio, the bound, and met (True/False/None = n/a)."""
    me = _get(results, subject)
    nats = _get(results, "nats")
    zmq = _get(results, "zmq")
    out: list[dict[str, Any]] = []

    def add(target: str, ratio: float | None, bound: float, higher_is_better: bool, detail: str = "",
            strict: bool = False) -> None:  # fmt: skip
        met: bool | None = None
        if ratio is not None:
            if higher_is_better:
                met = ratio > bound if strict else ratio >= bound
            else:
                met = ratio < bound if strict else ratio <= bound
        out.append({"target": target, "ratio": ratio, "bound": bound, "met": met, "detail": detail})

    tp = me.throughput_msgs_per_s if me else None
    p50 = me.rtt_p50_us if me else None
    fan = me.fanout_deliveries_per_s if me else None
    add("one-way >= NATS", _div(tp, nats.throughput_msgs_per_s if nats else None), 1.0, True)
    add("one-way >= 0.6 x raw pyzmq", _div(tp, zmq.throughput_msgs_per_s if zmq else None), 0.6, True)
    brokers = [b for b in (_get(results, k) for k in BROKERS) if b is not None and b.rtt_p50_us]
    per = {b.key: _div(p50, b.rtt_p50_us) for b in brokers}
    worst = max((v for v in per.values() if v is not None), default=None)
    detail = ", ".join(f"{k} {v:.2f}x" for k, v in per.items() if v is not None)
    add("RTT p50 below every broker (worst ratio)", worst, 1.0, False, detail, strict=True)
    add("RTT p50 <= 1.5 x raw pyzmq", _div(p50, zmq.rtt_p50_us if zmq else None), 1.5, False)
    add("fan-out >= NATS", _div(fan, nats.fanout_deliveries_per_s if nats else None), 1.0, True)
    return out


def format_targets(targets: list[dict[str, Any]], subject_label: str = "zmesh (zmq)") -> str:
    lines = [f"targets ({subject_label}; ratio = zmesh / reference, RTT >1 = slower):"]
    width = max(len(t["target"]) for t in targets)
    for t in targets:
        ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}x"
        verdict = {True: "met", False: "MISSED", None: "n/a (no number for zmesh or the reference)"}[t["met"]]
        detail = f"  ({t['detail']})" if t["detail"] else ""
        lines.append(f"  {t['target'].ljust(width)}  {ratio:>7}  {verdict}{detail}")
    return "\n".join(lines)


def format_vs(results: list[SystemResult], reference: str = "nats") -> str:
    """Every zmesh row as a multiple of *reference* (one-way, RTT p50, fan-out)."""
    ref = _get(results, reference)
    if ref is None:
        return f"vs {reference}: {reference} is not in this run."
    rat = ratios(results, reference)
    lines = [f"zmesh vs {ref.label} (one-way and fan-out >1 = faster; RTT >1 = slower):"]
    for r in results:
        if not r.key.startswith("zmesh") or r.skipped:
            continue
        q = rat[r.key]

        def f(v: float | None) -> str:
            return "  n/a" if v is None else f"{v:5.2f}x"

        lines.append(
            f"  {r.label:<18} one-way {f(q['throughput'])}  RTT p50 {f(q['rtt_p50'])}  "
            f"RTT p99 {f(q['rtt_p99'])}  fan-out {f(q['fanout'])}"
        )
    return "\n".join(lines)
