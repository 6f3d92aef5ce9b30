"""What the API server's errors mean for a job: invalid (Rejected), refused for now (Refused, with the
reason its Running condition and event show; NameTaken), its namespace ending, or another error (ApiError)
that the work queue retries."""

from __future__ import annotations

import http.client
import json

from mwms_contract.conditions import (
    API_SERVER_ERROR,
    API_SERVER_THROTTLED,
    CREATE_PODS_REFUSED,
    NAME_CONFLICT,
    WEBHOOK_UNAVAILABLE,
)


class ApiError(Exception):
    """An answer of the API server other than 2xx: its message and, where its Status has details, the kind
    they name (a 404's `namespaces` is the namespace not found, `pods` the pod)."""

    def __init__(self, status: int, message: str, kind: str = "") -> None:
        super().__init__(f"({status}) {message}")
        self.status, self.message, self.kind = status, message, kind

    @classmethod
    def of(cls, status: int, payload: bytes, reason: str) -> ApiError:
        """From the answer's body: a Status object, else text (a proxy's), else the HTTP reason."""
        try:
            answer = json.loads(payload)
        except ValueError:
            return cls(status, payload.decode(errors="replace").strip()[:1024] or reason)
        answer = answer if isinstance(answer, dict) else {}
        details = answer.get("details")
        kind = details.get("kind") if isinstance(details, dict) else None
        return cls(status, str(answer.get("message") or reason), str(kind or ""))


# What a call may raise that a later try can fix: the API server's errors, timeouts, lost connections.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ApiError, OSError, http.client.HTTPException)


class Rejected(Exception):
    """The object is invalid (400/422 from the API server, or Pod Security): retrying cannot help."""


class NamespaceEnding(Exception):
    """The namespace is being deleted (403), or is gone already (404 naming the namespace) while the watch
    still holds its TrainJobs: the API server creates nothing in it, and its TrainJobs go with it."""


class Refused(Exception):
    """The API server refused to create the object for now: it may be accepted once that changes, so it is
    worth trying again later. `reason` says what refused, for the TrainJob's condition and event: a policy
    (403: a ResourceQuota exceeded, a LimitRange, a validating webhook's denial), a webhook that could not
    be called (500 "failed calling webhook"), throttling (429) or another server error (5xx)."""

    def __init__(self, message: str, reason: str = CREATE_PODS_REFUSED) -> None:
        super().__init__(message)
        self.reason = reason


class NameTaken(Refused):
    """An object of the name the job needs exists and is not the job's (no controller reference to its uid):
    it is left alone, and the create is tried again later (the name may be freed)."""

    def __init__(self, kind: str, name: str, owner: str) -> None:
        super().__init__(
            f"{kind} {name} exists and is not this TrainJob's (owner: {owner}); the operator leaves it "
            "alone: delete or rename it and the job goes on",
            NAME_CONFLICT,
        )


def refusal(error: ApiError) -> Exception:
    """What a create's error means for the job: invalid (Rejected), refused for now (Refused, with the reason
    the job's status shows), or another error for the work queue's retry."""
    message = error.message
    # 400: invalid (an unknown field too); 422: invalid value; 403 from Pod Security admission: the template
    # breaks the namespace's policy.
    if error.status in (400, 422) or (error.status == 403 and "violates PodSecurity" in message):
        return Rejected(message)
    if error.status == 403:  # quota, LimitRange, a validating webhook's denial: the message says which
        return Refused(message, CREATE_PODS_REFUSED)
    if error.status == 500 and "failed calling webhook" in message:  # failurePolicy Fail, server down
        return Refused(message, WEBHOOK_UNAVAILABLE)
    if error.status == 429:
        return Refused(message, API_SERVER_THROTTLED)
    if error.status >= 500:
        return Refused(message, API_SERVER_ERROR)
    return error


def worst(errors: list[BaseException]) -> BaseException:
    """The error that says most about a failed batch: a namespace being deleted beats invalid beats
    refused-for-now beats the rest."""
    for kind in (NamespaceEnding, Rejected, Refused):
        for error in errors:
            if isinstance(error, kind):
                return error
    return errors[0]
