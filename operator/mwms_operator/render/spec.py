"""Pure: a TrainJob's spec with the operator's defaults (the parser is mwms_contract.trainjob's, which `mwms
local` shares)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mwms_contract.trainjob import SpecError, TrainJobSpec, parse


@dataclass(frozen=True)
class SpecDefaults:
    """What a TrainJob may leave out and the operator fills in: spec.mlflow.trackingUri and spec.image."""

    tracking_uri: str
    image: str


def parse_trainjob(body: Mapping[str, Any], defaults: SpecDefaults) -> TrainJobSpec:
    """Parse a TrainJob, spec.mlflow.trackingUri and spec.image defaulting to the operator's."""
    return parse(body, tracking_uri=defaults.tracking_uri, image=defaults.image)


def parse_for_group(
    body: Mapping[str, Any], defaults: SpecDefaults
) -> tuple[TrainJobSpec | SpecError, SpecError | None]:
    """(spec, template error). An invalid spec.template matters only to the next group (decide() says so and
    makes none with it), so the running group is judged by the rest of the spec, parsed without it."""
    spec = _parse(body, defaults)
    if not isinstance(spec, SpecError) or not spec.field.startswith("spec.template"):
        return spec, None
    rest = {k: v for k, v in (body.get("spec") or {}).items() if k != "template"}
    without = _parse({**body, "spec": rest}, defaults)
    return (without, spec) if isinstance(without, TrainJobSpec) else (spec, None)


def _parse(body: Mapping[str, Any], defaults: SpecDefaults) -> TrainJobSpec | SpecError:
    try:
        return parse_trainjob(body, defaults)
    except SpecError as error:
        return error
