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
    script: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    timeout: float | None = BUILD_TIMEOUT_SECONDS,
    progress: bool = False,
) -> Path:
    """The path hack/build/`script` prints last; BuildError if it fails, with its stderr's tail, or, with
    `progress` (a long build a person watches), its stderr shown as it runs instead."""
    command = ["bash", str(REPO / "hack" / "build" / script), *args]
    full_env = {**os.environ, **(env or {})}
    stderr = None if progress else subprocess.PIPE
    try:
        done = subprocess.run(
            command, cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(f"hack/build/{script} did not finish in {e.timeout:.0f} s") from e
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        shown = " ".join([script, *args])
        said = "its output is above" if progress else done.stderr[-3000:]
        raise BuildError(f"hack/build/{shown} failed (exit {done.returncode}):\n{said}")
    return Path(lines[-1])
