"""The daemon's start-up imports only what it runs (issue 15): designer-only packages stay out.

scipy (LPs and special functions of the designers and the calibration), matplotlib (plots), the
test-only broker and schema validators are not needed to privatize; each costs a Pi seconds and
megabytes at every start (benchmarks/bench_gateway.py measures it). Each check runs in a fresh
interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: Top-level packages the daemon must not import: designer-only, plotting, test-only.
DESIGNER_ONLY = ("scipy", "matplotlib", "amqtt", "jsonschema", "jinja2", "hypothesis", "pytest")

# The `streamguard run` path: the CLI module (every sub-command registers), the configuration,
# the daemon, and each configured stream's runtime built and fed frames (which loads the
# privatizer's numba kernels and computes the plan with its exact leakage).
_DAEMON_PATH = """
import json, sys, time
from pathlib import Path
import streamguard.cli
from streamguard.config import load_settings
from streamguard.sampling import bit_source
from streamguard.stream.daemon import Daemon
from streamguard.stream.runtimes import make_runtime

for path in sys.argv[1:]:
    settings = load_settings(Path(path))
    Daemon(settings)
    for i, cfg in enumerate(settings.streams):
        rt = make_runtime(settings, cfg, bit_source(None, i))
        label = cfg.labels[0] if cfg.labels is not None else cfg.bins[0]
        for _ in range(40):
            rt.on_frame(json.dumps({"value": label}).encode(), time.time())
        rt.drain()
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules if sys.modules[m] is not None})))
"""


def _imported(*configs: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", _DAEMON_PATH, *configs], cwd=EXAMPLES,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_daemon_start_imports_no_designer_only_package():
    # 3R redaction (with Markov-Quilt aggregates) and per-record channel streams
    mods = _imported("streamguard.toml", "aggregates-and-channels.toml")
    assert {"numba", "numpy", "aiomqtt", "streamguard"} <= mods  # the path really ran
    assert not mods & set(DESIGNER_ONLY), sorted(mods & set(DESIGNER_ONLY))


def test_numba_keeps_linear_algebra_after_importing_without_scipy():
    """streamguard.support.jit imports numba with scipy hidden; scipy and numba's BLAS-backed `@` still
    work afterwards (numba imports scipy.linalg when such a kernel is compiled)."""
    code = """
import sys
import numpy as np
import streamguard.support.jit
assert "scipy" not in sys.modules
import numba
from scipy.special import gammaln

@numba.njit
def matvec(a, b):
    return a @ b

print(float(gammaln(4.0)), matvec(np.array([[2.0, 0.0], [1.0, 3.0]]), np.array([1.0, 2.0])).tolist())
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lg, mv = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert float(lg) == pytest.approx(1.791759469228055, rel=1e-15)  # log 3! = log 6
    assert json.loads(mv) == [2.0, 7.0]
