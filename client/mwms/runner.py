"""`MirroredStrategyRunner(cluster=Cluster(...)).run(train)`: spark-tensorflow-distributor's runner whose
`run` sends the function to Kubernetes as a TrainJob and returns the chief's return value.

Local processes and the in-pod path are the trainer's (`from mwms_trainer import MirroredStrategyRunner`,
`pip install 'mwms-operator[trainer]'`); this one needs only the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mwms.kube import Cluster
from mwms.sdk import Client


class MirroredStrategyRunner:
    """spark-tensorflow-distributor's signature (Spark-only arguments are accepted and ignored), plus
    `cluster` (default: the kubeconfig's context and namespace)."""

    def __init__(
        self,
        num_slots: int = 1,
        local_mode: bool = False,
        use_gpu: bool = False,
        gpu_resource_name: str = "gpu",
        use_custom_strategy: bool = False,
        cluster: Cluster | None = None,
    ) -> None:
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive integer, got {num_slots!r}")
        self.num_slots = num_slots
        self.use_custom_strategy = use_custom_strategy
        self.cluster = cluster or Cluster()

    def run(self, train_fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Submit, follow (progress and the chief's log on stderr), and return the chief's return value;
        RuntimeError naming the failure otherwise."""
        client = Client(cluster=self.cluster)
        job = client.submit(
            train_fn, replicas=self.num_slots, kwargs=kwargs, use_custom_strategy=self.use_custom_strategy
        )
        done = client.follow(job.name)
        if not done.succeeded:
            raise RuntimeError(f"TrainJob {client.namespace}/{job.name} failed: {done.message}")
        return client.result(job.name)
