"""Pure: what the local node agent runs for a pod's container: argv, environment, mounts, user.

Everything here reads the pod as a plain dict (the API server's JSON) and raises `PodSpecError` naming
the field for what cannot run here (permanent: the pod fails), or `ConfigNotReady` for what may appear
later (a ConfigMap or Secret key: the kubelet's CreateContainerConfigError, retried).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_TERMINATION_MESSAGE_PATH = "/dev/termination-log"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Images our Dockerfiles build, mapped to the entrypoint they declare (run with the venv's python here).
LOCAL_ENTRYPOINTS: dict[str, list[str]] = {
    "mwms-operator": ["-m", "mwms_operator"],
    "mwms-trainer": ["-m", "mwms_trainer"],
}

# lookup(kind, namespace, name) -> the object's string data, or None if it does not exist.
# kind is "configmap" or "secret" (secret values already base64-decoded).
Lookup = Callable[[str, str, str], Mapping[str, str] | None]


class PodSpecError(ValueError):
    """The pod cannot run on this node agent, ever. `reason` goes into the container status."""

    def __init__(self, field: str, message: str, reason: str = "CreateContainerError") -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.reason = field, reason


class ConfigNotReady(RuntimeError):
    """A referenced ConfigMap/Secret (key) is missing now; the kubelet retries these."""


@dataclass(frozen=True)
class Mount:
    source: str  # absolute path on the host
    target: str  # absolute path inside the pod
    read_only: bool = False
    is_file: bool = False


def image_repository(image: str) -> str:
    """`ghcr.io/x/mwms-trainer:1.2.3@sha256:..` -> `ghcr.io/x/mwms-trainer`."""
    name = image.split("@", 1)[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


# The image reference grammar of github.com/distribution/reference (what the kubelet parses): a lowercase
# path, an optional registry host[:port], an optional tag and an optional digest.
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_IMAGE_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def invalid_image_name(image: str) -> str | None:
    """The kubelet's InvalidImageName message for an image reference it cannot parse; None if it parses."""
    if _IMAGE_REFERENCE.match(image) and len(image_repository(image)) <= 255:
        return None
    return (
        f"Failed to apply default image tag {image!r}: couldn't parse image name {image!r}: "
        "invalid reference format"
    )


def local_entrypoint(image: str, python: str) -> list[str] | None:
    repo = image_repository(image)
    for suffix, args in LOCAL_ENTRYPOINTS.items():
        if repo == suffix or repo.endswith("/" + suffix):
            return [python, *args]
    return None


_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` escapes, the rest stays as is."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return _VAR_REF.sub(sub, value)


def container_argv(
    container: Mapping[str, Any], env: Mapping[str, str], python: str, field: str
) -> list[str]:
    """command + args as the runtime would exec them; an image without command maps to a local entrypoint."""
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if not command:
        image = container.get("image") or ""
        entrypoint = local_entrypoint(image, python)
        if entrypoint is None:
            raise PodSpecError(
                f"{field}.command",
                f"image {image!r} has no local entrypoint and the container gives no command; the local node "
                f"agent runs only {', '.join(sorted(LOCAL_ENTRYPOINTS))} images without a command",
                reason="ImageNotRunnableLocally",
            )
        command = entrypoint
    argv = [expand(str(a), env) for a in command + args]
    if not argv[0]:
        raise PodSpecError(f"{field}.command", "the command is empty")
    return argv


def field_ref(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str, field: str) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return simple[path]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    raise PodSpecError(f"{field}.fieldPath", f"fieldPath {path!r} is not supported")


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    base: Mapping[str, str],
    pod_ip: str,
    host_ip: str,
    lookup: Lookup,
    field: str,
) -> dict[str, str]:
    """`base` (what the runtime and kubelet provide) overlaid by envFrom, then env, in order, with $(VAR)."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    env = dict(base)
    for i, source in enumerate(container.get("envFrom") or []):
        f = f"{field}.envFrom[{i}]"
        prefix = source.get("prefix") or ""
        for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = lookup(kind, namespace, ref.get("name", ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigNotReady(f"{f}.{key}: {kind} {ref.get('name')!r} not found")
            env.update({prefix + k: v for k, v in data.items()})
    for i, var in enumerate(container.get("env") or []):
        f = f"{field}.env[{i}]"
        name = var.get("name")
        if not name:
            raise PodSpecError(f"{f}.name", "an env entry has no name")
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        if "fieldRef" in source:
            env[name] = field_ref(
                pod, source["fieldRef"].get("fieldPath", ""), pod_ip, host_ip, f"{f}.valueFrom"
            )
            continue
        for kind, key in (("configmap", "configMapKeyRef"), ("secret", "secretKeyRef")):
            ref = source.get(key)
            if ref is None:
                continue
            data = lookup(kind, namespace, ref.get("name", ""))
            value = None if data is None else data.get(ref.get("key", ""))
            if value is not None:
                env[name] = value
            elif not ref.get("optional"):
                raise ConfigNotReady(
                    f"{f}.valueFrom.{key}: key {ref.get('key')!r} of {kind} {ref.get('name')!r} not found"
                )
            break
        else:
            raise PodSpecError(
                f"{f}.valueFrom",
                f"only fieldRef, configMapKeyRef and secretKeyRef are supported, got {sorted(source)}",
            )
    return env


def base_env(
    pod: Mapping[str, Any], *, venv_bin: str, api_host: str, api_port: int, run_as_root: bool
) -> dict[str, str]:
    """The environment an image and the kubelet give before the pod's own env."""
    spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
    return {
        "PATH": f"{venv_bin}:{SYSTEM_PATH}",
        "HOME": "/root" if run_as_root else "/",
        "HOSTNAME": spec.get("hostname") or meta.get("name", ""),
        "PYTHONUNBUFFERED": "1",  # our images set it; it keeps per-container logs current
        "KUBERNETES_SERVICE_HOST": api_host,
        "KUBERNETES_SERVICE_PORT": str(api_port),
        "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
        "KUBERNETES_PORT": f"tcp://{api_host}:{api_port}",
    }


def run_as(pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[int | None, int | None, list[int]]:
    """(uid, gid, supplementary groups); the container's securityContext wins over the pod's."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    sc = container.get("securityContext") or {}
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    groups = [int(g) for g in pod_sc.get("supplementalGroups") or []]
    if pod_sc.get("fsGroup") is not None:
        groups.append(int(pod_sc["fsGroup"]))
    return (None if uid is None else int(uid), None if gid is None else int(gid), groups)


def _clean_path(path: str, field: str) -> str:
    if not path.startswith("/"):
        raise PodSpecError(field, f"{path!r} is not an absolute path")
    return posixpath.normpath(path)


def _sub_path(base: str, sub: str, field: str) -> str:
    if not sub:
        return base
    if sub.startswith("/") or ".." in sub.split("/"):
        raise PodSpecError(field, f"subPath {sub!r} must be relative and must not contain '..'")
    return posixpath.join(base, sub)


def volume_source(
    volume: Mapping[str, Any], *, pod_dir: str, state_dir: str, namespace: str, field: str
) -> str:
    """The host path behind a pod volume (projected/configMap/secret/downwardAPI: files the agent writes)."""
    name = volume.get("name") or ""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name):
        raise PodSpecError(f"{field}.name", f"invalid volume name {name!r}")
    if "emptyDir" in volume:
        return f"{pod_dir}/volumes/{name}"
    if "hostPath" in volume:
        return _clean_path((volume["hostPath"] or {}).get("path", ""), f"{field}.hostPath.path")
    if "persistentVolumeClaim" in volume:
        claim = (volume["persistentVolumeClaim"] or {}).get("claimName", "")
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", claim):
            raise PodSpecError(f"{field}.persistentVolumeClaim.claimName", f"invalid claim name {claim!r}")
        return f"{state_dir}/pvc/{namespace}/{claim}"
    if any(k in volume for k in ("projected", "configMap", "secret", "downwardAPI")):
        return f"{pod_dir}/volumes/{name}"
    kinds = sorted(set(volume) - {"name"})
    raise PodSpecError(
        field,
        f"volume type {kinds} is not supported by the local node agent "
        "(emptyDir, hostPath, persistentVolumeClaim, projected, configMap, secret, downwardAPI are)",
    )


def container_mounts(
    pod: Mapping[str, Any], container: Mapping[str, Any], *, pod_dir: str, state_dir: str, field: str
) -> list[Mount]:
    """The container's volumeMounts as host-path bind mounts, parents before children."""
    spec, namespace = pod.get("spec") or {}, (pod.get("metadata") or {}).get("namespace", "")
    volumes = {}
    for i, volume in enumerate(spec.get("volumes") or []):
        volumes[volume.get("name")] = volume_source(
            volume, pod_dir=pod_dir, state_dir=state_dir, namespace=namespace, field=f"spec.volumes[{i}]"
        )
    mounts = []
    for i, vm in enumerate(container.get("volumeMounts") or []):
        f = f"{field}.volumeMounts[{i}]"
        if vm.get("name") not in volumes:
            raise PodSpecError(f"{f}.name", f"no volume named {vm.get('name')!r} in spec.volumes")
        target = _clean_path(vm.get("mountPath") or "", f"{f}.mountPath")
        if target == "/":
            raise PodSpecError(f"{f}.mountPath", "cannot mount over /")
        source = _sub_path(volumes[vm["name"]], vm.get("subPath") or "", f"{f}.subPath")
        mounts.append(Mount(source=source, target=target, read_only=bool(vm.get("readOnly"))))
    return sorted(mounts, key=lambda m: m.target.count("/"))


def termination_message_path(container: Mapping[str, Any], field: str) -> str:
    return _clean_path(
        container.get("terminationMessagePath") or DEFAULT_TERMINATION_MESSAGE_PATH,
        f"{field}.terminationMessagePath",
    )


def projected_items(
    volume: Mapping[str, Any],
    *,
    pod: Mapping[str, Any],
    pod_ip: str,
    host_ip: str,
    lookup: Lookup,
    token: Callable[[str | None, int], str],
    field: str,
) -> dict[str, str]:
    """The files (relative path -> text) of a projected, configMap, secret or downwardAPI volume.

    `token(audience, expiration_seconds)` returns a ServiceAccount token for the pod (TokenRequest).
    """
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    if "projected" in volume:
        sources = [
            (f"{field}.projected.sources[{i}]", s)
            for i, s in enumerate(volume["projected"].get("sources") or [])
        ]
    else:
        kind = next(k for k in ("configMap", "secret", "downwardAPI") if k in volume)
        sources = [(f"{field}.{kind}", {kind: volume[kind]})]
    files: dict[str, str] = {}
    for f, source in sources:
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            files[_rel(sat.get("path", "token"), f)] = token(
                sat.get("audience"), int(sat.get("expirationSeconds") or 3600)
            )
        elif "downwardAPI" in source:
            for j, item in enumerate(source["downwardAPI"].get("items") or []):
                if "fieldRef" not in item:
                    raise PodSpecError(f"{f}.downwardAPI.items[{j}]", "only fieldRef items are supported")
                files[_rel(item.get("path", ""), f)] = field_ref(
                    pod,
                    item["fieldRef"].get("fieldPath", ""),
                    pod_ip,
                    host_ip,
                    f"{f}.downwardAPI.items[{j}].fieldRef",
                )
        elif "configMap" in source or "secret" in source:
            key = "configMap" if "configMap" in source else "secret"
            ref = source[key]
            ref_name = ref.get("name") or ref.get("secretName") or ""
            data = lookup(key.lower(), namespace, ref_name)
            if data is None:
                if ref.get("optional"):
                    continue
                raise ConfigNotReady(f"{f}: {key} {ref_name!r} not found")
            items = ref.get("items")
            if items is None:
                files.update({_rel(k, f): v for k, v in data.items()})
            for item in items or []:
                if item.get("key") in data:
                    files[_rel(item.get("path") or item["key"], f)] = data[item["key"]]
                elif not ref.get("optional"):
                    raise ConfigNotReady(f"{f}: key {item.get('key')!r} of {key} {ref_name!r} not found")
        else:
            raise PodSpecError(f, f"projected source {sorted(source)} is not supported")
    return files


def _rel(path: str, field: str) -> str:
    if not path or path.startswith("/") or ".." in path.split("/"):
        raise PodSpecError(field, f"file path {path!r} must be relative and must not contain '..'")
    return path
