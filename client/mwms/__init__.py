"""The mwms client: TrainJobs from Python (`Client`), the notebook runner's cluster path
(`MirroredStrategyRunner(cluster=...)`), a Kubeflow TFJob as a TrainJob (`convert_tfjob`) and the `mwms`
command (mwms.cli).

    from mwms import Client
    job = Client().submit("train.py", replicas=4)
"""

from __future__ import annotations

from mwms.conversion import Conversion, ConvertError, Remark
from mwms.jobs import Condition, Job, JobSuspended, NoResult, Progress, Run
from mwms.kube import Cluster, NotFound, SubmitError
from mwms.runner import MirroredStrategyRunner
from mwms.sdk import Client
from mwms.tfjob import convert_tfjob

__all__ = [
    "Client",
    "Cluster",
    "Condition",
    "Conversion",
    "ConvertError",
    "Job",
    "JobSuspended",
    "MirroredStrategyRunner",
    "NoResult",
    "NotFound",
    "Progress",
    "Remark",
    "Run",
    "SubmitError",
    "convert_tfjob",
]
