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
