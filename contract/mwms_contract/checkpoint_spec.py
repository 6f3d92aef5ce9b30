"""spec.checkpoint: a volume every worker mounts, or a store (the job's MLflow run or an s3:// prefix), with
how often the group saves and the grace period it has to save after SIGTERM."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mwms_contract import names
from mwms_contract.spec_values import (
    MAX_SECONDS,
    VOLUME_SOURCES,
    SpecError,
    mapping,
    optional_integer,
    string,
    volume_source,
)

# spec.checkpoint.store: the job's run, or s3://bucket[/prefix] without credentials (the CRD says the same).
CHECKPOINT_S3_STORE = re.compile(r"s3://[^/@\s]+(/\S*)?")


@dataclass(frozen=True)
class CheckpointSpec:
    """spec.checkpoint: where the group's training state is kept, so a restarted group resumes where the last
    save left it. Exactly one of `volume` and `store`."""

    volume: Mapping[str, Any] | None = None  # a pod volume source (VOLUME_SOURCES) every worker mounts
    store: str | None = None  # names.CHECKPOINT_STORE_RUN or an s3:// prefix; the chief alone uses it
    every_steps: int | None = None  # also save every this many steps (None: at epochs' ends only)
    # The pods' terminationGracePeriodSeconds: how long the group has to save after SIGTERM (None: the
    # template's, else Kubernetes' default).
    termination_grace_period_seconds: int | None = None


CHECKPOINT_KEYS = ("store", "everySteps", "terminationGracePeriodSeconds")


def parse_checkpoint(value: Any, has_code: bool, template: Mapping[str, Any]) -> CheckpointSpec | None:
    """spec.checkpoint: a volume source (as before) or a store, with how often to save and the grace to save
    in; the built-in fit alone saves to a store, within an epoch or on SIGTERM."""
    if value is None:
        return None
    given = mapping(value, "spec.checkpoint")
    store = given.get("store")
    unknown = sorted(set(given) - set(CHECKPOINT_KEYS) - set(VOLUME_SOURCES))
    if unknown:
        raise SpecError(
            f"spec.checkpoint.{unknown[0]}",
            f"unsupported; use store or a volume source ({', '.join(VOLUME_SOURCES)}), with everySteps and "
            "terminationGracePeriodSeconds",
        )
    source = {key: v for key, v in given.items() if key in VOLUME_SOURCES}
    if (store is not None) == bool(source):
        raise SpecError("spec.checkpoint", f"must set exactly one of store, {', '.join(VOLUME_SOURCES)}")
    if store is not None:
        store = string(store, "spec.checkpoint.store")
        if store != names.CHECKPOINT_STORE_RUN and not CHECKPOINT_S3_STORE.fullmatch(store):
            raise SpecError(
                "spec.checkpoint.store",
                f"must be {names.CHECKPOINT_STORE_RUN!r} (the job's MLflow run) or s3://bucket/prefix "
                f"without credentials, got {store!r}",
            )
    every = optional_integer(given.get("everySteps"), "spec.checkpoint.everySteps", minimum=1)
    grace = optional_integer(
        given.get("terminationGracePeriodSeconds"),
        "spec.checkpoint.terminationGracePeriodSeconds",
        minimum=0,
        maximum=MAX_SECONDS,
    )
    if has_code and (store is not None or every is not None or grace is not None):
        raise SpecError(
            "spec.checkpoint",
            "store, everySteps and terminationGracePeriodSeconds work with the built-in fit (spec.trainer); "
            "with spec.code give a volume and use BackupAndRestore in your code",
        )
    pod = mapping(template.get("spec"), "spec.template.spec")
    if grace is not None and "terminationGracePeriodSeconds" in pod:
        raise SpecError(
            "spec.template.spec.terminationGracePeriodSeconds",
            "is set by spec.checkpoint.terminationGracePeriodSeconds: set it there only",
        )
    return CheckpointSpec(
        volume=volume_source(source, "spec.checkpoint") if store is None else None,
        store=store,
        every_steps=every,
        termination_grace_period_seconds=grace,
    )
