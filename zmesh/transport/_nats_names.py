"""Names on a NATS server (internal): a mesh, node or agent name as one subject
token or a key-value key, and back (see docs/transports.md)."""

from __future__ import annotations

__all__ = ["subject_token", "unescape", "kv_key", "from_kv_key", "bucket_name"]


def subject_token(name: str) -> str:
    """``name`` as one subject token: ``%``, ``.``, ``*`` and ``>`` escaped as ``%XX``."""
    if not any(c in name for c in "%.*>"):
        return name
    return "".join(f"%{ord(c):02X}" if c in "%.*>" else c for c in name)


def kv_key(name: str) -> str:
    """``name`` as a KV key (``[-_=a-zA-Z0-9]``): any other character as ``=XX`` per UTF-8 byte."""
    out = []
    for c in name:
        if c.isascii() and (c.isalnum() or c in "-_"):
            out.append(c)
        else:
            out.extend(f"={b:02X}" for b in c.encode())
    return "".join(out)


def from_kv_key(key: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(key):
        if key[i] == "=" and i + 2 < len(key):
            raw += bytes.fromhex(key[i + 1:i + 3])
            i += 3
        else:
            raw += key[i].encode()
            i += 1
    return raw.decode()


def bucket_name(mesh: str) -> str:
    return "zmesh_" + "".join(c if c.isascii() and c.isalnum() or c == "-" else f"_{ord(c):x}_" for c in mesh)


def unescape(token: str) -> str:
    if "%" not in token:
        return token
    out, i = [], 0
    while i < len(token):
        if token[i] == "%" and i + 2 < len(token):
            try:
                out.append(chr(int(token[i + 1:i + 3], 16)))
                i += 3
                continue
            except ValueError:
                pass
        out.append(token[i])
        i += 1
    return "".join(out)
