"""The local Kubernetes control plane for tests and the Docker-free demo.

Test-side infrastructure, not product code: `cluster.LocalCluster` starts real etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (built from the official Go modules by
hack/build/build-control-plane.sh) on loopback plus a bridge for pods; `kubelet_node` runs a real node on it
(kubelet, containerd, kube-proxy, CoreDNS).
"""
