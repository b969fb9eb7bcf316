"""Topic patterns: dot-separated words, ``*`` matches one word, ``>`` the rest.

``research.*`` matches ``research.found`` but not ``research.found.paper``;
``research.>`` matches both, but not ``research`` itself. Words are
non-empty and printable, without spaces; ``*`` and ``>`` are words of
their own (``a.b*`` is refused), and ``>`` only the last one.
"""

from __future__ import annotations

from functools import lru_cache

from .errors import InvalidMessage

__all__ = ["MAX_TOPIC", "check_topic", "check_pattern", "is_pattern", "matches"]


MAX_TOPIC = 1024  # characters (a received message with a longer topic is dropped, malformed)
_valid_topics: set[str] = set()  # topics already checked (bounded in count and characters)
_VALID_MAX = 65536
_VALID_CHARS = 4 << 20
_valid_chars = 0


def _check_words(what: str, text: object, wildcards: bool) -> list[str]:
    """Split a topic or pattern into its words, or say what is wrong with it."""
    if not isinstance(text, str) or not text:
        raise InvalidMessage(f"{what} must be a non-empty string, got {text!r}")
    if len(text) > MAX_TOPIC:
        raise InvalidMessage(f"{what} is longer than {MAX_TOPIC} characters")
    if not text.isprintable() or any(c.isspace() for c in text):
        raise InvalidMessage(f"{what} {text!r} has a space or a control character; words are joined by '.'")
    words = text.split(".")
    if "" in words:
        raise InvalidMessage(f"{what} {text!r} has an empty word (two dots, or a dot at an end)")
    for word in words:
        if ("*" in word or ">" in word) and len(word) > 1:
            raise InvalidMessage(f"{what} {text!r}: '*' and '>' must be whole words, as in 'a.*' or 'a.>'")
    if not wildcards and ("*" in words or ">" in words):
        raise InvalidMessage(f"topic {text!r} has a wildcard; wildcards are for subscription patterns")
    if ">" in words[:-1]:
        raise InvalidMessage(f"{what} {text!r}: '>' may only be the last word")
    return words


def check_topic(topic: str) -> str:
    """Validate a concrete topic (no wildcards) and return it."""
    if topic.__class__ is str and topic in _valid_topics:
        return topic
    global _valid_chars
    _check_words("topic", topic, wildcards=False)
    if len(_valid_topics) < _VALID_MAX and _valid_chars + len(topic) <= _VALID_CHARS:
        _valid_topics.add(topic)
        _valid_chars += len(topic)
    return topic


def check_pattern(pattern: str) -> str:
    """Validate a subscription pattern and return it."""
    _check_words("pattern", pattern, wildcards=True)
    return pattern


def is_pattern(topic: str) -> bool:
    tokens = topic.split(".")
    return "*" in tokens or ">" in tokens


@lru_cache(maxsize=4096)  # bounded in bytes too: patterns and topics are at most 1,024 characters
def matches(pattern: str, topic: str) -> bool:
    """True when ``topic`` matches ``pattern``."""
    if pattern == topic:
        return True
    p_tokens = pattern.split(".")
    t_tokens = topic.split(".")
    for i, p in enumerate(p_tokens):
        if p == ">":
            return len(t_tokens) > i
        if i >= len(t_tokens):
            return False
        if p != "*" and p != t_tokens[i]:
            return False
    return len(p_tokens) == len(t_tokens)
