"""The fitted model, kept on the checkpoint volume until MLflow has it: a chief that fails while uploading
leaves it there, and the restarted chief uploads it (train.upload_kept) instead of fitting again."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any

from mwms_trainer.tfenv import keras
from mwms_trainer.trainer_config import Settings

KEPT_DIR = "fitted"  # under the job's folder on the checkpoint volume
KEPT_MODEL = "model.keras"
KEPT_UPLOAD = "upload.json"  # written last: its presence means the kept model is complete


@dataclass(frozen=True)
class Upload:
    """What logging a fitted model needs besides the model: kept beside it, so that a restart that only
    uploads it loads no data."""

    params: dict[str, Any]  # for a run that has to be opened anew
    columns: list[str]  # the training columns, in the order the model takes them
    training: dict[str, float]  # the last epoch's training metrics
    held_out: dict[str, float]


def kept_model_dir(settings: Settings) -> str | None:
    """Where the chief keeps the fitted model until MLflow has it: the checkpoint volume, beside (not inside)
    BackupAndRestore's directory, which fit deletes when it ends. None without a volume."""
    if not settings.checkpoint_dir:
        return None
    return os.path.join(settings.checkpoint_dir, settings.job_uid, KEPT_DIR)


def keep_fitted(directory: str, plain: Any, upload: Upload) -> None:
    """Save the fitted model before uploading it, so a failed upload costs a restart, not the fit."""
    os.makedirs(directory, exist_ok=True)
    partial = os.path.join(directory, "partial-" + KEPT_MODEL)
    plain.save(partial)
    os.replace(partial, os.path.join(directory, KEPT_MODEL))
    partial = os.path.join(directory, "partial-" + KEPT_UPLOAD)
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(dataclasses.asdict(upload), f)
    os.replace(partial, os.path.join(directory, KEPT_UPLOAD))


def fit_is_kept(directory: str) -> bool:
    """Whether a chief of this job finished its fit and kept the model in `directory` (see keep_fitted)."""
    return os.path.exists(os.path.join(directory, KEPT_UPLOAD))


def load_kept(directory: str) -> tuple[Any, Upload]:
    """The model a previous chief fitted and kept (see keep_fitted), with what its upload needs."""
    with open(os.path.join(directory, KEPT_UPLOAD), encoding="utf-8") as f:
        upload = Upload(**json.load(f))
    return keras().models.load_model(os.path.join(directory, KEPT_MODEL), compile=False), upload
