"""The TrainJob spec with the operator's own defaults: its tracking server and its release's trainer image.

The parser is mwms_contract.trainjob, which `mwms local` shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mwms_contract.trainjob import TrainJobSpec, parse
from mwms_operator.config import OperatorConfig


def parse_trainjob(body: Mapping[str, Any], config: OperatorConfig) -> TrainJobSpec:
    """Parse a TrainJob, spec.mlflow.trackingUri and spec.image defaulting to the operator's settings."""
    return parse(body, tracking_uri=config.tracking_uri, image=config.trainer_image)
