"""MLflow's own credential variables as the Authorization header its client sends: the trainer's supervisor
and the `mwms` client both call the tracking server without MLflow's library."""

from __future__ import annotations

import base64
from collections.abc import Mapping


def tracking_headers(environ: Mapping[str, str]) -> dict[str, str]:
    """MLFLOW_TRACKING_TOKEN as a bearer token, else MLFLOW_TRACKING_USERNAME/_PASSWORD as basic auth."""
    if environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {environ['MLFLOW_TRACKING_TOKEN']}"}
    user, password = environ.get("MLFLOW_TRACKING_USERNAME"), environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}
