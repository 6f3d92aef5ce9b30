"""`MirroredStrategyRunner(cluster=Cluster(...)).run(train)`: spark-tensorflow-distributor's runner whose
`run` sends the function to Kubernetes as a TrainJob and returns the chief's return value.

Local processes and the in-pod path are the trainer's (`from mwms_trainer import MirroredStrategyRunner`,
`pip install 'mwms-operator[trainer]'`); this one needs only the client.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from mwms.kube import Cluster
from mwms.placement import NVIDIA_GPU
from mwms.sdk import Client, placement_of

# spark-tensorflow-distributor's gpu_resource_name is Spark's resource name ("gpu"); Kubernetes names the
# vendor's extended resource.
SPARK_GPU_NAME = "gpu"
CPU_ONLY_HINT = (
    "requesting {gpus} {resource} per worker (use_gpu=True, spark-tensorflow-distributor's default): on a "
    "cluster without GPUs the job stays Pending (its status says Insufficient {resource}); pass use_gpu=False"
)


class MirroredStrategyRunner:
    """spark-tensorflow-distributor's signature (local_mode is accepted and ignored), plus `cluster` (default:
    the kubeconfig's context and namespace) and Client.submit's placement keywords (cpu, memory, env, labels,
    queue, node_selector, tolerations, deadline, backoff_limit, template, image).

    use_gpu (default True, as spark-tensorflow-distributor's): one GPU per slot (worker) of
    `gpu_resource_name` ("gpu", Spark's name, means nvidia.com/gpu; else a Kubernetes resource name such as
    amd.com/gpu), on the trainer's CUDA image unless `image` is given. CPU-only clusters: use_gpu=False."""

    def __init__(
        self,
        num_slots: int = 1,
        local_mode: bool = False,
        use_gpu: bool = True,
        gpu_resource_name: str = SPARK_GPU_NAME,
        use_custom_strategy: bool = False,
        cluster: Cluster | None = None,
        **placement: Any,
    ) -> None:
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
            raise ValueError(f"num_slots must be a positive integer, got {num_slots!r}")
        self.num_slots = num_slots
        self.use_custom_strategy = use_custom_strategy
        self.cluster = cluster or Cluster()
        if use_gpu:
            placement.setdefault("gpu", 1)
            if gpu_resource_name != SPARK_GPU_NAME:
                placement.setdefault("gpu_resource", gpu_resource_name)
        self.placement = placement
        placement_of(**{k: v for k, v in placement.items() if k != "image"})  # a bad keyword fails here

    def run(self, train_fn: Callable[..., Any], **kwargs: Any) -> Any:
        """Submit, follow (progress and the chief's log on stderr), and return the chief's return value;
        RuntimeError naming the failure otherwise (mwms.jobs.JobSuspended, one, when the job is suspended)."""
        client = Client(cluster=self.cluster)
        if self.placement.get("gpu"):
            resource = self.placement.get("gpu_resource", NVIDIA_GPU)
            print(CPU_ONLY_HINT.format(gpus=self.placement["gpu"], resource=resource), file=sys.stderr)
        job = client.submit(
            train_fn,
            replicas=self.num_slots,
            kwargs=kwargs,
            use_custom_strategy=self.use_custom_strategy,
            **self.placement,
        )
        done = client.follow(job.name)
        if not done.succeeded:
            raise RuntimeError(f"TrainJob {client.namespace}/{job.name} failed: {done.message}")
        return client.result(job.name)
