"""The termination message (mwms_contract.termination): what the trainer writes is what the operator reads."""

import json

import pytest

from mwms_contract import names, termination

KUBELET_MAX_BYTES = 4096  # the kubelet reports the last 4 KiB of terminationMessagePath


def termination_message(data: bytes) -> str:
    """The file at terminationMessagePath as the API server shows it: its last 4 KiB, bytes that are not
    UTF-8 replaced (Go's JSON encoding of the kubelet's string)."""
    return data[-KUBELET_MAX_BYTES:].decode("utf-8", errors="replace")


CHIEF = {
    "runId": "r1",
    "experimentId": "7",
    "modelUri": "models:/m-1",
    "metrics": {"val_accuracy": 0.96},
    "result": {"loss": 0.5},
}


def as_reported(message):
    """A message written by the trainer and read back from the pod's status."""
    return termination_message(termination.encode(message).encode())


def test_the_chiefs_summary_comes_back_whole():
    text = as_reported(CHIEF)
    assert json.loads(text) == CHIEF and "\n" not in text
    assert termination.summary(text) == CHIEF
    assert termination.run(text) == {"runId": "r1", "experimentId": "7", "modelUri": "models:/m-1"}


def test_the_keys_are_the_wire_names():
    assert (termination.RUN_ID, termination.EXPERIMENT_ID, termination.MODEL_URI) == termination.RUN_KEYS
    assert termination.RUN_KEYS == ("runId", "experimentId", "modelUri")
    assert (termination.METRICS, termination.RESULT) == ("metrics", "result")
    assert (termination.RESULT_ARTIFACT, termination.RESULT_BYTES) == ("resultArtifact", "resultBytes")


@pytest.mark.parametrize(
    "message",
    [
        "{}",  # a worker other than the chief
        "",
        "failed: ValueError: boom",
        '{"runId": 3}',  # not a run id
        '["runId"]',
        '{"runId": "r1", "metr',  # cut
    ],
)
def test_a_message_that_names_no_run_gives_none(message):
    assert termination.run(message) is None


def test_run_fields_the_chief_left_out_are_left_out():
    assert termination.run('{"runId":"r1","modelUri":null}') == {"runId": "r1"}


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (names.EXIT_INVALID_CONFIG, "invalid configuration"),
        (names.EXIT_RETRYABLE, "retryable"),
        (143, "retryable"),
        (names.EXIT_FAILURE, "failed"),
        (3, "failed"),
    ],
)
def test_the_kind_follows_the_exit_code_as_the_operator_reads_it(code, kind):
    assert termination.failure_kind(code) == kind


def test_a_failure_is_one_line_that_parses_back():
    what = "spec.code.configMap: the\ncode   directory is empty"
    line = termination.failure(termination.INVALID_CONFIG, what)
    assert line == "invalid configuration: spec.code.configMap: the code directory is empty"
    assert termination.parse_failure(as_reported(line)) == (
        "invalid configuration",
        "spec.code.configMap: the code directory is empty",
    )


def test_a_failure_of_no_known_kind_is_refused_when_written_and_not_parsed():
    with pytest.raises(ValueError, match="kind is one of"):
        termination.failure("oops", "x")
    assert termination.parse_failure("oops: x") is None
    assert termination.parse_failure(json.dumps(CHIEF)) is None


def test_a_long_message_keeps_its_start_within_what_the_kubelet_keeps():
    line = termination.failure(termination.FAILED, "é" * 5000)  # 2 bytes each: the cut falls inside one
    reported = as_reported(line)
    assert len(reported.encode()) <= termination.MAX_BYTES
    assert reported.startswith("failed: éé") and "\ufffd" not in reported
    assert termination.parse_failure(reported) is not None


def test_write_leaves_the_encoded_message_and_is_never_fatal(tmp_path):
    path = tmp_path / "termination-log"
    termination.write(str(path), CHIEF)
    assert termination.summary(termination_message(path.read_bytes())) == CHIEF
    termination.write(str(path), termination.failure(termination.FAILED, "é" * 5000))
    assert len(path.read_bytes()) <= termination.MAX_BYTES  # replaced, and cut as encode cuts it
    termination.write(str(tmp_path / "no-such-dir" / "log"), {})  # a worker still ends with its exit code
    assert not (tmp_path / "no-such-dir").exists()
