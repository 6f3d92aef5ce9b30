"""The operator's Prometheus metrics as served: by namespace, with succeeded/failed counters counted once."""

from prometheus_client import REGISTRY, generate_latest

from mwms_operator import metrics


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_jobs_are_counted_by_namespace_and_phase_and_vanish_with_their_namespace():
    book = metrics.PhaseBook()
    book.set("u1", "Running", "team-a")
    book.set("u2", "Running", "team-a")
    book.set("u3", "Pending", "team-b")
    assert sample("mwms_trainjobs", namespace="team-a", phase="Running") == 2
    assert sample("mwms_trainjobs", namespace="team-a", phase="Pending") == 0
    assert sample("mwms_trainjobs", namespace="team-b", phase="Pending") == 1
    book.set("u2", "Succeeded", "team-a")
    assert sample("mwms_trainjobs", namespace="team-a", phase="Running") == 1
    book.forget("u3")
    assert sample("mwms_trainjobs", namespace="team-b", phase="Pending") is None
    assert 'mwms_trainjobs{namespace="team-a",phase="Succeeded"} 1.0' in generate_latest().decode()


def test_outcomes_and_restarts_are_counted_on_the_write_that_changed_them():
    def value(name: str) -> float:
        return sample(name, namespace="team-c") or 0.0

    before = {n: value(n) for n in ("mwms_trainjobs_succeeded_total", "mwms_trainjobs_failed_total",
                                    "mwms_trainjob_group_restarts_total")}  # fmt: skip
    metrics.count_transitions(
        "team-c", {"phase": "Running", "restarts": 0}, {"phase": "Restarting", "restarts": 1}
    )
    metrics.count_transitions("team-c", {"phase": "Running"}, {"phase": "Succeeded"})
    metrics.count_transitions("team-c", {"phase": "Succeeded"}, {"phase": "Succeeded"})  # a rewrite: no count
    metrics.count_transitions("team-c", {"phase": "Pending"}, {"phase": "Failed"})
    assert value("mwms_trainjobs_succeeded_total") - before["mwms_trainjobs_succeeded_total"] == 1
    assert value("mwms_trainjobs_failed_total") - before["mwms_trainjobs_failed_total"] == 1
    assert value("mwms_trainjob_group_restarts_total") - before["mwms_trainjob_group_restarts_total"] == 1
