"""A name as one token of a broker's address (internal): the characters the
broker reserves (and ``%`` itself) written ``%XX``, and back. NATS subjects
and MQTT topics each reserve their own (see _nats_names, _mqtt_names)."""

from __future__ import annotations

__all__ = ["escape", "unescape"]


def escape(name: str, reserved: str) -> str:
    """``name`` with each character of ``reserved`` (which holds ``%``) as ``%XX``."""
    if not any(c in name for c in reserved):
        return name
    return "".join(f"%{ord(c):02X}" if c in reserved else c for c in name)


def unescape(token: str) -> str:
    if "%" not in token:
        return token
    out, i = [], 0
    while i < len(token):
        if token[i] == "%" and i + 3 <= len(token):
            try:
                out.append(chr(int(token[i + 1:i + 3], 16)))
                i += 3
                continue
            except ValueError:
                pass
        out.append(token[i])
        i += 1
    return "".join(out)
