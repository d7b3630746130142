"""The documentation site (mkdocs.yml, docs/) builds strictly, and its command-line reference is the
real parser's ``--help``.

mkdocs.yml sets ``strict: true`` and turns omitted pages, unresolved links and missing anchors into
warnings, so a build fails on any of them: the site is built here as the README's test command
runs it, and once more from a copy with a broken link, a missing anchor and a page left out of the
navigation, which must fail naming each. The CLI page (docs/cli.md, filled in by mkdocs_hooks.py)
must hold every command the parser has — found by walking the parser, not listed here — with its
one-line help and its whole ``--help`` text.
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from streamguard.cli import build_parser
from streamguard.cli.reference import commands, help_text

ROOT = Path(__file__).resolve().parents[1]
#: What a build reads: the configuration, its hook, the docs and the two files the hook includes.
SOURCES = ["mkdocs.yml", "mkdocs_hooks.py", "README.md", "deploy/README.md", "docs"]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, capture_output=True, text=True, timeout=120)


def _words(text: str) -> str:
    return " ".join(text.split())


def _page_text(page: Path) -> str:
    """A built page's text as a reader sees it: tags dropped, entities decoded, blanks folded."""
    return _words(html.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = _build(ROOT, out)
    assert proc.returncode == 0, proc.stderr
    return out


def test_every_docs_page_is_built(site: Path) -> None:
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert pages
    for stem in pages:
        assert (site / stem / "index.html").is_file(), stem
    # the README is the home page and deploy/README.md a page of its own
    assert "Quick start: a zigbee2mqtt sensor in Home Assistant, privatized" in _page_text(site / "index.html")
    assert "Deploying streamguard on a device" in _page_text(site / "deploy" / "index.html")


def test_cli_reference_holds_every_command_with_its_help(site: Path) -> None:
    parser = build_parser()
    text = _page_text(site / "cli" / "index.html")
    found = list(commands(parser))
    top = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {c.words[0] for c in found} == set(top.choices)
    assert any(len(c.words) > 1 for c in found)  # groups (ledger, config, mechanism) are walked into
    assert _words(help_text(parser)) in text
    for cmd in found:
        name = "streamguard " + " ".join(cmd.words)
        assert cmd.help, f"{name} has no help line"
        assert _words(cmd.help) in text, name
        assert _words(help_text(cmd.parser)) in text, name


def test_strict_build_fails_on_broken_links_anchors_and_orphan_pages(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for name in SOURCES:
        src, dst = ROOT / name, root / name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    with (root / "docs" / "concepts.md").open("a", encoding="utf-8") as f:
        f.write("\nSee [nowhere](no-such-page.md) and [a heading](guarantees.md#no-such-heading).\n")
    (root / "docs" / "orphan.md").write_text("# Not in the nav\n", encoding="utf-8")
    proc = _build(root, tmp_path / "site")
    assert proc.returncode != 0
    assert "no-such-page.md" in proc.stderr
    assert "#no-such-heading" in proc.stderr
    assert "orphan.md" in proc.stderr
