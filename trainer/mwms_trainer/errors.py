"""The trainer's failures, each with the exit code the operator acts on (see mwms_contract.names)."""

from __future__ import annotations

from mwms_contract import names


class TrainerError(Exception):
    exit_code = names.EXIT_FAILURE


class ConfigError(TrainerError, ValueError):
    """A setting is invalid: permanent, the message names the setting."""

    exit_code = names.EXIT_INVALID_CONFIG

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(f"{setting}: {message}")
        self.setting = setting


class RetryableError(TrainerError):
    """Peer lost, startup deadline passed, MLflow unreachable: restarting the group may succeed."""

    exit_code = names.EXIT_RETRYABLE


class MlflowRefusedError(TrainerError):
    """MLflow answered that the request itself is wrong (a bad value, a name taken, no permission): permanent,
    the same request after a restart gets the same answer."""


class DivergedError(TrainerError):
    """The loss became NaN or infinite: permanent, a restart would diverge the same way."""


class ResultError(TrainerError):
    """The chief's return value cannot be the job's result (not JSON, or too big): permanent, the same code
    returns the same value."""
