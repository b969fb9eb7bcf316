"""Results: the terminal table, results.json and the PNG chart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ATTR", "METRICS", "SystemResult", "fill_spread", "metric_values", "more_table", "ratios", "spread",
           "table", "write_chart", "write_json"]

#: metric -> (workload, index into an RTT run's (p50, p99) or None)
METRICS: dict[str, tuple[str, int | None]] = {
    "throughput": ("throughput", None),
    "rtt_p50": ("rtt", 0),
    "rtt_p99": ("rtt", 1),
    "fanout": ("fanout", None),
    "paced": ("paced", None),
    "inflight64": ("inflight64", None),
    "payload_64k": ("payload-64k", None),
    "payload_1m": ("payload-1m", None),
    "rtt_loaded_p50": ("rtt-loaded", 0),
    "rtt_loaded_p99": ("rtt-loaded", 1),
}
#: metric -> the SystemResult attribute holding its median
ATTR: dict[str, str] = {
    "throughput": "throughput_msgs_per_s",
    "rtt_p50": "rtt_p50_us",
    "rtt_p99": "rtt_p99_us",
    "fanout": "fanout_deliveries_per_s",
    "paced": "paced_msgs_per_s",
    "inflight64": "inflight64_req_per_s",
    "payload_64k": "payload_64k_msgs_per_s",
    "payload_1m": "payload_1m_msgs_per_s",
    "rtt_loaded_p50": "rtt_loaded_p50_us",
    "rtt_loaded_p99": "rtt_loaded_p99_us",
}


@dataclass
class SystemResult:
    """Everything measured (or not) for one system."""

    key: str
    label: str
    notes: str = ""
    skipped: str = ""  # why the system did not run at all
    versions: dict[str, str] = field(default_factory=dict)
    throughput_msgs_per_s: float | None = None
    rtt_p50_us: float | None = None
    rtt_p99_us: float | None = None
    fanout_deliveries_per_s: float | None = None
    paced_msgs_per_s: float | None = None  # one-way, a yield after every send
    inflight64_req_per_s: float | None = None  # requests/s with 64 outstanding
    payload_64k_msgs_per_s: float | None = None  # one-way, 64 KiB envelopes
    payload_1m_msgs_per_s: float | None = None  # one-way, 1 MiB envelopes
    rtt_loaded_p50_us: float | None = None  # RTT while a second sender floods the echo's node
    rtt_loaded_p99_us: float | None = None
    errors: dict[str, str] = field(default_factory=dict)  # workload -> error text
    seconds: dict[str, float] = field(default_factory=dict)  # workload -> wall time of all its runs
    runs: dict[str, list[Any]] = field(default_factory=dict)  # workload -> every repeat's value
    spread: dict[str, list[float]] = field(default_factory=dict)  # metric -> [min, max] over the repeats


def metric_values(r: SystemResult, metric: str) -> list[float]:
    """Every repeat's value of *metric* (``throughput``, ``rtt_p50``, ``rtt_p99``, ``fanout``)."""
    workload, index = METRICS[metric]
    runs = r.runs.get(workload) or []
    return [float(v[index]) if index is not None else float(v) for v in runs]


def spread(r: SystemResult, metric: str) -> tuple[float, float] | None:
    """``(min, max)`` of *metric* over the repeats, or None if it has no value."""
    values = metric_values(r, metric)
    return (min(values), max(values)) if values else None


def fill_spread(r: SystemResult) -> None:
    """Store every metric's ``[min, max]`` in ``r.spread`` (results.json)."""
    for metric in METRICS:
        sp = spread(r, metric)
        if sp is not None:
            r.spread[metric] = [sp[0], sp[1]]


def ratios(results: list[SystemResult], baseline: str) -> dict[str, dict[str, float | None]]:
    """Per system and metric (:data:`METRICS`): the median as a multiple of the baseline's
    (rates: ``>1`` is faster; RTTs: ``>1`` is slower)."""
    base = next((r for r in results if r.key == baseline), None)

    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    out: dict[str, dict[str, float | None]] = {}
    for r in results:
        out[r.key] = {m: div(getattr(r, a), getattr(base, a) if base else None) for m, a in ATTR.items()}
    return out


def _num(v: float | None, err: str | None, digits: int = 0) -> str:
    if v is None:
        return "error" if err else "-"
    return f"{v:,.{digits}f}"


def _ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _pm(r: SystemResult, metric: str, median: float | None) -> str:
    """Half the min..max range as a percentage of the median: ``±4%``."""
    sp = spread(r, metric)
    if sp is None or not median or len(metric_values(r, metric)) < 2:
        return ""
    return f"±{50.0 * (sp[1] - sp[0]) / median:.0f}%"


def table(results: list[SystemResult], baseline: str, subscribers: int) -> str:
    """The comparison table, one row per system, plus notes and errors under it."""
    rat = ratios(results, baseline)
    head = [
        "system", "one-way msg/s", "±", f"vs {baseline}", "RTT p50 us", "±", "RTT p99 us", f"vs {baseline}",
        f"fan-out x{subscribers} deliv/s", "±", f"vs {baseline}",
    ]  # fmt: skip
    rows: list[list[str]] = []
    for r in results:
        if r.skipped:
            rows.append([r.label, "skipped", *[""] * (len(head) - 2)])
            continue
        q = rat[r.key]
        rows.append(
            [
                r.label,
                _num(r.throughput_msgs_per_s, r.errors.get("throughput")),
                _pm(r, "throughput", r.throughput_msgs_per_s),
                _ratio(q["throughput"]),
                _num(r.rtt_p50_us, r.errors.get("rtt"), 1),
                _pm(r, "rtt_p50", r.rtt_p50_us),
                _num(r.rtt_p99_us, r.errors.get("rtt"), 1),
                _ratio(q["rtt_p50"]),
                _num(r.fanout_deliveries_per_s, r.errors.get("fanout")),
                _pm(r, "fanout", r.fanout_deliveries_per_s),
                _ratio(q["fanout"]),
            ]
        )
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    out.append("")
    if not any(r.key == baseline and not r.skipped for r in results):
        out.append(f"no ratios: {baseline} is not in this run.")
    out.append(
        f"vs {baseline}: throughput columns are multiples of {baseline}'s rate (>1 = faster); "
        f"the RTT column is p50 / {baseline}'s p50 (>1 = slower). '-' = not applicable. "
        "± = half the min..max range of the repeats, as % of the median."
    )
    for r in results:
        if r.skipped:
            out.append(f"  {r.label}: skipped: {r.skipped}")
        elif r.notes:
            out.append(f"  {r.label}: {r.notes}")
        for workload, err in r.errors.items():
            out.append(f"  {r.label} {workload} error: {err}")
    return "\n".join(out)


#: The second table: (heading, metric, unit digits) of the workloads beyond the main three.
MORE: tuple[tuple[str, str, int], ...] = (
    ("paced msg/s", "paced", 0),
    ("64 in flight req/s", "inflight64", 0),
    ("64 KiB msg/s", "payload_64k", 0),
    ("1 MiB msg/s", "payload_1m", 0),
    ("RTT flooded p50 us", "rtt_loaded_p50", 1),
    ("p99 us", "rtt_loaded_p99", 1),
)


def more_table(results: list[SystemResult], baseline: str) -> str:
    """The workloads beyond the main three, for the systems that ran any ("" if none did)."""
    ran = [r for r in results if not r.skipped and any(getattr(r, ATTR[m]) is not None for _, m, _ in MORE)]
    if not ran:
        return ""
    rat = ratios(results, baseline)
    head = ["system"]
    for name, metric, _ in MORE:
        head += [name, "±"] + ([f"vs {baseline}"] if not metric.startswith("rtt_loaded") else [])
    rows: list[list[str]] = []
    for r in ran:
        row = [r.label]
        for _, metric, digits in MORE:
            value = getattr(r, ATTR[metric])
            err = r.errors.get(METRICS[metric][0])
            row += [_num(value, err, digits), _pm(r, metric, value)]
            if not metric.startswith("rtt_loaded"):
                row.append(_ratio(rat[r.key][metric]))
        rows.append(row)
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([
        line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows), "",
        "paced: one-way, the sender yields to its event loop after every send (each message alone); "
        "64 in flight: requests/s with 64 outstanding; 64 KiB / 1 MiB: one-way with envelopes of that size; "
        "RTT flooded: request round trips while a second sender floods the echo server's node.",
    ])  # fmt: skip


def write_json(
    path: Path,
    meta: dict[str, Any],
    results: list[SystemResult],
    baseline: str,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write results.json; *extra* adds top-level sections (targets, zmesh join/scale, ...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "meta": meta,
        "baseline": baseline,
        "results": [asdict(r) for r in results],
        "ratios_vs_baseline": ratios(results, baseline),
        **(extra or {}),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")


def write_chart(path: Path, results: list[SystemResult], title: str, subscribers: int) -> str:
    """Write the PNG; return "" or a one-line note on why it was skipped."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return "matplotlib not installed (pip install matplotlib): chart skipped"
    ran = [r for r in results if not r.skipped]
    if not ran:
        return "nothing ran: chart skipped"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.5))
    panels: list[tuple[Any, str, list[tuple[str, float]]]] = [
        (axes[0], "one-way throughput (msgs/s)",
         [(r.label, r.throughput_msgs_per_s) for r in ran if r.throughput_msgs_per_s is not None]),
        (axes[1], f"fan-out, 1 -> {subscribers} (deliveries/s)",
         [(r.label, r.fanout_deliveries_per_s) for r in ran if r.fanout_deliveries_per_s is not None]),
    ]  # fmt: skip
    for ax, name, data in panels:
        labels = [d[0] for d in data]
        values = [d[1] for d in data]
        bars = ax.bar(range(len(values)), values, color="#4C72B0")
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], fontsize=8)
        ax.set_xticks(range(len(values)), labels, rotation=25, ha="right", fontsize=9)
        ax.set_title(name)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.margins(y=0.12)
    ax = axes[2]
    rtt = [r for r in ran if r.rtt_p50_us is not None and r.rtt_p99_us is not None]
    xs = list(range(len(rtt)))
    w = 0.38
    b50 = ax.bar([x - w / 2 for x in xs], [r.rtt_p50_us or 0.0 for r in rtt], w, label="p50", color="#55A868")
    b99 = ax.bar([x + w / 2 for x in xs], [r.rtt_p99_us or 0.0 for r in rtt], w, label="p99", color="#C44E52")
    ax.bar_label(b50, fmt="%.0f", fontsize=8)
    ax.bar_label(b99, fmt="%.0f", fontsize=8)
    ax.set_xticks(xs, [r.label for r in rtt], rotation=25, ha="right", fontsize=9)
    ax.set_title("request/reply RTT (us, lower is better)")
    ax.legend()
    ax.margins(y=0.12)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return ""
