"""Recording the steps a stream's privatizer sees, for calibration (issue 10; the model issue's
``calibrate``, and ``[streams.model] calibration`` today, read this file).

Format: JSON lines ``{"value": <label or number>, "ts": <grid time>}``, one per step in order; a
step whose reading is unknown (stale, offline, unreadable, no reading yet) is
``{"value": null, "ts": …}``, so a reader breaks the chain there instead of counting a transition
across it. The file holds raw readings: it is created 0600 (support/private_files.py), stays on the
device, and stops growing after ``max_steps`` lines (logged once).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import IO

from ..support.private_files import private_file

log = logging.getLogger(__name__)


class StepRecorder:
    """Appends one line per step to ``path`` (module docstring)."""

    def __init__(self, path: Path, *, max_steps: int, stream: str) -> None:
        private_file(path)
        self.path = path
        self.stream = stream
        self.max_steps = max_steps
        with path.open("rb") as f:
            self.written = sum(1 for _ in f)
        self._file: IO[str] | None = path.open("a", encoding="utf-8")

    def step(self, value: str | float | None, ts: float) -> None:
        if self._file is None:
            return
        if self.written >= self.max_steps:
            log.warning("stream %s: the steps file %s reached max_steps (%d): recording stopped",
                        self.stream, self.path, self.max_steps)
            self.close()
            return
        self._file.write(json.dumps({"value": value, "ts": ts}, separators=(",", ":")) + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
