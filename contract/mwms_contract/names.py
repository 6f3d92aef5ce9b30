"""Names shared by the operator, the trainer, the client, the manifests and the tests; change them here."""

GROUP = "mwms.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainJob"
PLURAL = "trainjobs"

# Labels on every object the operator creates.
LABEL_JOB_NAME = "mwms.dev/job-name"
LABEL_REPLICA_INDEX = "mwms.dev/replica-index"
LABEL_ROLE = "mwms.dev/role"  # "chief" for worker 0, "worker" for the others
LABEL_RESTART = "mwms.dev/restart"  # which (re)start of the group a pod belongs to
# The TrainJob's uid on its pods: a selector with it matches no other job's pods, not even those of a job
# created again under the same name (the operator deletes a job's pods with one request by this selector).
LABEL_JOB_UID = "mwms.dev/job-uid"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "mwms-operator"
# Kueue (plain-pod integration): a TrainJob labelled with a queue gets its workers admitted as one pod group.
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
ANNOTATION_KUEUE_POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
ANNOTATION_KUEUE_RETRIABLE_IN_GROUP = "kueue.x-k8s.io/retriable-in-group"
# Kubernetes' native gang scheduling (KEP-4671, the GenericWorkload gate): one PodGroup per (re)start of a
# group, which the workers name in spec.schedulingGroup.podGroupName; the version 1.37's scheduler reads.
POD_GROUP_API_VERSION = "scheduling.k8s.io/v1beta1"
POD_GROUP_PLURAL = "podgroups"
# spec.scheduling.gang: place the group all or nothing with a native PodGroup (Kubernetes' gang scheduling)
# when the API server serves it (Auto), fail the job where it does not (Required), or never (Off).
GANG_MODES = ("Auto", "Required", "Off")
DEFAULT_GANG = "Auto"
# MultiKueue labels the copy of a job it makes on a worker cluster with the name of the job's Workload there:
# the job is admitted through that Workload, so its workers are no pod group of their own.
LABEL_KUEUE_PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
# spec.managedBy: which controller runs a TrainJob. Absent, this operator, which claims this value (as the
# batch/v1 Job controller claims kubernetes.io/job-controller); any other, that controller, and the operator
# creates nothing for the job and never writes its status. MultiKueue's value is Kueue's own name for it.
CONTROLLER_NAME = "mwms.dev/trainjob-controller"
MULTIKUEUE_CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"
ROLE_CHIEF = "chief"
ROLE_WORKER = "worker"


CONTAINER_NAME = "trainer"  # TF_CONFIG goes into this container only
DEFAULT_PORT = 2222
PORT_NAME = "mwms"
CHECKPOINT_MOUNT_PATH = "/mwms/checkpoint"
CODE_MOUNT_PATH = "/mwms/code"  # spec.code's ConfigMap, read-only
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
# The trainer's rendezvous state (an emptyDir): one line, "joined" once the group has formed, else the last
# reason it has not; the trainer container's readiness probe prints it and fails until it says "joined".
RENDEZVOUS_MOUNT_PATH = "/mwms/rendezvous"
RENDEZVOUS_FILE = RENDEZVOUS_MOUNT_PATH + "/state"
RENDEZVOUS_JOINED = "joined"
# The readiness probe's command that reads that state (shell builtins only: no process per probe but the
# shell); the kubelet's `Unhealthy` event carries what it printed, the last reason a worker has not joined.
RENDEZVOUS_PROBE_COMMAND = (
    "sh",
    "-c",
    f'{{ read -r state < {RENDEZVOUS_FILE}; }} 2>/dev/null || state="the trainer has not'
    f' begun its rendezvous yet"; echo "$state"; [ "$state" = {RENDEZVOUS_JOINED} ]',
)

# spec.checkpoint.store: the job's MLflow run, or an s3:// prefix.
CHECKPOINT_STORE_RUN = "run"
# Where the run store keeps the group's checkpoint among the run's artifacts.
CHECKPOINT_ARTIFACT_DIR = "mwms/checkpoint"

# URI schemes spec.trainer.dataPath may use (other "://" URIs are refused; plain paths are in the worker).
DATA_PATH_SCHEMES = ("s3",)

# Environment the operator injects into the trainer container; user env may not set these.
ENV_TF_CONFIG = "TF_CONFIG"
ENV_JOB_NAME = "MWMS_JOB_NAME"
ENV_JOB_NAMESPACE = "MWMS_JOB_NAMESPACE"
ENV_JOB_UID = "MWMS_JOB_UID"
ENV_RESTART_COUNT = "MWMS_RESTART_COUNT"
ENV_TRAINER_CONFIG = "MWMS_TRAINER_CONFIG"
ENV_CHECKPOINT_DIR = "MWMS_CHECKPOINT_DIR"
# spec.checkpoint.store ("run" or an s3:// prefix: the state is kept there, MWMS_CHECKPOINT_DIR is the chief's
# scratch copy) and spec.checkpoint.everySteps.
ENV_CHECKPOINT_STORE = "MWMS_CHECKPOINT_STORE"
ENV_CHECKPOINT_EVERY_STEPS = "MWMS_CHECKPOINT_EVERY_STEPS"
ENV_STARTUP_TIMEOUT = "MWMS_STARTUP_TIMEOUT_SECONDS"
# How long a started worker waits for its peers to listen; 0: as long as it takes (set in pods, where the
# operator sees why a peer is late: a big image pulling is waited for, a stuck group times out there).
ENV_PEER_WAIT = "MWMS_PEER_WAIT_SECONDS"
ENV_REGISTERED_MODEL_NAME = "MWMS_REGISTERED_MODEL_NAME"
# spec.code: the user's files, what to run in them, and the pip requirements file to install first.
ENV_CODE_DIR = "MWMS_CODE_DIR"
ENV_CODE_ENTRYPOINT = "MWMS_CODE_ENTRYPOINT"
ENV_CODE_ARGS = "MWMS_CODE_ARGS"  # a JSON list of strings
ENV_CODE_REQUIREMENTS = "MWMS_CODE_REQUIREMENTS"
# Where the files come from ("configMap" unless "volume"), so an empty code directory names the right field.
ENV_CODE_SOURCE = "MWMS_CODE_SOURCE"
ENV_TRACKING_URI = "MLFLOW_TRACKING_URI"
ENV_EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"
# Not injected by the operator (pods use terminationMessagePath); local mode and tests point it elsewhere.
ENV_TERMINATION_LOG = "MWMS_TERMINATION_LOG"
# spec.mlflow.systemMetrics.periodSeconds: each worker's CPU, memory, network, disk into the run; 0: off.
ENV_SYSTEM_METRICS_SECONDS = "MWMS_SYSTEM_METRICS_SECONDS"
RESERVED_ENV = frozenset(
    {
        ENV_TF_CONFIG,
        ENV_JOB_NAME,
        ENV_JOB_NAMESPACE,
        ENV_JOB_UID,
        ENV_RESTART_COUNT,
        ENV_TRAINER_CONFIG,
        ENV_CHECKPOINT_DIR,
        ENV_CHECKPOINT_STORE,
        ENV_CHECKPOINT_EVERY_STEPS,
        ENV_STARTUP_TIMEOUT,
        ENV_PEER_WAIT,
        ENV_REGISTERED_MODEL_NAME,
        ENV_TRACKING_URI,
        ENV_EXPERIMENT_NAME,
        ENV_SYSTEM_METRICS_SECONDS,
        ENV_CODE_DIR,
        ENV_CODE_ENTRYPOINT,
        ENV_CODE_ARGS,
        ENV_CODE_REQUIREMENTS,
        ENV_CODE_SOURCE,
    }
)

# Trainer exit codes (the operator's restart policy reads them).
EXIT_SUCCESS = 0
EXIT_FAILURE = 1
EXIT_INVALID_CONFIG = 2  # permanent: a setting is wrong
EXIT_RETRYABLE = 75  # EX_TEMPFAIL: peer lost, startup deadline, MLflow unavailable

# The `mwms` command's exit codes (scripts rely on them): kubectl's, and one of its own for a suspended job.
CLI_EXIT_OK = 0
CLI_EXIT_ERROR = 1  # not found, refused, unreachable; a failed job (`wait`, `submit --follow`); a timeout
CLI_EXIT_USAGE = 2  # a bad command line, or `submit` created nothing
CLI_EXIT_SUSPENDED = (
    3  # the job is Suspended (`wait`, `submit --follow`, `logs -f`): nothing follows till resumed
)
CLI_EXIT_INTERRUPTED = 130  # Ctrl-C

# Images: the operator's default trainer image; `make images` builds both under these names.
OPERATOR_IMAGE = "ghcr.io/mwms-dev/mwms-operator"
TRAINER_IMAGE = "ghcr.io/mwms-dev/mwms-trainer"

# MLflow: the chief tags its run with the TrainJob's uid, so the operator finds it for status.progress.
MLFLOW_TAG_JOB_UID = "mwms.dev/job-uid"
MLFLOW_TAG_JOB_NAME = "mwms.dev/job-name"
MLFLOW_TAG_JOB_NAMESPACE = "mwms.dev/job-namespace"
MLFLOW_TAG_RESTART_COUNT = "mwms.dev/restart-count"  # the group that last wrote the run
MLFLOW_TAG_RESUMED_FROM_EPOCH = "mwms.dev/resumed-from-epoch"  # a restarted group went on from a checkpoint
# The step within that epoch it went on from (0: the epoch's start; more after a save within an epoch).
MLFLOW_TAG_RESUMED_FROM_STEP = "mwms.dev/resumed-from-step"
# How many epochs' metrics MLflow refused or missed (the fit goes on without them): counted in the run, over
# every group of the job, so a gap in the curves is explained where the curves are.
MLFLOW_TAG_DROPPED_METRICS = "mwms.dev/dropped-epoch-metrics"
MLFLOW_TAGS = (
    MLFLOW_TAG_JOB_UID,
    MLFLOW_TAG_JOB_NAME,
    MLFLOW_TAG_JOB_NAMESPACE,
    MLFLOW_TAG_RESTART_COUNT,
    MLFLOW_TAG_RESUMED_FROM_EPOCH,
    MLFLOW_TAG_RESUMED_FROM_STEP,
    MLFLOW_TAG_DROPPED_METRICS,
)
# The run's parameter that holds the epochs in all (the built-in fit logs it): status.progress.epochs.
MLFLOW_PARAM_EPOCHS = "epochs"

# Every worker's log, uploaded when it exits into the job's one MLflow run (`mwms logs` reads it once the pods
# are gone): LOG_ARTIFACT_DIR/group-<restart>/worker-<index>.log: each (re)start of the group keeps its own.
LOG_ARTIFACT_DIR = "logs"
# At most this many bytes of a worker's log are kept: the first eighth and the end, and a LOG_CUT_MARKER line
# where the middle was cut. MWMS_LOG_CAP_BYTES (user env) sets another cap; 0 uploads no log.
LOG_CAP_BYTES = 8 * 1024 * 1024
ENV_LOG_CAP = "MWMS_LOG_CAP_BYTES"
LOG_CUT_MARKER = "[mwms: log cut]"


# Each worker's system metrics in the job's run, as MLflow names a node's: system/worker-<index>/<metric>.
SYSTEM_METRICS_PREFIX = "system/"
DEFAULT_SYSTEM_METRICS_SECONDS = 15
# What `mwms describe` shows each worker's peak of.
SYSTEM_METRICS_PEAKS = ("cpu_usage_cores", "system_memory_peak_megabytes")


def system_metrics_node_id(index: int) -> str:
    return f"worker-{index}"


def log_artifact_path(restart: int, index: int) -> str:
    """Where worker `index` of the group's `restart`-th (re)start keeps its log in the job's run."""
    return f"{LOG_ARTIFACT_DIR}/group-{restart}/worker-{index}.log"


def pod_name(job_name: str, index: int) -> str:
    """Worker `index`'s pod, and its hostname under the job's headless Service (named as the job)."""
    return f"{job_name}-worker-{index}"
