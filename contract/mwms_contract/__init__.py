"""The wire contract shared by the operator, the trainer and the client, which never import each other.

Names (env, labels, annotations, exit codes, MLflow tags, phases), TF_CONFIG and host naming, the TrainJob
spec with the environment each worker gets from it, the TrainJob status (typed: the operator writes it, the
client reads it), and the termination-message format. Pure standard
library: every other package of ours imports this one.
"""
