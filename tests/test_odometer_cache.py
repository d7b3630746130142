"""The daemon's odometer documents are rebuilt only when their stream's ledger state changed.

A privacy status is refreshed every few seconds and carries the stream's odometer, which is built
from the stream's whole history; rebuilding it for every status cost more with every week of
uptime. :class:`OdometerCache` keys each stream's document on :meth:`Ledger.version`. These tests
check, after every kind of change a ledger knows (an aggregate admitted, marks and channel ranges
committed together, a refusal, a budget raised) and on a reopened ledger, that the cached document
equals one built from scratch by :func:`odometer`, that the other stream's is untouched, and that
nothing is rebuilt while nothing changed.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from streamguard.ledger.odometer import OdometerCache, odometer
from streamguard.ledger.store import BudgetExceeded, Ledger
from streamguard.quilt import QuiltModel, sigma_inf

from test_ledger import C1, agg, chan, mark

#: (the package exports the function under the module's name)
odometer_module = importlib.import_module("streamguard.ledger.odometer")


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_a_cached_document_equals_a_fresh_one_after_every_change(tmp_path: Path, monkeypatch) -> None:
    model = QuiltModel(C1, "stat")
    sigma = sigma_inf(model, 1.0).sigma
    path = tmp_path / "ledger.sqlite"
    builds: list[str] = []
    real = odometer_module.odometer

    def counting(ledger: Ledger, device: str, stream: str, *, limit: int | None = 100) -> dict:
        builds.append(stream)
        return real(ledger, device, stream, limit=limit)

    monkeypatch.setattr(odometer_module, "odometer", counting)
    changes = [
        lambda led: led.admit(agg(model, 0, 9, sigma), 5.0, model=model),
        lambda led: led.commit_all([mark(3, 0.8), mark(12, 0.9), chan(0, 99)]),
        lambda led: led.commit_all([mark(3, 0.95)]),  # a second event of one mark
        lambda led: led.admit(agg(model, 5, 14, sigma), 0.1, model=model),  # over its budget: refused
        lambda led: led.admit(agg(model, 20, 29, sigma), 9.0, model=model),  # a larger budget
        lambda led: led.commit_all([chan(100, 199, other=("ldp_s", 1.5))]),
    ]
    for opened in range(2):  # (the second time on the reopened ledger: its versions start again)
        with Ledger.open(path) as led:
            cache = OdometerCache(led, 20)
            docs = {s: cache("d", s) for s in ("s", "t")}
            for change in changes if opened == 0 else changes[-1:]:
                before = {s: led.version("d", s) for s in ("s", "t")}
                try:
                    change(led)
                except BudgetExceeded:
                    pass
                assert led.version("d", "s") > before["s"] and led.version("d", "t") == before["t"]
                builds.clear()
                now = cache("d", "s")
                assert builds == ["s"] and now is not docs["s"]
                assert _same(now, real(led, "d", "s", limit=20))
                docs["s"] = now
                assert cache("d", "t") is docs["t"] and cache("d", "s") is now  # nothing changed: no rebuild
                assert builds == ["s"]
            assert docs["s"]["refusals"]["count"] == 1 and docs["s"]["redaction"]["count"] == 2


def test_nothing_new_leaves_the_version_alone(tmp_path: Path) -> None:
    """Reading the ledger (books, refusals, budgets, an odometer) and a commit of no events do not
    count as changes."""
    with Ledger.open(tmp_path / "ledger.sqlite") as led:
        led.commit_all([mark(1, 0.5)])
        v = led.version("d", "s")
        odometer(led, "d", "s")
        led.book("d", "s"), led.refusals("d", "s"), led.budgets("d", "s")
        assert led.commit_all([]) == []
        assert led.version("d", "s") == v == 1 and led.version("d", "other") == 0


@pytest.mark.parametrize("marks", [400])
def test_a_status_refresh_without_news_builds_nothing(tmp_path: Path, marks: int) -> None:
    """With a long history the cached document is returned as is (the same object), however many
    statuses ask for it."""
    with Ledger.open(tmp_path / "ledger.sqlite") as led:
        led.commit_all([mark(10 * i, 0.5) for i in range(marks)])
        cache = OdometerCache(led, 20)
        first = cache("d", "s")
        assert all(cache("d", "s") is first for _ in range(100))
        assert first["redaction"]["count"] == marks and len(first["redaction"]["marks"]) == 20
