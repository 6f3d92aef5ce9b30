"""The stand-in worker (standin_worker.py) as a container of the project's trainer image: its source goes in
as `python -c`, so no host path is mounted and pods stay within Pod Security `restricted`."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from mwms_operator.render.pod import READINESS_PROBE

SOURCE = (Path(__file__).with_name("standin_worker.py")).read_text()


def trainer_image(loaded: Iterable[str]) -> str:
    """The project's trainer image among a node's loaded image names; skips the test before `make images`."""
    image = next((name for name in loaded if "/mwms-trainer:" in name), None)
    if image is None:
        pytest.skip("no mwms-trainer image on the node: run `make images` (build/images/*.oci.tar) first")
    return image


def standin_container(image: str) -> dict[str, Any]:
    """The `trainer` container fields that run the stand-in: the trainer image has python, mwms_contract and
    mwms_trainer, which is all the stand-in imports. It keeps the rendezvous state as the trainer does, so it
    asks for the trainer's readiness probe itself (the operator adds it only to `python -m mwms_trainer`)."""
    return {
        "image": image,
        "command": ["python", "-c", SOURCE],
        "readinessProbe": copy.deepcopy(READINESS_PROBE),
    }
