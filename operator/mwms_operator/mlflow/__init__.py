"""MLflow, seen from the operator: which tracking servers it may call, their REST API, a job's progress, and
ending a run its chief left open."""
