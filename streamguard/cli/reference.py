"""The command-line reference as Markdown, rendered from the argparse definitions themselves.

The documentation site's page ``docs/cli.md`` is filled in at build time by ``mkdocs_hooks.py``
with :func:`markdown`, so the reference is always what ``streamguard <command> --help`` prints:
for every command and sub-command (found by walking the parser, :func:`commands`), its one-line
``help`` and its whole ``--help`` text (usage, description, arguments), formatted at a fixed width
of :data:`WIDTH` columns so that a build does not depend on the terminal it runs in.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

#: Columns the help texts are formatted to (argparse reads ``COLUMNS``).
WIDTH = 100


class Command(NamedTuple):
    """One command of the parser: its words after ``streamguard``, its one-line help, its parser."""

    words: tuple[str, ...]
    help: str
    parser: argparse.ArgumentParser


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[Command]:
    """Every sub-command below ``parser``, depth first in registration order (a group such as
    ``ledger`` before its ``show``, ``export``, ``check``)."""
    for action in parser._actions:  # argparse keeps sub-commands only in this private list
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield Command((*words, name), helps[name], sub)
                yield from commands(sub, (*words, name))


@contextmanager
def _columns(width: int) -> Iterator[None]:
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


def help_text(parser: argparse.ArgumentParser) -> str:
    """``parser``'s ``--help`` text at :data:`WIDTH` columns."""
    with _columns(WIDTH):
        return parser.format_help()


def _fenced(text: str) -> str:
    fence = "```"
    while fence in text:  # a longer fence than any run of backticks inside
        fence += "`"
    return f"{fence}text\n{text.rstrip()}\n{fence}"


def markdown(parser: argparse.ArgumentParser) -> str:
    """The reference: the top-level ``--help``, then one section per command (heading level by
    depth), each with its one-line help as a paragraph and its ``--help`` in a fenced block."""
    parts = ["## `" + parser.prog + "`", "", _fenced(help_text(parser)), ""]
    for cmd in commands(parser):
        level = "#" * min(6, 2 + len(cmd.words) - 1)
        parts += [f"{level} `{cmd.parser.prog}`", ""]
        if cmd.help:
            parts += [_fenced(cmd.help) if "\n" in cmd.help else "*" + _escape(cmd.help) + "*", ""]
        parts += [_fenced(help_text(cmd.parser)), ""]
    return "\n".join(parts)


def _escape(text: str) -> str:
    """``text`` as literal Markdown inline text: HTML and Markdown's special characters escaped."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return "".join("\\" + c if c in "\\`*_{}[]()#+-.!|" else c for c in text)
