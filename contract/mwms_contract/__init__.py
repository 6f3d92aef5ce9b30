"""The wire contract shared by the operator, the trainer and the client, which never import each other.

Names (env, labels, annotations, exit codes, MLflow tags, phases), TF_CONFIG and host naming, the TrainJob
spec with the environment each worker gets from it, and the termination-message format. Pure standard
library: every other package of ours imports this one.
"""
