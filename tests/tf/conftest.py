"""Fixtures of the tf tier: one real `mlflow server` per session (helpers live in tf_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from mwms_kit.mlflow_server import MlflowServer


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


@pytest.fixture
def mlflow_client(mlflow_server: MlflowServer) -> Any:
    import mlflow

    return mlflow.MlflowClient(mlflow_server.url)
