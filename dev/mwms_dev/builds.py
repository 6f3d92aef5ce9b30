"""The hack/build scripts as tests and benches call them: each builds what is missing (or waits on the same
build running beside it, under its lock), caches it outside the repo, and prints its path last."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A cold Go build on 2 shared cores, or one waited on behind another's lock.
BUILD_TIMEOUT_SECONDS = 3600


class BuildError(RuntimeError):
    pass


def built(
    script: str, *args: str, env: Mapping[str, str] | None = None, timeout: float = BUILD_TIMEOUT_SECONDS
) -> Path:
    """The path hack/build/`script` prints last; BuildError, with its stderr's tail, if it fails."""
    command = ["bash", str(REPO / "hack" / "build" / script), *args]
    try:
        full_env = {**os.environ, **(env or {})}
        done = subprocess.run(
            command, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"hack/build/{script} did not finish in {timeout:.0f} s") from e
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        shown = " ".join([script, *args])
        raise BuildError(f"hack/build/{shown} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return Path(lines[-1])
