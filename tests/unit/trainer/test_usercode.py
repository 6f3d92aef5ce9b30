"""spec.code on the trainer side, without TensorFlow: finding the entrypoint (errors name the field) and the
last traceback line a failed job shows."""

import pytest

from mwms_trainer import usercode
from mwms_trainer.errors import ConfigError


def test_an_empty_code_dir_names_the_configmap(tmp_path):
    with pytest.raises(ConfigError, match="spec.code.configMap: .* the ConfigMap does not exist"):
        usercode.load_entrypoint(tmp_path, "train.py", [])


def test_an_empty_code_volume_names_the_volume(tmp_path):
    with pytest.raises(ConfigError, match="spec.code.volume: .* the volume holds no files"):
        usercode.load_entrypoint(tmp_path, "train.py", [], source="volume")


def test_a_missing_script_names_the_entrypoint(tmp_path):
    (tmp_path / "other.py").write_text("")
    with pytest.raises(ConfigError, match=r"spec.code.entrypoint: no script 'train.py' .*other.py"):
        usercode.load_entrypoint(tmp_path, "train.py", [])


def test_a_missing_function_names_the_entrypoint(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mwms_test_mod_a.py").write_text("def other(): pass\n")
    run = usercode.load_entrypoint(tmp_path, "mwms_test_mod_a:train", [])
    with pytest.raises(
        ConfigError, match="spec.code.entrypoint: module 'mwms_test_mod_a' has no function 'train'"
    ):
        run()


def test_a_module_is_imported_when_its_function_runs_not_before(tmp_path, monkeypatch):
    """Its top-level code may create the strategy: that needs the peers, the backstop, retryable peer loss."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mwms_test_mod_c.py").write_text(
        "import sys\nsys.mwms_test_imported = True\ndef train(): pass\n"
    )
    monkeypatch.setattr("sys.mwms_test_imported", False, raising=False)
    run = usercode.load_entrypoint(tmp_path, "mwms_test_mod_c:train", [])
    assert __import__("sys").mwms_test_imported is False
    run()
    assert __import__("sys").mwms_test_imported is True


def test_a_module_function_is_found_in_the_code_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mwms_test_mod_b.py").write_text("def train():\n    return 42\n")
    assert usercode.load_entrypoint(tmp_path, "mwms_test_mod_b:train", [])() == 42


def test_the_last_traceback_line_says_where_in_the_users_files(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("x = 1\n\ndef f():\n    return 1 / 0\n\nf()\n")
    try:
        exec(compile(script.read_text(), str(script), "exec"), {})
    except ZeroDivisionError as e:
        line = usercode.last_traceback_line(e, tmp_path)
    assert line == "ZeroDivisionError: division by zero (train.py, line 4)"


def test_a_syntax_error_names_file_and_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def train(:\n    pass\n")
    with pytest.raises(SyntaxError) as error:
        compile(script.read_text(), str(script), "exec")
    assert usercode.last_traceback_line(error.value, tmp_path).endswith("(train.py, line 1)")
    assert usercode.last_traceback_line(error.value, tmp_path).startswith("SyntaxError: ")


def write_wheel(directory, name="mwms_demo_extra", version="1.0"):
    """A pure-Python wheel made by hand (a zip with the dist-info pip needs): no index, no build backend."""
    import zipfile

    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": "ANSWER = 42\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{m},,\n" for m in files) + f"{info}/RECORD,,\n")
    return path


def test_requirements_are_installed_and_importable(tmp_path, monkeypatch):
    code, checkpoint = tmp_path / "code", tmp_path / "checkpoint"
    code.mkdir()
    checkpoint.mkdir()
    wheel = write_wheel(code)
    (code / "requirements.txt").write_text(f"--no-index\n./{wheel.name}\n")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    usercode.install_requirements(code, "requirements.txt", {"MWMS_CHECKPOINT_DIR": str(checkpoint)})
    import importlib

    assert importlib.import_module("mwms_demo_extra").ANSWER == 42
    assert (tmp_path / "tmp" / "mwms-packages" / "mwms_demo_extra.py").is_file()  # not into the image's venv


def test_failed_requirements_name_the_field(tmp_path, monkeypatch):
    (tmp_path / "requirements.txt").write_text("--no-index\n./not-there-1.0-py3-none-any.whl\n")
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    with pytest.raises(ConfigError, match="spec.code.requirements: pip install -r requirements.txt failed"):
        usercode.install_requirements(tmp_path, "requirements.txt", {})
