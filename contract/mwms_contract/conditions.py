"""A TrainJob's phases, condition types and the reasons of its conditions and events: what clients, alerts
and the README's troubleshooting table read, so each is one CamelCase word per meaning, listed here once."""

# Phases (status.phase); the condition of the current phase is True, the other phase conditions False.
PENDING, RUNNING, RESTARTING = "Pending", "Running", "Restarting"
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
PHASES = (PENDING, RUNNING, RESTARTING, SUCCEEDED, FAILED, SUSPENDED)
TERMINAL = (SUCCEEDED, FAILED)

# Condition types besides the phase conditions.
CREATED = "Created"  # the Service and every worker of the first group were created
# False while spec.template is invalid: the running group is left alone; the next one needs a valid template.
TEMPLATE_ACCEPTED = "TemplateAccepted"
PHASE_CONDITIONS = (RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)
# True while the operator cannot read the job's progress from its tracking server (reason: why; one event
# each time the reason changes); False again, reason ProgressFlowing, once a read works.
PROGRESS_UNAVAILABLE = "ProgressUnavailable"
# Once the job has ended: True when its MLflow run has ended too (by the chief or the operator); False, naming
# the run, while the operator could not end a run left RUNNING (reason: why, as for ProgressUnavailable).
MLFLOW_RUN_ENDED = "MlflowRunEnded"
# Once a group has ended (success, failure or restart): True when its post-mortem (postmortem/group-K.json:
# the status, each worker's final state, the events) is kept in the job's MLflow run; False saying why not.
POSTMORTEM_KEPT = "PostmortemKept"

# Reasons while the group is made or waited for (Pending, Running).
RESUMED = "Resumed"
PODS_CREATED = "PodsCreated"  # the Created condition's reason and the event that names the pods created
ALL_WORKERS_RUNNING = "AllWorkersRunning"
WORKERS_PENDING = "WorkersPending"
WAITING_FOR_OLD_PODS = "WaitingForOldPods"
TEMPLATE_VALID = "TemplateValid"
# Why creating the workers (or the Service) was refused for now: the Running condition's reason and the event.
CREATE_PODS_REFUSED = "CreatePodsRefused"  # a policy: a ResourceQuota, a LimitRange, a webhook's denial
WEBHOOK_UNAVAILABLE = "WebhookUnavailable"  # a webhook with failurePolicy Fail could not be called
API_SERVER_THROTTLED = "ApiServerThrottled"  # 429: too many requests
API_SERVER_ERROR = "ApiServerError"  # another 5xx
NAME_CONFLICT = "NameConflict"  # a pod or Service of the name the job needs is not the job's
REFUSAL_REASONS = (
    CREATE_PODS_REFUSED,
    WEBHOOK_UNAVAILABLE,
    API_SERVER_THROTTLED,
    API_SERVER_ERROR,
    NAME_CONFLICT,
)
# Reasons of a group restart (Restarting) and of the wait before one.
GROUP_RESTARTING = "GroupRestarting"  # counted against spec.runPolicy.backoffLimit
DISRUPTED = "Disrupted"  # caused by a disrupted pod (eviction, preemption, drain): not counted
RESTART_BACKOFF = "RestartBackoff"  # the Running condition's reason while a counted restart waits
# Reasons of the end (Succeeded, Failed) and after it.
CHIEF_SUCCEEDED = "ChiefSucceeded"
INVALID_SPEC = "InvalidSpec"
WORKER_FAILED = "WorkerFailed"
BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
DEADLINE_EXCEEDED = "DeadlineExceeded"
CONTAINER_ERROR = "ContainerError"
STARTUP_TIMEOUT = "StartupTimeout"
TTL_EXPIRED = "TTLExpired"
# spec.scheduling.gang is Required and the API server does not serve the PodGroup API: no group is made.
GANG_SCHEDULING_UNAVAILABLE = "GangSchedulingUnavailable"
# The reason of the Suspended phase is the phase's name.
# The one event that says why a job's progress is not read.
TRACKING_SERVER_NOT_ALLOWED = "TrackingServerNotAllowed"
# Why the operator could not read from (or write to) the job's tracking server: ProgressUnavailable's and
# MlflowRunEnded's reasons and their events.
TRACKING_UNAUTHORIZED = "TrackingUnauthorized"  # 401: the operator's tracking credentials: missing, wrong
TRACKING_FORBIDDEN = "TrackingForbidden"  # 403: they may not read (or update) the job's experiment
TRACKING_UNREACHABLE = "TrackingUnreachable"  # no answer: DNS, connection refused, a timeout, TLS
TRACKING_SERVER_ERROR = "TrackingServerError"  # 5xx
TRACKING_BAD_REPLY = "TrackingBadReply"  # an answer that is not MLflow's (not JSON, a redirect, another 4xx)
TRACKING_REASONS = (
    TRACKING_UNAUTHORIZED,
    TRACKING_FORBIDDEN,
    TRACKING_UNREACHABLE,
    TRACKING_SERVER_ERROR,
    TRACKING_BAD_REPLY,
)
PROGRESS_FLOWING = "ProgressFlowing"  # ProgressUnavailable is False again: a read worked
RUN_ENDED_BY_CHIEF = "RunEndedByChief"  # MlflowRunEnded: the chief ended the run, as it should
RUN_ENDED_BY_OPERATOR = "RunEndedByOperator"  # the run was left RUNNING: the operator ended it (an event too)
# PostmortemKept (and MlflowRunEnded once a run named while the server was away turns out not to exist): the
# post-mortem is in the run; the job has no run to keep it in (its chief never opened one); the run's
# artifacts are not proxied by the tracking server (`mlflow server --no-serve-artifacts`), which the operator
# writes through.
POSTMORTEM_WRITTEN = "PostmortemWritten"
NO_MLFLOW_RUN = "NoMlflowRun"
ARTIFACTS_NOT_PROXIED = "ArtifactsNotProxied"
# The one event that says the operator may not read a starting pod's events (RBAC: `list` on events).
POD_EVENTS_FORBIDDEN = "PodEventsForbidden"
# The one event that says a starting pod's events lookups keep failing otherwise (5xx, timeouts).
POD_EVENTS_UNREADABLE = "PodEventsUnreadable"
# The operator could not list the job's namespace's pods or Services (RBAC): the job is left alone until the
# operator restarts with that right. One event, and the condition NamespaceUnlisted=True, reason WatchRefused,
# where the operator may write the job's status; False, reason NamespaceListed, once it lists there.
NAMESPACE_UNLISTED = "NamespaceUnlisted"
WATCH_REFUSED = "WatchRefused"
NAMESPACE_LISTED = "NamespaceListed"

# spec.managedBy names another controller: the one event that says the operator leaves the job to it.
MANAGED_ELSEWHERE = "ManagedElsewhere"
# A job MultiKueue is to run has no kueue.x-k8s.io/queue-name label: no Workload is made, so nothing runs it.
NO_QUEUE = "NoQueue"
# The API server refused that job's Workload (Kueue's CRDs missing, its webhook's denial): tried again later.
WORKLOAD_REFUSED = "WorkloadRefused"

REASONS = (
    RESUMED,
    PODS_CREATED,
    ALL_WORKERS_RUNNING,
    WORKERS_PENDING,
    WAITING_FOR_OLD_PODS,
    TEMPLATE_VALID,
    *REFUSAL_REASONS,
    GROUP_RESTARTING,
    DISRUPTED,
    RESTART_BACKOFF,
    SUSPENDED,
    CHIEF_SUCCEEDED,
    INVALID_SPEC,
    WORKER_FAILED,
    BACKOFF_LIMIT_EXCEEDED,
    DEADLINE_EXCEEDED,
    CONTAINER_ERROR,
    STARTUP_TIMEOUT,
    TTL_EXPIRED,
    GANG_SCHEDULING_UNAVAILABLE,
    TRACKING_SERVER_NOT_ALLOWED,
    POD_EVENTS_FORBIDDEN,
    POD_EVENTS_UNREADABLE,
    NAMESPACE_UNLISTED,
    WATCH_REFUSED,
    NAMESPACE_LISTED,
    *TRACKING_REASONS,
    PROGRESS_FLOWING,
    RUN_ENDED_BY_CHIEF,
    RUN_ENDED_BY_OPERATOR,
    MANAGED_ELSEWHERE,
    NO_QUEUE,
    WORKLOAD_REFUSED,
    POSTMORTEM_WRITTEN,
    NO_MLFLOW_RUN,
    ARTIFACTS_NOT_PROXIED,
)
