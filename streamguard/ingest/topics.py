"""MQTT topic filters (MQTT 3.1.1 §4.7): ``+`` matches one level, ``#`` (last) any number of levels,
including none; a filter starting with a wildcard never matches a ``$`` topic."""

from __future__ import annotations


def valid_filter(topic_filter: str) -> bool:
    """Is ``topic_filter`` a well-formed filter (wildcards only as whole levels, ``#`` last)?"""
    levels = topic_filter.split("/")
    for i, level in enumerate(levels):
        if ("+" in level and level != "+") or ("#" in level and (level != "#" or i != len(levels) - 1)):
            return False
    return bool(topic_filter)


def matches(topic_filter: str, topic: str) -> bool:
    """Does ``topic`` (a concrete topic name) match ``topic_filter``?"""
    if topic.startswith("$") and topic_filter[:1] in ("+", "#"):
        return False
    want, got = topic_filter.split("/"), topic.split("/")
    for i, level in enumerate(want):
        if level == "#":
            return True
        if i >= len(got) or (level != "+" and level != got[i]):
            return False
    return len(want) == len(got)


def _wild(level: str) -> bool:
    return level in ("+", "#")


def _only_the_empty_topic(x: list[str], y: list[str]) -> bool:
    """For two filters (as levels) that agree level by level: is the one-level empty topic, which
    is no topic name (a name has at least one character), their only common topic? A filter
    without ``#`` fixes the common topics' length (with ``#`` in both it is unbounded); at one
    level, an empty literal level in either forces that level empty."""
    if "#" in x and "#" in y:
        return False
    fixed = y if "#" in x else x
    return len(fixed) == 1 and "" in (x[0], y[0])


def filters_overlap(a: str, b: str) -> bool:
    """Can one topic name match both filters ``a`` and ``b`` (as :func:`matches` decides)?

    Level by level: two literal levels must be equal; ``+`` takes any one level; ``#`` takes the
    rest, including nothing (``a/#`` matches ``a``), so it ends the comparison; one filter ending
    while the other has a level left other than ``#`` leaves no common topic. A filter starting
    with a wildcard never matches a ``$`` topic, so it meets no filter whose first level is a
    literal starting with ``$`` (``#`` and ``$SYS/#`` share nothing). Otherwise a common topic
    exists — each level a wildcard meets is the other's literal or any literal (``x``) — unless the
    only one is the empty topic (``+`` and ``/#``: :func:`_only_the_empty_topic`)."""
    x, y = a.split("/"), b.split("/")
    if _wild(x[0]) != _wild(y[0]) and (y[0] if _wild(x[0]) else x[0]).startswith("$"):
        return False
    for i in range(max(len(x), len(y))):
        if (i < len(x) and x[i] == "#") or (i < len(y) and y[i] == "#"):
            break
        if i >= len(x) or i >= len(y) or (x[i] != y[i] and "+" not in (x[i], y[i])):
            return False
    return not _only_the_empty_topic(x, y)
