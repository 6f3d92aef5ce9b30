"""spec.code on the trainer side, without TensorFlow: finding the entrypoint (errors name the field) and the
last traceback line a failed job shows."""

import pytest

from mwms_trainer import usercode
from mwms_trainer.errors import ConfigError


def test_an_empty_code_dir_names_the_configmap(tmp_path):
    with pytest.raises(ConfigError, match="spec.code.configMap: .* the ConfigMap does not exist"):
        usercode.load_entrypoint(tmp_path, "train.py", [])


def test_a_missing_script_names_the_entrypoint(tmp_path):
    (tmp_path / "other.py").write_text("")
    with pytest.raises(ConfigError, match=r"spec.code.entrypoint: no script 'train.py' .*other.py"):
        usercode.load_entrypoint(tmp_path, "train.py", [])


def test_a_missing_function_names_the_entrypoint(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "mwms_test_mod_a.py").write_text("def other(): pass\n")
    with pytest.raises(
        ConfigError, match="spec.code.entrypoint: module 'mwms_test_mod_a' has no function 'train'"
    ):
        usercode.load_entrypoint(tmp_path, "mwms_test_mod_a:train", [])


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
