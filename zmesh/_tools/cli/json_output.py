"""JSON in and out of the ``zmesh`` command (internal): strict both ways.

A payload argument is parsed as strict JSON (no ``NaN``/``Infinity``);
what does not parse is a usage error, never sent. What the command prints is
strict JSON too: a float JSON cannot hold prints as the string ``"NaN"``,
``"Infinity"`` or ``"-Infinity"``, a ``datetime`` (what a timestamp arrives
as) as its ISO 8601 string (``"2024-05-01T12:00:00+00:00"``), any other
value JSON has no type for (bytes, ...) as the string of its Python
``repr``, and a dictionary key that is not a string as its JSON text
(``1`` -> ``"1"``).
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

__all__ = ["PayloadError", "parse_payload", "dumps"]


class PayloadError(ValueError):
    """A payload argument that is not strict JSON."""


def _refuse_constant(name: str) -> Any:
    raise PayloadError(f"payload is not JSON: {name} is not a JSON value (write it as a string, \"{name}\")")


def parse_payload(text: str | None) -> Any:
    """The value a JSON payload argument stands for (None for no argument)."""
    if text is None:
        return None
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise PayloadError(
            f"payload is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (char {exc.pos})"
        ) from None


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, float) and not math.isfinite(key):
        return str(_float(key))
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return repr(key)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, dict):
        return {_key(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (datetime.date, datetime.time)):  # datetime is a date
        return value.isoformat()
    return repr(value)


def dumps(value: Any) -> str:
    """``value`` as one line of strict JSON (see the module docstring for what JSON cannot hold)."""
    return json.dumps(_jsonable(value), allow_nan=False)
