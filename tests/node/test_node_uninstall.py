"""`helm uninstall` leaves none of the chart's objects behind (mwms_dev.chain.Chain.uninstall lists what is
left by the release's instance label): deployments, pods, services, service accounts, config maps, roles and
their bindings in its namespace, ClusterRoles and their bindings. The tier's shared `node_chain` must outlive
this test, so it installs a release of its own (the same values, operator image and bundled MLflow), in
namespaced mode on its own `restricted` namespace (a second cluster-wide operator would also act on the other
tests' jobs) and without the CRD, which `node_chain`'s release owns."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytestmark = [pytest.mark.node, pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(1500)]


def test_helm_uninstall_leaves_no_operator_objects(node_kubectl, node_namespace, node_chain):
    node_kubectl.restrict(node_namespace)
    chain = replace(
        node_chain,
        release="mwms-uninstall",
        operator_namespace=node_namespace,
        helm_values=[
            *node_chain.helm_values,
            f"operator.watchNamespaces={{{node_namespace}}}",
            "crds.enabled=false",
        ],
    )
    chain.install_chart()
    chain.uninstall()
