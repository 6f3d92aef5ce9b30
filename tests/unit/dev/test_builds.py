"""How tests and benches see a hack/build script that fails (its path on success: every tier that builds)."""

from __future__ import annotations

import pytest

from mwms_dev.builds import BuildError, built


def test_a_failed_build_names_its_script_and_what_it_said():
    with pytest.raises(BuildError, match=r"hack/build/no-such-script.sh --flag failed \(exit 127\)"):
        built("no-such-script.sh", "--flag")


def test_a_failed_build_a_person_watched_points_at_its_output():
    with pytest.raises(BuildError, match=r"no-such-script.sh failed \(exit 127\):\nits output is above"):
        built("no-such-script.sh", progress=True)
