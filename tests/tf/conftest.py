"""Fixtures of the tf tier: one real `mlflow server` per session (helpers live in tf_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tf_support import TEST_SECONDS

from mwms_kit.mlflow_server import MlflowServer
from mwms_kit.tiers import tier_of


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A tf test that names no timeout gets TEST_SECONDS, not the suite's 600 s meant for one step."""
    for item in items:
        if tier_of(item.nodeid) == "tf" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TEST_SECONDS))


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


@pytest.fixture
def mlflow_client(mlflow_server: MlflowServer) -> Any:
    import mlflow

    return mlflow.MlflowClient(mlflow_server.url)
