"""mwms submit's pure parts: packing (size limit, nested files, text only), the objects it creates, the
Python version check, and what --follow shows and how it ends."""

import io
import json

import pytest

from mwms import cli, follow, jobs, submit
from mwms.kube import SubmitError
from mwms_kit.fake_job_client import FakeJobClient


def test_a_script_alone_is_one_key_named_like_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code = submit.pack(script)
    assert code.files == {"train.py": "print('hi')\n"} and code.items == [] and code.entrypoint == "train.py"


def test_a_working_dir_keeps_its_layout_through_items(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "model.py").write_text("X = 1\n")
    (tmp_path / "train.py").write_text("import pkg.model\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "junk.pyc").write_bytes(b"\0\1")
    (tmp_path / "req.txt").write_text("tqdm\n")
    code = submit.pack(tmp_path / "train.py", tmp_path, requirements=tmp_path / "req.txt")
    assert dict((path, code.files[key]) for key, path in code.items) == {
        "pkg/model.py": "X = 1\n",
        "req.txt": "tqdm\n",
        "train.py": "import pkg.model\n",
        "requirements.txt": "tqdm\n",
    }
    assert code.requirements == "requirements.txt"
    assert all(
        set(key) <= set("-._abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        for key in code.files
    )


def working_dir(root):
    """A project as users have them: code, secrets, data and ignore files (nested ones too)."""
    files = {
        "train.py": "import pkg.model\n",
        "pkg/model.py": "X = 1\n",
        ".gitignore": "data/\n*.log\n!keep.log\n",
        ".mwmsignore": "notes.txt\n!.env.example\n",
        ".env": "TOKEN=SECRET-1\n",
        ".env.example": "TOKEN=\n",
        "id_rsa": "SECRET-2\n",
        "id_rsa.pub": "ssh-rsa AAAA\n",
        "server.key": "SECRET-3\n",
        "cert.pem": "SECRET-4\n",
        ".kube/config": "token: SECRET-5\n",
        ".aws/credentials": "aws_secret_access_key = SECRET-6\n",
        ".git/config": "[core]\n",
        "data/big.csv": "1,2\n",
        "run.log": "log\n",
        "keep.log": "kept\n",
        "notes.txt": "todo\n",
        "sub/.gitignore": "local.py\n",
        "sub/local.py": "SECRET = 'SECRET-7'\n",
        "sub/ok.py": "OK = 1\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "train.py"


def test_a_working_dir_leaves_out_secrets_and_what_its_ignore_files_name(tmp_path):
    code = submit.pack(working_dir(tmp_path), tmp_path)
    packed = {path: code.files[key] for key, path in code.items}
    assert sorted(packed) == [
        ".env.example",  # taken back by .mwmsignore's !.env.example
        ".gitignore",
        ".mwmsignore",
        "keep.log",  # taken back by .gitignore's !keep.log
        "pkg/model.py",
        "sub/.gitignore",
        "sub/ok.py",
        "train.py",
    ]
    assert "SECRET" not in "".join(packed.values())
    assert code.left_out == [
        ".aws/", ".env", ".git/", ".kube/", "cert.pem", "data/", "id_rsa", "id_rsa.pub", "notes.txt",
        "run.log", "server.key", "sub/local.py",
    ]  # fmt: skip


def test_dry_run_lists_the_files_their_size_and_what_is_left_out_without_a_cluster(tmp_path, capsys):
    script = working_dir(tmp_path / "project")
    nowhere = str(tmp_path / "no-such-kubeconfig")  # any cluster call would fail on it
    args = ["submit", str(script), "--working-dir", str(script.parent), "--kubeconfig", nowhere, "--dry-run"]
    out = io.StringIO()
    assert cli.main(args, out=out) == 0
    assert out.getvalue().splitlines() == [
        "         7 B  .env.example",
        "        22 B  .gitignore",
        "        24 B  .mwmsignore",
        "         5 B  keep.log",
        "         6 B  pkg/model.py",
        "         9 B  sub/.gitignore",
        "         7 B  sub/ok.py",
        "        17 B  train.py",
        "8 files, 184 of the 1,032,192 bytes a ConfigMap holds",  # 97 B of text, 87 B of keys
        "left out: .aws/, .env, .git/, .kube/, cert.pem, data/, id_rsa, id_rsa.pub, notes.txt, run.log, "
        "server.key, sub/local.py",
    ]


def test_above_the_configmap_limit_it_refuses_naming_the_biggest_file(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    (tmp_path / "data.csv").write_text("1,2\n" * 300_000)
    with pytest.raises(SubmitError, match=r"above the 1\.0 MB a ConfigMap can hold \(largest: data\.csv"):
        submit.pack(tmp_path / "train.py", tmp_path)


def test_a_function_and_its_module_are_refused_when_together_above_the_limit(tmp_path, monkeypatch):
    """Each below the limit, the two above it: the ConfigMap holds them together."""
    (tmp_path / "bigmodule.py").write_text(
        "# " + "x" * 400_000 + "\ndef train(blob):\n    return len(blob)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import bigmodule

    with pytest.raises(SubmitError, match=r"the code is 1\.\d MB, above .*largest: function\.pkl\.b64"):
        submit.pack_function(bigmodule.train, {"blob": "y" * 500_000}, use_custom_strategy=False)


def test_binary_files_are_refused_by_name(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    (tmp_path / "weights.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SubmitError, match="weights.bin is not a UTF-8 text file"):
        submit.pack(tmp_path / "train.py", tmp_path)


def test_the_script_must_be_inside_the_working_dir(tmp_path):
    (tmp_path / "a").mkdir()
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    with pytest.raises(SubmitError, match="not inside the working directory"):
        submit.pack(script, tmp_path / "a")


def test_the_trainjob_names_its_configmap_and_entrypoint(tmp_path):
    (tmp_path / "train.py").write_text("pass\n")
    code = submit.pack(tmp_path / "train.py")
    job = submit.trainjob("train-abcde", code, replicas=2, args=["--epochs", "3"], experiment="e")
    assert job["spec"] == {
        "replicas": 2,
        "code": {"configMap": "train-abcde-code", "entrypoint": "train.py", "args": ["--epochs", "3"]},
        "mlflow": {"experiment": "e"},
    }
    assert submit.code_configmap("train-abcde", code)["metadata"]["name"] == "train-abcde-code"


def test_job_names_are_valid_and_fresh():
    names = {submit.job_name("My_Train Script.py") for _ in range(20)}
    assert len(names) == 20
    for name in names:
        assert name.startswith("my-train-script-") and len(name) <= 46


def test_a_different_python_minor_version_is_refused():
    with pytest.raises(SubmitError, match=r"trainer image runs 3\.99"):
        submit.check_python((3, 99))


def chief_pod(message):
    return {
        "status": {"container_statuses": [{"name": "trainer", "state": {"terminated": {"message": message}}}]}
    }


def test_the_report_carries_the_run_and_the_chiefs_result():
    job = jobs.job_from(
        {"status": {"phase": "Succeeded", "mlflow": {"runId": "r1", "modelUri": "models:/m-1"}}}
    )
    summary = jobs.chief_summary(chief_pod(json.dumps({"runId": "r1", "result": {"loss": 0.5}})))
    out = io.StringIO()
    assert cli.report(job, summary, out) == 0
    assert out.getvalue() == 'Succeeded. MLflow run ID: r1\nModel URI: models:/m-1\nResult: {"loss": 0.5}\n'


def test_a_result_stored_in_mlflow_is_named_not_printed_whole():
    """Above a few KB the chief's message names an artifact of its run (Client().result reads it at this
    machine's MLFLOW_TRACKING_URI, else at the chief's)."""
    job = jobs.job_from(
        {"status": {"phase": "Succeeded", "mlflow": {"runId": "r1", "modelUri": "models:/m-1"}}}
    )
    message = {"runId": "r1", "resultArtifact": "runs:/r1/mwms/result.json", "resultBytes": 102400}
    pod = chief_pod(json.dumps(message))
    pod["spec"] = {
        "containers": [{"name": "trainer", "env": [{"name": "MLFLOW_TRACKING_URI", "value": "http://m"}]}]
    }
    assert jobs.chief_tracking_uri(pod) == "http://m"
    out = io.StringIO()
    assert cli.report(job, jobs.chief_summary(pod), out) == 0
    assert out.getvalue().endswith("Result: 102400 bytes of JSON, in MLflow at runs:/r1/mwms/result.json\n")


def test_a_failed_job_exits_1_with_its_condition_message():
    job = {"status": {"phase": "Failed", "conditions": [{"type": "Failed", "message": "worker x exited 1"}]}}
    out = io.StringIO()
    assert cli.report(jobs.job_from(job), {}, out) == 1
    assert out.getvalue() == "Failed: worker x exited 1\n"


def test_progress_is_a_bar_on_a_terminal_and_a_line_otherwise():
    progress = {"epoch": 3, "epochs": 6, "metrics": {"loss": 0.25}}
    assert follow.progress_line(progress, tty=True) == "epoch 3/6 [##########..........] loss=0.2500"
    assert follow.progress_line(progress, tty=False) == "epoch 3/6 loss=0.2500"


def test_arguments_after_double_dash_go_to_the_script():
    own, script = cli.split_script_args(["submit", "train.py", "-f", "--", "--epochs", "3", "--follow"])
    assert (own, script) == (["submit", "train.py", "-f"], ["--epochs", "3", "--follow"])
    assert cli.split_script_args(["submit", "train.py"]) == (["submit", "train.py"], [])


def scripted(states: list[dict], log_lines: list[str], chief: dict | None = None) -> FakeJobClient:
    """The job's states in order (the last one stays), the chief's log and pod."""
    left = list(states)
    return FakeJobClient(
        job=lambda: left.pop(0) if len(left) > 1 else left[0],
        pods=lambda name: chief,
        logs=lambda name: log_lines,
    )


def states():
    running = {"status": {"phase": "Running", "restarts": 0}}
    epoch = {"status": {"phase": "Running", "restarts": 0, "progress": {"epoch": 1, "epochs": 2}}}
    done = {
        "status": {
            "phase": "Succeeded",
            "restarts": 0,
            "progress": {"epoch": 2, "epochs": 2},
            "mlflow": {"runId": "r1", "modelUri": "models:/m-1"},
        }
    }
    return [{"status": {"phase": "Pending"}}, running, epoch, done]


def test_follow_prints_phases_progress_lines_and_the_chiefs_log_off_a_terminal():
    out = io.StringIO()
    client = scripted(states(), ["hello from the chief"], chief_pod('{"result": 7}'))
    result = follow.Follower(client, "j", out, tty=False, poll=0).follow()
    assert (result.phase, result.mlflow.run_id, result.progress.epoch) == ("Succeeded", "r1", 2)
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["j: Pending", "j: Running"]
    assert "[worker-0] hello from the chief" in lines
    assert "epoch 1/2" in lines and "epoch 2/2" in lines and "j: Succeeded" in lines
    assert "\r" not in out.getvalue()


def test_follow_draws_a_bar_on_a_terminal():
    out = io.StringIO()
    follow.Follower(scripted(states(), []), "j", out, tty=True, poll=0).follow()
    assert "\r\033[Kepoch 1/2 [##########..........]" in out.getvalue()
    assert "\r\033[Kepoch 2/2 [####################]" in out.getvalue()


def test_ctrl_c_with_detach_never_deletes_the_job(capsys):
    client = scripted(states(), [])
    out = io.StringIO()
    assert cli.interrupted(client, "j", detach=True, out=out) == 130
    assert client.named("delete_trainjob") == [] and "trainjob/j keeps running" in out.getvalue()
