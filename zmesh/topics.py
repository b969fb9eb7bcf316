"""Topic patterns: dot-separated tokens, ``*`` matches one token, ``>`` the rest.

``research.*`` matches ``research.found`` but not ``research.found.paper``;
``research.>`` matches both, but not ``research`` itself.
"""

from __future__ import annotations

from functools import lru_cache

from .errors import InvalidMessage

__all__ = ["MAX_TOPIC", "check_topic", "check_pattern", "is_pattern", "matches"]


MAX_TOPIC = 1024  # characters
_valid_topics: set[str] = set()  # topics already checked (bounded)


def check_topic(topic: str) -> str:
    """Validate a concrete topic (no wildcards) and return it."""
    if topic in _valid_topics:
        return topic
    if not isinstance(topic, str) or not topic:
        raise InvalidMessage(f"topic must be a non-empty string, got {topic!r}")
    if len(topic) > MAX_TOPIC:
        raise InvalidMessage(f"topic is longer than {MAX_TOPIC} characters")
    tokens = topic.split(".")
    if any(not t for t in tokens):
        raise InvalidMessage(f"topic {topic!r} has an empty token")
    if "*" in tokens or ">" in tokens:
        raise InvalidMessage(f"topic {topic!r} has a wildcard; wildcards are for patterns")
    if len(_valid_topics) < 65536:
        _valid_topics.add(topic)
    return topic


def check_pattern(pattern: str) -> str:
    """Validate a subscription pattern and return it."""
    if not isinstance(pattern, str) or not pattern:
        raise InvalidMessage(f"pattern must be a non-empty string, got {pattern!r}")
    tokens = pattern.split(".")
    if any(not t for t in tokens):
        raise InvalidMessage(f"pattern {pattern!r} has an empty token")
    if ">" in tokens[:-1]:
        raise InvalidMessage(f"pattern {pattern!r}: '>' may only be the last token")
    return pattern


def is_pattern(topic: str) -> bool:
    tokens = topic.split(".")
    return "*" in tokens or ">" in tokens


@lru_cache(maxsize=4096)
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
