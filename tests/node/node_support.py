"""What the node tier's tests share: small busybox pods under Pod Security `restricted`, a Service to
them, and commands run in them through the API server and the kubelet."""

from __future__ import annotations

# A pod's and a container's security context that Pod Security `restricted` admits.
RESTRICTED = {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
NO_PRIVILEGES = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def web_pod(
    name: str,
    image: str,
    *,
    labels: dict | None = None,
    hostname: str = "",
    subdomain: str = "",
    page: str = "",
) -> dict:
    """busybox: print a line, serve `page` on :8080 as user 65532; Ready once the port answers."""
    spec: dict = {
        "terminationGracePeriodSeconds": 1,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "web",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": [
                    "sh",
                    "-c",
                    f"echo hello-from-{name}; mkdir -p /tmp/www; echo '{page}' > /tmp/www/index.html; "
                    "exec httpd -f -p 8080 -h /tmp/www",
                ],
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if hostname:
        spec.update(hostname=hostname, subdomain=subdomain)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": spec,
    }


def web_service(name: str, app: str) -> dict:
    """A ClusterIP Service: port 80 to the web_pod's 8080 of the pods labelled app=`app`."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": app}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def wait_ready(kubectl, namespace: str, *names: str) -> None:
    for name in names:
        kubectl("wait", "--for=condition=Ready", f"pod/{name}", "-n", namespace, "--timeout=60s", timeout=90)


def exec_sh(kubectl, namespace: str, pod: str, script: str, check: bool = True):
    return kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", script, check=check, timeout=60)


def http_get(kubectl, namespace: str, pod: str, host: str, port: int) -> str:
    """The body of GET / (busybox nc: Debian's static busybox wget crashes in its glibc lookups)."""
    script = f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {host} {port}"
    response = exec_sh(kubectl, namespace, pod, script).stdout.replace("\r\n", "\n")
    return response.split("\n\n", 1)[-1]
