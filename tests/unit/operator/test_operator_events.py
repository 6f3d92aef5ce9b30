"""Events as client-go's recorder posts them: a repeat (same object, type, reason and message within the
window) counts on the Event already posted; many different messages of one reason combine into one."""

from __future__ import annotations

from typing import Any

import kopf

from mwms_operator.kube import client as k8s
from mwms_operator.kube import events

JOB = {"metadata": {"name": "mnist", "namespace": "ns", "uid": "u-1"}}


class Recording(k8s.Kube):
    """The Kube whose requests are recorded and answered: creates name the Event, patches find it (or not)."""

    def __init__(self) -> None:
        super().__init__(lambda: kopf.ConnectionInfo(server="http://127.0.0.1:9"))
        self.sent: list[tuple[str, str, Any]] = []
        self.gone = False

    def _request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        self.sent.append((method, path, body))
        if method == "PATCH" and self.gone:
            raise k8s.ApiError(404, "events not found")
        return {"metadata": {"name": f"mnist.{len(self.sent)}"}}


def test_fifty_repeats_make_one_event_with_a_count():
    kube = Recording()
    for _ in range(50):
        kube.post_event(JOB, "Warning", "CreatePodsRefused", "exceeded quota: q")
    posts = [s for s in kube.sent if s[0] == "POST"]
    patches = [s for s in kube.sent if s[0] == "PATCH"]
    assert len(posts) == 1 and len(patches) == 49
    method, path, body = patches[-1]
    assert path == "/api/v1/namespaces/ns/events/mnist.1"
    assert body["count"] == 50 and body["series"]["count"] == 50 and body["series"]["lastObservedTime"]


def test_another_reason_or_object_is_another_event_and_a_gone_event_is_posted_anew():
    kube = Recording()
    kube.post_event(JOB, "Warning", "CreatePodsRefused", "exceeded quota: q")
    kube.post_event(JOB, "Warning", "WebhookUnavailable", "exceeded quota: q")
    other = {"metadata": {**JOB["metadata"], "uid": "u-2"}}
    kube.post_event(other, "Warning", "CreatePodsRefused", "exceeded quota: q")
    assert [s[0] for s in kube.sent] == ["POST", "POST", "POST"]
    kube.gone = True  # the API server's event TTL removed it
    kube.post_event(JOB, "Warning", "CreatePodsRefused", "exceeded quota: q")
    assert [s[0] for s in kube.sent[3:]] == ["PATCH", "POST"]


def test_a_repeat_after_the_window_is_a_new_event():
    book = events.EventBook()
    key, _, repeat = book.correlate("ns", "u", "Warning", "R", "m", now=0.0)
    assert repeat is None
    book.posted(key, "e1", 1, now=0.0)
    assert book.correlate("ns", "u", "Warning", "R", "m", now=10.0)[2] == events.Posted("e1", 1, 0.0)
    assert book.correlate("ns", "u", "Warning", "R", "m", now=events.WINDOW_SECONDS + 1)[2] is None


def test_many_different_messages_of_one_reason_are_combined():
    book = events.EventBook()
    keys = set()
    for i in range(30):
        key, message, _ = book.correlate("ns", "u", "Warning", "R", f"used {i} of 10", now=float(i))
        keys.add(key)
    assert len(keys) == events.SIMILAR_LIMIT + 1
    assert message == events.COMBINED + "used 29 of 10"


def test_the_events_of_many_jobs_share_one_copy_of_a_message_they_all_say():
    """The book keeps up to CACHE_SIZE events: a message every job says (Suspended, PodsCreated) once."""
    book = events.EventBook()
    keys = [
        book.correlate("ns", f"u-{i}", "Normal", "Suspended", "".join(["suspend is ", "true"]), now=0.0)[0]
        for i in range(2)
    ]
    assert keys[0][4] == keys[1][4] == "suspend is true" and keys[0][4] is keys[1][4]
    assert not hasattr(events.Posted("e1", 1, 0.0), "__dict__")
