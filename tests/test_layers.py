"""Issue 27: the package's layers have no way back. Every ``import`` of a streamguard module is read
from the source (ast, nothing imported) and the top-level package it comes from is checked against
the packages it must not reach: the bottom (``support``, ``frames``, ``privacy``) imports nothing of
streamguard above it, the model and the intake (``model``, ``ingest``) never reach the stream, the
consumer or the command line, and the daemon (``stream``) never reaches the consumer or the CLI.
Before issue 27 this found five arrows (model/calibrate.py and ingest/ importing stream/records.py
and stream/steps.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import streamguard

ROOT = Path(streamguard.__file__).parent
UPPER = {"stream", "consumer", "cli", "demo"}
#: The bottom packages and the only streamguard packages each may import.
BOTTOM: dict[str, set[str]] = {"support": set(), "frames": set(), "privacy": {"support"}}
#: Packages above the bottom and what each must never import.
FORBIDDEN: dict[str, set[str]] = {
    "model": UPPER | {"ingest", "config", "ledger"},
    "ingest": UPPER,
    "stream": {"consumer", "cli", "demo"},
}


def _imports(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """(top-level streamguard package imported, line) for every import in ``path``, a module of the
    package at ``root``."""
    rel = path.relative_to(root.parent).with_suffix("").parts
    here = list(rel[:-1])
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [node.names[0].name])
            elif node.module and node.module.split(".")[0] == "streamguard":
                target = node.module.split(".")
            else:
                continue
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names if a.name.split(".")[0] == "streamguard"]
            if not names:
                continue
            target = names[0]
        else:
            continue
        found.append((target[1] if len(target) > 1 else "", node.lineno))
    return found


def test_no_import_runs_against_the_layers() -> None:
    assert not _wrong_arrows(ROOT)


def _wrong_arrows(root: Path) -> list[str]:
    wrong = []
    for package in [*BOTTOM, *FORBIDDEN]:
        files = sorted((root / package).rglob("*.py"))
        assert files, package
        for path in files:
            for target, line in _imports(path, root):
                if target != package and (target in FORBIDDEN.get(package, set()) or
                                          (package in BOTTOM and target not in BOTTOM[package])):
                    wrong.append(f"{path.relative_to(root.parent)}:{line} imports streamguard.{target}")
    return wrong


def test_the_check_sees_wrong_arrows(tmp_path: Path) -> None:
    """The scan finds relative, absolute and function-level imports upward (so a pass means
    something): a copy of the tree with two of the old arrows put back."""
    import shutil

    root = tmp_path / "streamguard"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    with (root / "model" / "calibrate.py").open("a") as fh:
        fh.write("\n\ndef _late() -> None:\n    from ..stream.steps import StepTracker  # noqa\n")
    with (root / "frames" / "records.py").open("a") as fh:
        fh.write("\nimport streamguard.model.chain  # noqa\n")
    wrong = _wrong_arrows(root)
    assert len(wrong) == 2 and "model/calibrate.py" in wrong[0] + wrong[1], wrong


def test_plan_cache_fingerprints_read_every_source_they_name() -> None:
    """The plan caches key on the source of the code that designs a plan (a change re-plans); a
    name that no longer exists (a module moved) would be hashed as a name and drop that code from
    the key silently — as chain.py and channel.py would have been when they moved."""
    from streamguard.model import robust_cache
    from streamguard.redaction import plan_cache

    for module, names in ((plan_cache, plan_cache._PLANNING_SOURCES), (robust_cache, robust_cache._SOURCES)):
        here = Path(module.__file__).resolve().parent
        assert all((here / name).is_file() for name in names), [n for n in names if not (here / n).is_file()]
