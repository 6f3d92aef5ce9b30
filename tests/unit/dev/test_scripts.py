"""load_script (mwms_dev.scripts): a file in no package loaded by path runs once however many load it, and
one that fails to run is not left behind as a module."""

import sys

import pytest

from mwms_dev.scripts import load_script


@pytest.fixture
def names():
    """Module names a test registers, taken out of sys.modules afterwards."""
    registered: list[str] = []
    yield registered
    for name in registered:
        sys.modules.pop(name, None)


def test_a_script_loaded_twice_runs_once_and_is_the_same_module(tmp_path, names):
    runs = tmp_path / "runs"
    script = tmp_path / "counted.py"
    script.write_text(f"open({str(runs)!r}, 'a').write('ran\\n')\nclass Shared: ...\n")
    names.append("mwms_test_counted")

    first = load_script("mwms_test_counted", script)
    second = load_script("mwms_test_counted", script)

    assert runs.read_text() == "ran\n"
    assert second is first is sys.modules["mwms_test_counted"]
    assert second.Shared is first.Shared


def test_a_script_that_fails_is_not_left_as_a_module(tmp_path, names):
    (tmp_path / "broken.py").write_text("raise RuntimeError('broken on purpose')\n")
    names.append("mwms_test_broken")

    with pytest.raises(RuntimeError, match="broken on purpose"):
        load_script("mwms_test_broken", tmp_path / "broken.py")

    assert "mwms_test_broken" not in sys.modules
