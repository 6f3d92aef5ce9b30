"""The mwms client: TrainJobs from Python (`Client`), the notebook runner's cluster path
(`MirroredStrategyRunner(cluster=...)`) and the `mwms` command (mwms.cli).

    from mwms import Client
    job = Client().submit("train.py", replicas=4)
"""

from __future__ import annotations

from mwms.jobs import Condition, Job, NoResult, Progress, Run
from mwms.kube import Cluster, NotFound, SubmitError
from mwms.runner import MirroredStrategyRunner
from mwms.sdk import Client

__all__ = [
    "Client",
    "Cluster",
    "Condition",
    "Job",
    "MirroredStrategyRunner",
    "NoResult",
    "NotFound",
    "Progress",
    "Run",
    "SubmitError",
]
