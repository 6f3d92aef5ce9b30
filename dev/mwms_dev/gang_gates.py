"""Native gang scheduling on the local control plane."""

# Native gang scheduling (KEP-4671's PodGroup API): the gate in the API server (the API, the pods'
# spec.schedulingGroup), the scheduler (its GangScheduling plugin) and the controller manager (it lets a
# PodGroup go once its pods have), and the API version the scheduler and controller manager read.
GANG_FLAGS = ("--feature-gates=GenericWorkload=true",)
GANG_API_FLAGS = (*GANG_FLAGS, "--runtime-config=scheduling.k8s.io/v1beta1=true")
