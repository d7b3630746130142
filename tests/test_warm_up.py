"""The daemon loads its compiled kernels at start, not at a stream's first mark (issue 15).

Without the warm-up, the first private mark (its exact evaluation) and the first fractional
redaction row (the redaction kernel, the keystream cipher) loaded numba kernels from the cache in
the data path — 20–35 ms during which the stream stalled, and seconds right after an install (a
compile). The check runs in a fresh interpreter (this test process has loaded every kernel
already): it restores a daemon, lists every numba kernel of streamguard and the signatures each has
loaded, feeds each stream frames with marks, and lists them again. With the warm-up nothing new
is loaded by the data path; with the warm-up switched off (the control) something is, so the check
can tell.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

_SCRIPT = """
import asyncio, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from daemon_harness import restored
from streamguard.config import Settings
from streamguard.stream.redaction_runtime import RedactionRuntime

if sys.argv[2] == "off":
    RedactionRuntime.warm_up = lambda self: None

def binary(name, delay):
    return {"name": name, "labels": ["vacant", "occupied"], "model": {"alpha": 0.05, "beta": 0.2},
            "epsilon": 1.0, "delay": delay, "source": "mqtt"}

settings = Settings(
    device="dev", broker={"host": "127.0.0.1", "port": 1},
    outbox={"path": Path(tempfile.mkdtemp()) / "outbox.sqlite"},
    streams=[binary("now", 0), binary("held", None),
             {"name": "three", "labels": ["a", "b", "c"], "epsilon": 1.0, "source": "mqtt",
              "model": {"matrix": [[0.8, 0.15, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]]}}])

def loaded():
    from numba.core.dispatcher import Dispatcher
    out = {}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith("streamguard"):
            continue
        for attr, obj in vars(mod).items():
            if isinstance(obj, Dispatcher):
                out[f"{obj.py_func.__module__}.{obj.py_func.__qualname__}"] = len(obj.overloads)
    return out

async def main():
    async with restored(settings) as (daemon, _box):
        before = loaded()
        for cfg in settings.streams:
            labels = cfg.labels
            for i in range(3000):
                private = ',"private":true' if i % 1000 == 999 else ""
                frame = f'{{"value":"{labels[i * 7 // 5 % len(labels)]}","ts":{1.7e9 + i}{private}}}'
                await daemon.intake.handle_frame(cfg.name, [frame.encode()])
                daemon.store.queue.clear()
        marks = sum(bool(rt.core.status()["finished_marks"]) for rt in daemon.runtimes.values())
        after = loaded()
    print(json.dumps({"before": before, "after": after, "streams_with_marks": marks}))

asyncio.run(main())
"""


def _kernels(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(TESTS), mode], capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _new_in_data_path(run: dict) -> dict[str, int]:
    return {k: n - run["before"].get(k, 0) for k, n in run["after"].items() if n > run["before"].get(k, 0)}


def test_data_path_loads_no_kernel_after_start():
    warm = _kernels("on")
    assert warm["streams_with_marks"] == 3  # every stream really took marks
    used = {k for k, n in warm["after"].items() if n}
    assert any(k.endswith("_redact_chunk") for k in used), sorted(used)  # the draws ran through the kernel
    assert _new_in_data_path(warm) == {}


def test_without_warm_up_the_first_mark_loads_kernels():
    """The control: the same run with the warm-up switched off loads kernels in the data path."""
    cold = _kernels("off")
    assert cold["streams_with_marks"] == 3
    assert any(k.endswith("_redact_chunk") for k in _new_in_data_path(cold)), _new_in_data_path(cold)
