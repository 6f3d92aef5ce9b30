"""The TrainJob spec with the operator's own defaults: its tracking server and its release's trainer image.

The parser is mwms_contract.trainjob, which `mwms local` shares.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mwms_contract.trainjob import SpecError, TrainJobSpec, parse
from mwms_operator.config import OperatorConfig


def parse_trainjob(body: Mapping[str, Any], config: OperatorConfig) -> TrainJobSpec:
    """Parse a TrainJob, spec.mlflow.trackingUri and spec.image defaulting to the operator's settings."""
    return parse(body, tracking_uri=config.tracking_uri, image=config.trainer_image)


def parse_for_group(
    body: Mapping[str, Any], config: OperatorConfig
) -> tuple[TrainJobSpec | SpecError, SpecError | None]:
    """(spec, template error). An invalid spec.template matters only to the next group (decide() says so and
    makes none with it), so the running group is judged by the rest of the spec, parsed without it."""
    spec = _parse(body, config)
    if not isinstance(spec, SpecError) or not spec.field.startswith("spec.template"):
        return spec, None
    rest = {k: v for k, v in (body.get("spec") or {}).items() if k != "template"}
    without = _parse({**body, "spec": rest}, config)
    return (without, spec) if isinstance(without, TrainJobSpec) else (spec, None)


def _parse(body: Mapping[str, Any], config: OperatorConfig) -> TrainJobSpec | SpecError:
    try:
        return parse_trainjob(body, config)
    except SpecError as error:
        return error
