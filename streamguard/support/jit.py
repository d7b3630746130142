"""One place that imports numba, so that caching never breaks an import.

Every kernel in streamguard is compiled with ``cache=True`` (notes/ecosystem.md §4.2–4.3). numba
writes its cache next to the source file unless ``NUMBA_CACHE_DIR`` is set; on a read-only install
(system site-packages, a container, Nix) it then fails *at import* with "no locator available".
Before numba is imported we therefore point ``NUMBA_CACHE_DIR`` at a writable user cache directory
whenever the package directory is not writable and the operator has not chosen one (systemd units
set it to ``CacheDirectory=``, see ``deploy/``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_PACKAGE_DIR = Path(__file__).resolve().parent


def _is_writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def choose_cache_dir(
    package_dir: Path,
    env: Mapping[str, str],
    is_writable: Callable[[Path], bool] = _is_writable,
) -> str | None:
    """Return the directory to put in ``NUMBA_CACHE_DIR``, or None to keep numba's default.

    An operator's explicit ``NUMBA_CACHE_DIR`` always wins. Otherwise numba's default (the
    ``__pycache__`` beside the source) is kept when the package directory is writable; if not,
    ``$XDG_CACHE_HOME/streamguard/numba`` (``~/.cache`` by default) is used, and the system temp
    directory as the last resort.
    """
    if env.get("NUMBA_CACHE_DIR"):
        return None
    if is_writable(package_dir):
        return None
    base = env.get("XDG_CACHE_HOME") or (str(Path(env["HOME"]) / ".cache") if env.get("HOME") else "")
    candidates = [Path(base) / "streamguard" / "numba"] if base else []
    candidates.append(Path(tempfile.gettempdir()) / f"streamguard-numba-{os.getuid()}")
    for cand in candidates:
        try:
            cand.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if is_writable(cand):
            return str(cand)
    return None


_chosen = choose_cache_dir(_PACKAGE_DIR, os.environ)
if _chosen is not None:
    os.environ["NUMBA_CACHE_DIR"] = _chosen
    if "numba" in sys.modules:  # imported before us: numba read its config already
        sys.modules["numba"].config.CACHE_DIR = _chosen


def _import_numba() -> Any:
    """``import numba`` (and its array-math registry), without letting them import scipy.

    scipy serves the designers only (LPs, special functions); the daemon's kernels use no BLAS.
    Yet ``numba/__init__.py`` imports scipy to check its version (the project requires ≥ 1.11),
    and ``numba.np.arraymath``, loaded with the CPU target on the first kernel call, imports
    ``scipy.linalg.cython_blas`` to set ``_HAVE_BLAS`` — about 0.8 s and 26 MB on the project's
    machine (bench_gateway). While both are imported here, ``sys.modules["scipy"] = None`` makes
    ``import scipy`` fail; the entry is removed right after, so a later ``import scipy`` works.
    The only effect in numba: ``np.correlate``/``np.convolve`` in a kernel use numba's plain loop
    for their inner product instead of BLAS. ``np.dot``, ``@`` and ``np.linalg`` still work: they
    import ``scipy.linalg`` themselves when such a kernel is compiled.
    """
    if "scipy" in sys.modules:  # already imported (a designer ran first): nothing to save
        import numba

        return numba
    sys.modules["scipy"] = None  # type: ignore[assignment]
    try:
        import numba
        import numba.np.arraymath  # noqa: F401  (see above: _HAVE_BLAS without scipy)
    finally:
        if "scipy" in sys.modules and sys.modules["scipy"] is None:
            del sys.modules["scipy"]
    return numba


numba = _import_numba()  # (must follow the cache-dir decision)

JIT_ENABLED: bool = not numba.config.DISABLE_JIT


def kernel(func: F) -> F:
    """Compile ``func`` with numba in nopython mode, cached on disk, releasing the GIL."""
    return numba.njit(cache=True, nogil=True)(func)  # type: ignore[return-value]
