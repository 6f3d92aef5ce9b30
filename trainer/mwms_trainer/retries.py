"""How the chief retries MLflow: transient failures (unreachable, slow, 5xx, rate limits) with backoff, then
exit 75 so the operator restarts the group; a request MLflow refuses itself (a 4xx) at once, exit 1."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from mwms_trainer.errors import MlflowRefusedError, RetryableError

log = logging.getLogger("mwms_trainer")
T = TypeVar("T")

RETRY_DELAYS_SECONDS = (1, 2, 4, 8)  # ~15 s of an unreachable server, then exit 75 (the operator retries)

# 4xx answers that a retry cannot change (INVALID_PARAMETER_VALUE, RESOURCE_ALREADY_EXISTS, PERMISSION_DENIED,
# RESOURCE_DOES_NOT_EXIST, UNAUTHENTICATED); these four are timeouts, conflicts and rate limits: retried.
TRANSIENT_CLIENT_STATUSES = frozenset({408, 409, 429, 499})


def is_permanent(error: BaseException) -> bool:
    """Whether MLflow refused the request itself (an MlflowException with a 4xx status), rather than being
    unreachable, slow or failing on its side (connection errors, timeouts, 5xx), which a retry may cure."""
    status_of = getattr(error, "get_http_status_code", None)  # MlflowException, without importing mlflow
    if status_of is None:
        return False
    status = int(status_of())
    return 400 <= status < 500 and status not in TRANSIENT_CLIENT_STATUSES


def came_from_mlflow(error: BaseException) -> bool:
    """Whether an error is MLflow's or the network's (its client's, requests', sockets'), not the model's own
    (a layer that cannot be saved): that one no retry cures, and it stays the user's error (exit 1)."""
    package = type(error).__module__.split(".")[0]
    return package in ("mlflow", "requests", "urllib3") or isinstance(error, ConnectionError | TimeoutError)


def with_retries(
    what: str,
    uri: str,
    call: Callable[[], T],
    delays: tuple[float, ...] = RETRY_DELAYS_SECONDS,
    retried_if: Callable[[BaseException], bool] = lambda error: True,
) -> T:
    """Call, retrying transient failures with backoff; RetryableError (exit 75) once the delays are used up,
    MlflowRefusedError (exit 1) at once when MLflow refuses the request itself. Errors `retried_if` rejects
    propagate as they are."""
    for attempt, delay in enumerate((*delays, None), start=1):
        try:
            return call()
        except Exception as e:
            if not retried_if(e):
                raise
            if is_permanent(e):
                code = getattr(e, "error_code", "")
                raise MlflowRefusedError(f"MLflow at {uri} refused {what} ({code}): {e}") from None
            if delay is None:
                raise RetryableError(
                    f"MLflow at {uri} is unavailable ({what} failed {attempt} times): {type(e).__name__}: {e}"
                ) from None
            log.warning("MLflow %s failed (attempt %d), retrying in %ss: %s", what, attempt, delay, e)
            time.sleep(delay)
    raise AssertionError("unreachable")
