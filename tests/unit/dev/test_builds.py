"""How tests and benches see a hack/build script that fails (its path on success: every tier that builds)."""

from __future__ import annotations

import pytest

from mwms_dev.builds import BuildError, built


def test_a_failed_build_names_its_script_and_what_it_said():
    with pytest.raises(BuildError, match=r"hack/build/no-such-script.sh --flag failed \(exit 127\)"):
        built("no-such-script.sh", "--flag")
