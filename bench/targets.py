"""The project's performance targets for zmesh, judged on one bench run.

Targets (zmesh over ZeroMQ, the ``zmesh`` row):

* one-way throughput >= NATS, >= 0.6 x raw pyzmq, and >= 0.8 x raw pyzmq
  packing 32 envelopes per frame (``zmq-batch32``);
* RTT p50 below every broker in the run, <= 0.8 x the fastest broker's,
  <= 1.5 x and <= 1.2 x raw pyzmq (DEALER -> ROUTER echo);
* fan-out deliveries/s >= NATS, and >= 0.8 x raw PUB/SUB;
* paced one-way (a yield after every send) >= 0.6 x raw pyzmq paced alike;
* requests/s with 64 in flight >= 2 x NATS's;
* one-way with 64 KiB and with 1 MiB envelopes >= 0.8 x raw pyzmq at that size;
* RTT p99 while a second sender floods the echo's node <= 3 x zmesh's idle p99.

``async def`` targets (the ``zmesh-async`` row against the ``zmesh`` row,
whose handlers are plain functions with ``inline=True``):

* one-way throughput >= 0.8 x inline; RTT p50 <= 1.15 x inline.

QoS 1 targets (the ``zmesh-qos1`` row, when it is in the run):

* one-way throughput >= 2 x MQTT QoS 1 (mosquitto), and >= NATS JetStream;
* RTT p50 <= 0.5 x MQTT QoS 1's (twice as fast), and <= JetStream's.

Keyed targets (the ``zmesh-curve`` row, CurveZMQ, against the ``zmesh`` row):

* one-way throughput >= 0.85 x keyless; RTT p50 <= 1.15 x keyless.

Verdicts: the ratio shown is the ratio of the medians. The ratio's range
over the repeats runs from (subject's worst / reference's best) to
(subject's best / reference's worst), i.e. it covers every pairing of the
two systems' min..max ranges. A target is ``met`` when the whole range is on
the right side of the bound, ``MISSED`` when the whole range is on the wrong
side, and ``inconclusive`` when the bound lies inside it (the measured spread
cannot tell). With one repeat the range is the single ratio. A target whose
reference system did not run (or failed) is ``n/a``.
"""

from __future__ import annotations

from typing import Any

from .report import ATTR, SystemResult, ratios, spread

__all__ = ["ASYNC_SUBJECT", "BROKERS", "KEYED_SUBJECT", "QOS1_SUBJECT", "SUBJECT", "compare", "evaluate",
           "format_targets", "format_vs", "judge"]

#: The row the targets are about.
SUBJECT = "zmesh"
#: The row the QoS 1 targets are about.
QOS1_SUBJECT = "zmesh-qos1"
#: The row the keyed (CurveZMQ) targets are about.
KEYED_SUBJECT = "zmesh-curve"
#: The row the ``async def`` handler targets are about.
ASYNC_SUBJECT = "zmesh-async"
#: Systems that route through a broker process.
BROKERS = ("nats", "mqtt", "redis", "redis-plain")


def _get(results: list[SystemResult], key: str) -> SystemResult | None:
    return next((r for r in results if r.key == key and not r.skipped), None)


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare(
    me: SystemResult | None, ref: SystemResult | None, metric: str, ref_metric: str | None = None
) -> tuple[float | None, tuple[float, float] | None]:
    """(ratio of the medians, (lowest, highest) ratio over the two systems' min..max ranges).

    *ref_metric* (default *metric*) is the reference's metric: the flooded
    RTT p99 is judged against the same system's idle p99."""
    if me is None or ref is None:
        return None, None
    other = ref_metric or metric
    ratio = _div(getattr(me, ATTR[metric]), getattr(ref, ATTR[other]))
    a, b = spread(me, metric), spread(ref, other)
    if ratio is None or a is None or b is None or b[0] <= 0:
        return ratio, None if ratio is None else (ratio, ratio)
    return ratio, (a[0] / b[1], a[1] / b[0])


def judge(
    ratio: float | None,
    span: tuple[float, float] | None,
    bound: float,
    higher_is_better: bool,
    strict: bool = False,
) -> str:
    """``met``, ``missed``, ``inconclusive`` (the bound lies inside *span*) or ``n/a``."""
    if ratio is None:
        return "n/a"
    lo, hi = span if span is not None else (ratio, ratio)

    def ok(x: float) -> bool:
        if higher_is_better:
            return x > bound if strict else x >= bound
        return x < bound if strict else x <= bound

    worst, best = (lo, hi) if higher_is_better else (hi, lo)
    if ok(worst):
        return "met"
    if not ok(best):
        return "missed"
    return "inconclusive"


_MET = {"met": True, "missed": False, "inconclusive": None, "n/a": None}


def _entry(subject: str, target: str, ratio: float | None, span: tuple[float, float] | None, bound: float,
           verdict: str, detail: str = "") -> dict[str, Any]:  # fmt: skip
    return {
        "subject": subject,
        "target": target,
        "ratio": ratio,
        "ratio_range": list(span) if span is not None else None,
        "bound": bound,
        "verdict": verdict,
        "met": _MET[verdict],  # True / False; None = inconclusive or n/a (see "verdict")
        "detail": detail,
    }


def _target(out: list[dict[str, Any]], subject: str, me: SystemResult | None, ref: SystemResult | None,
            metric: str, target: str, bound: float, higher_is_better: bool,
            strict: bool = False, ref_metric: str | None = None, detail: str = "") -> None:  # fmt: skip
    ratio, span = compare(me, ref, metric, ref_metric)
    verdict = judge(ratio, span, bound, higher_is_better, strict)
    out.append(_entry(subject, target, ratio, span, bound, verdict, detail))


def evaluate(results: list[SystemResult], subject: str = SUBJECT) -> list[dict[str, Any]]:
    """Each target: what it says, the measured ratio and its range, the bound, the verdict
    (``met``/``missed``/``inconclusive``/``n/a``) and met (True/False/None)."""
    me = _get(results, subject)
    nats = _get(results, "nats")
    zmq = _get(results, "zmq")
    out: list[dict[str, Any]] = []
    _target(out, subject, me, nats, "throughput", "one-way >= NATS", 1.0, True)
    _target(out, subject, me, zmq, "throughput", "one-way >= 0.6 x raw pyzmq", 0.6, True)
    brokers = [b for b in (_get(results, k) for k in BROKERS) if b is not None and b.rtt_p50_us]
    per = {b.key: compare(me, b, "rtt_p50") for b in brokers}
    verdicts = {k: judge(r, sp, 1.0, False, strict=True) for k, (r, sp) in per.items() if r is not None}
    worst_key = max(verdicts, key=lambda k: per[k][0] or 0.0, default=None)
    if worst_key is None:
        verdict = "n/a"
    elif "missed" in verdicts.values():
        verdict = "missed"
    elif "inconclusive" in verdicts.values():
        verdict = "inconclusive"
    else:
        verdict = "met"
    detail = ", ".join(f"{k} {per[k][0]:.2f}x {v}" for k, v in verdicts.items())
    worst_ratio, worst_span = per[worst_key] if worst_key is not None else (None, None)
    out.append(_entry(subject, "RTT p50 below every broker (worst ratio)", worst_ratio, worst_span, 1.0,
                      verdict, detail))  # fmt: skip
    fastest = min(brokers, key=lambda b: b.rtt_p50_us or float("inf"), default=None)
    _target(out, subject, me, fastest, "rtt_p50", "RTT p50 <= 0.8 x the fastest broker", 0.8, False,
            detail=f"{fastest.key}, p50 {fastest.rtt_p50_us:,.0f} us" if fastest and fastest.rtt_p50_us else "")
    _target(out, subject, me, zmq, "rtt_p50", "RTT p50 <= 1.5 x raw pyzmq", 1.5, False)
    _target(out, subject, me, zmq, "rtt_p50", "RTT p50 <= 1.2 x raw pyzmq", 1.2, False)
    _target(out, subject, me, _get(results, "zmq-batch32"), "throughput",
            "one-way >= 0.8 x raw pyzmq, 32 per frame", 0.8, True)
    _target(out, subject, me, nats, "fanout", "fan-out >= NATS", 1.0, True)
    _target(out, subject, me, zmq, "fanout", "fan-out >= 0.8 x raw PUB/SUB", 0.8, True)
    _target(out, subject, me, zmq, "paced", "paced one-way >= 0.6 x raw pyzmq paced", 0.6, True)
    _target(out, subject, me, nats, "inflight64", "64 in flight >= 2 x NATS", 2.0, True)
    _target(out, subject, me, zmq, "payload_64k", "64 KiB one-way >= 0.8 x raw pyzmq", 0.8, True)
    _target(out, subject, me, zmq, "payload_1m", "1 MiB one-way >= 0.8 x raw pyzmq", 0.8, True)
    _target(out, subject, me, me, "rtt_loaded_p99", "RTT p99 flooded <= 3 x idle p99", 3.0, False,
            ref_metric="rtt_p99")
    if any(r.key == ASYNC_SUBJECT for r in results):
        asy = _get(results, ASYNC_SUBJECT)
        _target(out, ASYNC_SUBJECT, asy, me, "throughput", "async def one-way >= 0.8 x inline", 0.8, True)
        _target(out, ASYNC_SUBJECT, asy, me, "rtt_p50", "async def RTT p50 <= 1.15 x inline", 1.15, False)
    if any(r.key == QOS1_SUBJECT for r in results):
        q1 = _get(results, QOS1_SUBJECT)
        mqtt1 = _get(results, "mqtt-qos1")
        js = _get(results, "jetstream")
        s = QOS1_SUBJECT
        _target(out, s, q1, mqtt1, "throughput", "QoS 1 one-way >= 2 x MQTT QoS 1", 2.0, True)
        _target(out, s, q1, js, "throughput", "QoS 1 one-way >= JetStream", 1.0, True)
        _target(out, s, q1, mqtt1, "rtt_p50", "QoS 1 RTT p50 <= 0.5 x MQTT QoS 1", 0.5, False)
        _target(out, s, q1, js, "rtt_p50", "QoS 1 RTT p50 <= JetStream", 1.0, False)
    if any(r.key == KEYED_SUBJECT for r in results):
        keyed = _get(results, KEYED_SUBJECT)
        _target(out, KEYED_SUBJECT, keyed, me, "throughput", "keyed one-way >= 0.85 x keyless", 0.85, True)
        _target(out, KEYED_SUBJECT, keyed, me, "rtt_p50", "keyed RTT p50 <= 1.15 x keyless", 1.15, False)
    return out


_VERDICT = {
    "met": "met",
    "missed": "MISSED",
    "inconclusive": "inconclusive (the bound lies within the measured spread)",
    "n/a": "n/a (no number for zmesh or the reference)",
}


def format_targets(targets: list[dict[str, Any]], subject_label: str = "zmesh (zmq)") -> str:
    labels = {SUBJECT: subject_label, QOS1_SUBJECT: "zmesh qos=1", KEYED_SUBJECT: "zmesh keyed",
              ASYNC_SUBJECT: "zmesh async def"}  # fmt: skip
    width = max(len(t["target"]) for t in targets)
    lines: list[str] = []
    for subject in dict.fromkeys(t.get("subject", SUBJECT) for t in targets):
        if lines:
            lines.append("")
        label = labels.get(subject, subject)
        lines.append(
            f"targets ({label}; ratio = {subject} / reference, median [min..max over the repeats], "
            "RTT >1 = slower):"
        )
        for t in targets:
            if t.get("subject", SUBJECT) != subject:
                continue
            ratio = "n/a" if t["ratio"] is None else f"{t['ratio']:.2f}x"
            span = t.get("ratio_range")
            rng = f"[{span[0]:.2f}..{span[1]:.2f}]" if span and span[0] != span[1] else ""
            detail = f"  ({t['detail']})" if t["detail"] else ""
            lines.append(f"  {t['target'].ljust(width)}  {ratio:>7} {rng:>14}  {_VERDICT[t['verdict']]}{detail}")
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
