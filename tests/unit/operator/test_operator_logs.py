"""Logs: text by default; `--log-format json` or MWMS_LOG_FORMAT=json gives one JSON object a line, with the
job's `namespace` and `name` on every line about it (a work queue's key, or kopf's per-object logger)."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Iterator

import pytest

from mwms_operator import __main__ as entry
from mwms_operator.kube import refusals
from mwms_operator.kube.workqueue import WorkQueue
from mwms_operator.observe.state import JobKey
from mwms_operator.settings import ConfigError, OperatorConfig
from mwms_operator.telemetry import log_format


def line(record: logging.LogRecord) -> dict[str, object]:
    return json.loads(log_format.JsonFormatter().format(record))


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("mwms_operator.reconciler", logging.INFO, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    return made


def test_text_is_the_default_and_json_is_a_setting():
    assert OperatorConfig.from_env({}).log_format == "text"
    assert OperatorConfig.from_env({"MWMS_LOG_FORMAT": "JSON"}).log_format == "json"
    with pytest.raises(ConfigError, match="MWMS_LOG_FORMAT"):
        OperatorConfig.from_env({"MWMS_LOG_FORMAT": "logfmt"})


def test_a_line_about_a_job_names_it_and_others_do_not():
    with log_format.about(JobKey("team-a", "mnist", "u-1")):
        about = line(record("creation refused"))
    assert (about["namespace"], about["name"], about["message"]) == ("team-a", "mnist", "creation refused")
    assert about["level"] == "INFO" and about["logger"] == "mwms_operator.reconciler" and about["time"]
    assert "namespace" not in line(record("mwms-operator starting"))
    kopfs = line(record("Handler 'trainjob' failed", k8s_ref={"namespace": "team-b", "name": "cifar"}))
    assert (kopfs["namespace"], kopfs["name"]) == ("team-b", "cifar")


class Lines(logging.Handler):
    """Formats each record as it is emitted, as the operator's stderr handler does."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(log_format.JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


def test_every_line_a_work_queue_worker_logs_names_its_job_also_from_threads():
    seen = Lines()
    logger = logging.getLogger("mwms_operator")
    logger.addHandler(seen)
    logger.setLevel(logging.INFO)

    async def main() -> None:
        async def handle(key: JobKey) -> None:
            logging.getLogger("mwms_operator.reconciler").info("reconciling")
            await asyncio.to_thread(logging.getLogger("mwms_operator.kube.client").info, "an API call")
            raise refusals.ApiError(500, "etcd")  # the queue's own retry line is about the job too

        queue: WorkQueue[JobKey] = WorkQueue(
            handle, workers=1, name="logs-test", expected=(refusals.ApiError,)
        )
        queue.add(JobKey("team-a", "mnist", "u-1"))
        queue.start()
        while not any("again in" in str(x["message"]) for x in seen.lines):
            await asyncio.sleep(0.01)
        await queue.stop()

    try:
        asyncio.run(asyncio.wait_for(main(), 10))
    finally:
        logger.removeHandler(seen)
        logger.setLevel(logging.NOTSET)
    assert len(seen.lines) == 3
    assert {(x["namespace"], x["name"]) for x in seen.lines} == {("team-a", "mnist")}


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


FORMATS = [([], {}, False), (["--log-format", "json"], {}, True), ([], {"MWMS_LOG_FORMAT": "json"}, True)]


@pytest.mark.parametrize(("argv", "env", "json_lines"), FORMATS)
def test_the_operator_logs_in_the_format_asked_for(argv, env, json_lines, monkeypatch, capsys, root_logging):
    import kopf

    class Started(Exception):
        pass

    def run(**kwargs: object) -> None:
        raise Started

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["mwms_operator", *argv])
    monkeypatch.setattr(kopf, "run", run)
    with pytest.raises(Started):
        entry.main()
    (starting,) = [x for x in capsys.readouterr().err.splitlines() if "mwms-operator starting" in x]
    if json_lines:
        assert json.loads(starting)["message"].startswith("mwms-operator starting")
    else:
        assert " INFO mwms_operator: mwms-operator starting" in starting
