"""`mwms submit train.py --replicas N`, and `MirroredStrategyRunner(cluster=Cluster(...)).run(train)`.

The code travels in a ConfigMap (spec.code) that the TrainJob owns, so it goes away with the job. The
ConfigMap is created first and the job second (its pods must find their files), then the job is made its
owner. Packing and the objects are pure functions here; jobclient.py is the only module that talks to the
API server.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mwms_operator import constants
from mwms_trainer.jobclient import Cluster, JobClient, SubmitError

# A ConfigMap is stored whole in etcd, which refuses objects above 1 MiB (the API server says so too).
# Keep some room for the object's metadata.
MAX_CODE_BYTES = 1024 * 1024 - 16 * 1024
# The Python of the trainer image (trainer/Dockerfile's base): pickled functions need the same minor version.
IMAGE_PYTHON = (3, 11)
PICKLED_FUNCTION = "function.pkl.b64"
PICKLED_ENTRYPOINT = "mwms_trainer.usercode:run_pickled"
# Left out of a working directory by default (gitignore syntax), before its .gitignore and .mwmsignore files,
# whose `!pattern` lines may take a file back: the code ConfigMap is readable by everyone who may read the
# namespace's ConfigMaps, so secrets never go by accident, and neither do what is never source.
DEFAULT_IGNORED = (
    ".git/",
    ".env*",
    "*.pem",
    "*.key",
    "id_rsa*",
    ".kube/",
    ".aws/",
    "__pycache__/",
    "*.pyc",
    ".venv/",
    "venv/",
    ".mwms/",
    ".ipynb_checkpoints/",
    "mlruns/",
    "node_modules/",
)
IGNORE_FILES = (".gitignore", ".mwmsignore")  # in every directory, for it and below; the later file wins
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Code:
    """What goes into the ConfigMap: file text by key, and the key -> path items for nested files."""

    files: dict[str, str]
    items: list[tuple[str, str]] = field(default_factory=list)
    entrypoint: str = ""
    requirements: str | None = None
    # What the working directory's ignore rules left out (a directory ends in /), to tell the user.
    left_out: list[str] = field(default_factory=list)


def _key(path: str, used: set[str]) -> str:
    """A ConfigMap key (letters, digits, -._) for a relative path; unique among `used`."""
    base = re.sub(r"[^-._a-zA-Z0-9]", "_", path.replace("/", "__"))[:240] or "file"
    key, n = base, 1
    while key in used:
        key, n = f"{base}.{n}", n + 1
    used.add(key)
    return key


def _text(path: Path, shown: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SubmitError(
            f"{shown} is not a UTF-8 text file: the code ConfigMap holds source files only; put data in a "
            "volume or object store, or build an image FROM the trainer image (docs/submit.md)"
        ) from None


def _ignore_rules(directory: Path) -> Any:
    """The patterns of `directory`'s ignore files, or None when it has none."""
    import pathspec  # gitignore's own rules (negation, anchoring, `**`, directory-only patterns)

    lines = [
        line
        for name in IGNORE_FILES
        if (directory / name).is_file()
        for line in (directory / name).read_text(encoding="utf-8", errors="replace").splitlines()
    ]
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def working_files(root: Path) -> tuple[dict[str, Path], list[str]]:
    """The files of `root` to pack by relative path, and what was left out. As git does: a directory's ignore
    files apply below it, a deeper file's patterns win, and nothing inside a left-out directory comes back."""
    import pathspec

    files: dict[str, Path] = {}
    left_out: list[str] = []

    def ignored(relative: str, rules: list[tuple[str, Any]]) -> bool:
        for base, spec in reversed(rules):
            decided = spec.check_file(relative[len(base) :]).include
            if decided is not None:
                return bool(decided)
        return False

    def visit(directory: Path, base: str, rules: list[tuple[str, Any]]) -> None:
        own = _ignore_rules(directory)
        rules = [*rules, (base, own)] if own is not None else rules
        for entry in sorted(directory.iterdir()):
            is_dir = entry.is_dir() and not entry.is_symlink()  # a linked directory may lead anywhere
            relative = f"{base}{entry.name}/" if is_dir else f"{base}{entry.name}"
            if ignored(relative, rules):
                left_out.append(relative)
            elif is_dir:
                visit(entry, relative, rules)
            elif entry.is_file():
                files[relative] = entry

    visit(root, "", [("", pathspec.GitIgnoreSpec.from_lines(DEFAULT_IGNORED))])
    return files, left_out


def configmap_bytes(files: Mapping[str, int]) -> int:
    """What the ConfigMap's data weighs: each key and its text (sizes in bytes by key)."""
    return sum(len(key.encode()) + size for key, size in files.items())


def check_size(sizes: Mapping[str, int], keys: Mapping[str, str]) -> None:
    """Refuses code whose ConfigMap would pass the limit, naming the largest files (sizes by relative path,
    their keys by relative path): the whole, not each file, is what etcd refuses."""
    total = configmap_bytes({keys[rel]: n for rel, n in sizes.items()})
    if total > MAX_CODE_BYTES:
        biggest = ", ".join(
            f"{rel} ({n / 1e6:.1f} MB)" for rel, n in sorted(sizes.items(), key=lambda x: -x[1])[:3]
        )
        raise SubmitError(
            f"the code is {total / 1e6:.1f} MB, above the {MAX_CODE_BYTES / 1e6:.1f} MB a ConfigMap can hold "
            f"(largest: {biggest}); leave data out of the working directory (list it in .mwmsignore and read "
            "it from a volume or an object store), or build an image FROM the trainer image (docs/submit.md)"
        )


def pack(
    script: Path,
    working_dir: Path | None = None,
    requirements: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> Code:
    """The script alone, or the files of `working_dir` (which must hold the script) that no ignore rule leaves
    out; the script and the requirements file always go (they were named). Refuses above the ConfigMap size
    limit, naming the biggest files."""
    if not script.is_file():
        raise SubmitError(f"{script}: no such file")
    paths: dict[str, Path] = {}
    left_out: list[str] = []
    if working_dir is None:
        entrypoint = script.name
        paths[entrypoint] = script
    else:
        root = working_dir.resolve()
        try:
            entrypoint = script.resolve().relative_to(root).as_posix()
        except ValueError:
            raise SubmitError(f"{script} is not inside the working directory {working_dir}") from None
        paths, left_out = working_files(root)
        paths[entrypoint] = script
        left_out = [rel for rel in left_out if rel != entrypoint]
    required = None
    if requirements is not None:
        if not requirements.is_file():
            raise SubmitError(f"{requirements}: no such file")
        required = "requirements.txt" if "requirements.txt" not in paths else "mwms-requirements.txt"
        paths[required] = requirements
    sizes = {rel: p.stat().st_size for rel, p in paths.items()}
    sizes.update({rel: len(text.encode()) for rel, text in (extra or {}).items()})
    used: set[str] = set()
    keys = {rel: _key(rel, used) for rel in sizes}
    check_size(sizes, keys)  # before reading: a data file may be large
    texts = {rel: _text(p, rel) for rel, p in paths.items()} | dict(extra or {})
    files = {keys[rel]: text for rel, text in texts.items()}
    items = [(keys[rel], rel) for rel in texts]
    nested = any(key != rel for key, rel in items)
    return Code(
        files=files,
        items=items if nested else [],
        entrypoint=entrypoint,
        requirements=required,
        left_out=left_out,
    )


def dry_run(code: Code, out: IO[str]) -> None:
    """What `--dry-run` prints: each file and its size, the total against the limit, what was left out."""
    paths = dict(code.items)
    for key, text in code.files.items():
        out.write(f"{len(text.encode()):>10,} B  {paths.get(key, key)}\n")
    total = configmap_bytes({key: len(text.encode()) for key, text in code.files.items()})
    out.write(f"{len(code.files)} files, {total:,} of the {MAX_CODE_BYTES:,} bytes a ConfigMap holds\n")
    if code.left_out:
        out.write(f"left out: {', '.join(code.left_out)}\n")


def job_name(script: str) -> str:
    """`train.py` -> `train-x7k2p`: a valid, fresh object name (the ConfigMap adds `-code`)."""
    stem = re.sub(r"[^a-z0-9-]+", "-", Path(script).stem.lower()).strip("-")[:40] or "job"
    if not stem[0].isalpha():
        stem = f"job-{stem}"[:40]
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return f"{stem}-{''.join(secrets.choice(alphabet) for _ in range(5))}"


def code_configmap(name: str, code: Code) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-code",
            "labels": {constants.LABEL_JOB_NAME: name, "app.kubernetes.io/created-by": "mwms-submit"},
        },
        "data": dict(code.files),
    }


def trainjob(
    name: str,
    code: Code,
    *,
    replicas: int,
    args: Sequence[str] = (),
    experiment: str | None = None,
    image: str | None = None,
) -> dict[str, Any]:
    spec_code: dict[str, Any] = {"configMap": f"{name}-code", "entrypoint": code.entrypoint}
    if args:
        spec_code["args"] = list(args)
    if code.items:
        spec_code["items"] = [{"key": k, "path": p} for k, p in code.items]
    if code.requirements:
        spec_code["requirements"] = code.requirements
    spec: dict[str, Any] = {"replicas": replicas, "code": spec_code}
    if experiment:
        spec["mlflow"] = {"experiment": experiment}
    if image:
        spec["image"] = image
    return {
        "apiVersion": constants.API_VERSION,
        "kind": constants.KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def submit(client: JobClient, name: str, code: Code, **job: Any) -> dict[str, Any]:
    """ConfigMap, then TrainJob, then the job owns the ConfigMap. A refusal after the ConfigMap was created
    takes back what this call created: the ConfigMap (readable in the namespace, and owned by nothing) and
    the job (it would run without its code's owner, or without its code)."""
    body = code_configmap(name, code)
    configmap = body["metadata"]["name"]
    client.create_configmap(body)
    created = None
    try:
        created = client.create_trainjob(trainjob(name, code, **job))
        owner = {"apiVersion": constants.API_VERSION, "kind": constants.KIND, "name": name}
        client.own_configmap(configmap, {**owner, "uid": created["metadata"]["uid"]})
    except BaseException as error:
        left = take_back(client, configmap, name if created is not None else None)
        if left and isinstance(error, SubmitError):
            raise SubmitError(f"{error}; {left}") from error
        raise
    return created


def take_back(client: JobClient, configmap: str, job: str | None) -> str:
    """Deletes the job (when created) and the ConfigMap; "" when done, else what the user must delete."""
    left = []
    for kind, name, delete in (
        ("trainjob", job, client.delete_trainjob),
        ("configmap", configmap, client.delete_configmap),
    ):
        if name is None:
            continue
        try:
            delete(name)
        except Exception as e:  # said to the user with what to delete by hand, not raised over the refusal
            left.append(f"{e}: kubectl delete {kind} {name} -n {client.namespace}")
    return "; ".join(left)


@dataclass
class Outcome:
    phase: str
    message: str = ""
    run_id: str | None = None
    model_uri: str | None = None
    result: Any = None
    has_result: bool = False
    result_artifact: str | None = None  # a result above a few KB: an artifact of the job's MLflow run
    result_bytes: int | None = None
    tracking_uri: str | None = None  # the chief's MLflow, where result_artifact is


def chief_summary(pod: Mapping[str, Any] | None) -> dict[str, Any]:
    """The chief's termination message (pod as the kubernetes client's to_dict() gives it), parsed."""
    for status in ((pod or {}).get("status") or {}).get("container_statuses") or []:
        if status.get("name") != constants.CONTAINER_NAME:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        with contextlib.suppress(TypeError, ValueError):
            data = json.loads(terminated.get("message") or "")
            if isinstance(data, dict):
                return data
    return {}


def chief_tracking_uri(pod: Mapping[str, Any] | None) -> str | None:
    """The MLflow tracking URI the chief ran with (pod as the kubernetes client's to_dict() gives it)."""
    for container in ((pod or {}).get("spec") or {}).get("containers") or []:
        if container.get("name") == constants.CONTAINER_NAME:
            env = {e.get("name"): e.get("value") for e in container.get("env") or []}
            return env.get(constants.ENV_TRACKING_URI) or None
    return None


def outcome(job: Mapping[str, Any], chief: Mapping[str, Any] | None) -> Outcome:
    status = job.get("status") or {}
    phase = status.get("phase") or "Pending"
    failed: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == phase), {}
    )
    mlflow = status.get("mlflow") or {}
    summary = chief_summary(chief) if phase == "Succeeded" else {}
    return Outcome(
        phase=phase,
        message=failed.get("message", ""),
        run_id=mlflow.get("runId") or summary.get("runId"),
        model_uri=mlflow.get("modelUri") or summary.get("modelUri"),
        result=summary.get("result"),
        has_result="result" in summary or "resultArtifact" in summary,
        result_artifact=summary.get("resultArtifact"),
        result_bytes=summary.get("resultBytes"),
        tracking_uri=chief_tracking_uri(chief),
    )


def chiefs_value(result: Outcome, environ: Mapping[str, str]) -> Any:
    """The chief's return value, whole: from its termination message, or from MLflow when it was too big for
    it (at this machine's MLFLOW_TRACKING_URI, else the chief's)."""
    if result.result_artifact is None:
        return result.result
    from mwms_trainer import result as job_result

    uri = environ.get(constants.ENV_TRACKING_URI) or result.tracking_uri
    return job_result.read(result.result_artifact, uri)


def progress_line(progress: Mapping[str, Any], tty: bool) -> str:
    epoch, epochs = progress.get("epoch"), progress.get("epochs")
    metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted((progress.get("metrics") or {}).items())[:4])
    if tty and epochs:
        done = int(20 * min(epoch or 0, epochs) / epochs)
        return f"epoch {epoch}/{epochs} [{'#' * done}{'.' * (20 - done)}] {metrics}"
    return f"epoch {epoch}{f'/{epochs}' if epochs else ''} {metrics}".rstrip()


class Follower:
    """Phase and per-epoch progress (a bar on a terminal, plain lines otherwise) and the chief's log."""

    def __init__(self, client: JobClient, name: str, out: IO[str], tty: bool, poll: float = 1.0) -> None:
        self.client, self.name, self.out, self.tty, self.poll = client, name, out, tty, poll
        self._bar = ""
        self._lock = threading.Lock()

    def _print(self, line: str) -> None:
        with self._lock:
            if self.tty and self._bar:
                self.out.write("\r\033[K")
            self.out.write(line + "\n")
            if self.tty and self._bar:
                self.out.write(self._bar)
            self.out.flush()

    def _show_progress(self, line: str) -> None:
        if self.tty:
            with self._lock:
                self._bar = line
                self.out.write("\r\033[K" + line)
                self.out.flush()
        else:
            self._print(line)

    def follow(self) -> Outcome:
        phase, epoch, restarts = None, None, -1
        stop = threading.Event()
        streamer: threading.Thread | None = None
        chief = f"{self.name}-worker-0"
        try:
            while True:
                job = self.client.get_trainjob(self.name)
                if job is None:
                    raise SubmitError(f"TrainJob {self.name} was deleted")
                status = job.get("status") or {}
                if status.get("phase") != phase:
                    phase = status.get("phase")
                    if phase:
                        self._print(f"{self.name}: {phase}")
                if status.get("restarts", 0) != restarts and phase in ("Running", "Restarting", *TERMINAL):
                    # A (re)started group: follow the new chief's log.
                    restarts = status.get("restarts", 0)
                    stop.set()
                    if streamer is not None:
                        streamer.join(timeout=5)
                    stop = threading.Event()
                    streamer = threading.Thread(
                        target=self.client.stream_log,
                        args=(chief, lambda line: self._print(f"[worker-0] {line}"), stop),
                        daemon=True,
                    )
                    streamer.start()
                progress = status.get("progress") or {}
                if progress.get("epoch") is not None and progress.get("epoch") != epoch:
                    epoch = progress["epoch"]
                    self._show_progress(progress_line(progress, self.tty))
                if phase in TERMINAL:
                    if streamer is not None:
                        streamer.join(timeout=10)  # the rest of the chief's log
                    stop.set()
                    if self.tty and self._bar:
                        self.out.write("\n")
                        self._bar = ""
                    return outcome(job, self.client.get_pod(chief))
                time.sleep(self.poll)
        finally:
            stop.set()


def report(result: Outcome, out: IO[str]) -> int:
    if result.phase == "Succeeded":
        out.write(f"Succeeded. MLflow run ID: {result.run_id}\nModel URI: {result.model_uri}\n")
        if result.result_artifact is not None:  # up to 1 MiB: not for a terminal
            out.write(f"Result: {result.result_bytes} bytes of JSON, in MLflow at {result.result_artifact}\n")
        elif result.has_result and result.result is not None:
            out.write(f"Result: {json.dumps(result.result)}\n")
        return constants.EXIT_SUCCESS
    out.write(f"Failed: {result.message}\n")
    return constants.EXIT_FAILURE


def check_python(image_python: tuple[int, int] = IMAGE_PYTHON) -> None:
    here, there = ".".join(map(str, sys.version_info[:2])), ".".join(map(str, image_python))
    if here != there:
        raise SubmitError(
            f"this Python is {here} but the trainer image runs {there}: a function pickled here may not "
            f"load there. Use Python {there}, or put train() in a file and `mwms submit` it"
        )


def pack_function(function: Callable[..., Any], kwargs: Mapping[str, Any], use_custom_strategy: bool) -> Code:
    """The function by cloudpickle; the source file of its module travels too when it is the user's own
    (found with inspect), so a by-reference pickle imports it there. Functions of __main__ (a notebook, a
    script) go by value."""
    import inspect

    import cloudpickle

    check_python()
    payload = cloudpickle.dumps((function, dict(kwargs), use_custom_strategy))
    extra = {PICKLED_FUNCTION: base64.b64encode(payload).decode()}
    module = sys.modules.get(getattr(function, "__module__", "") or "")
    source = None
    if module is not None and module.__name__ != "__main__" and "." not in module.__name__:
        with contextlib.suppress(TypeError, OSError):
            source = inspect.getsourcefile(module)
    if source and "site-packages" not in source:
        extra[f"{module.__name__}.py"] = Path(source).read_text(encoding="utf-8")  # type: ignore[union-attr]
    used: set[str] = set()
    keys = {rel: _key(rel, used) for rel in extra}
    check_size({rel: len(text.encode()) for rel, text in extra.items()}, keys)
    return Code(files={keys[rel]: text for rel, text in extra.items()}, entrypoint=PICKLED_ENTRYPOINT)


def run_function(
    cluster: Cluster,
    function: Callable[..., Any],
    kwargs: Mapping[str, Any],
    *,
    num_slots: int,
    use_custom_strategy: bool,
    out: IO[str] | None = None,
) -> Any:
    """Submit, follow, and return the chief's return value (RuntimeError naming the failure otherwise)."""
    code = pack_function(function, kwargs, use_custom_strategy)
    client = JobClient(cluster)
    name = job_name(str(getattr(function, "__name__", "train")).replace("_", "-"))
    submit(client, name, code, replicas=num_slots, image=cluster.image)
    stream = out or sys.stderr
    result = Follower(client, name, stream, tty=stream.isatty()).follow()
    if result.phase != "Succeeded":
        raise RuntimeError(f"TrainJob {client.namespace}/{name} failed: {result.message}")
    return chiefs_value(result, os.environ)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Everything after `--` goes to the script (argparse alone would take it for unknown options)."""
    argv = list(argv)
    script_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(
        prog="mwms submit",
        usage="mwms submit SCRIPT [options] [-- SCRIPT_ARGS...]",
        description="Run your training script as a TrainJob: packs it into a ConfigMap the job owns.",
    )
    parser.add_argument("script", type=Path, help="the script to run on every worker (as __main__)")
    parser.add_argument("--replicas", type=int, default=1, help="number of workers (default 1)")
    parser.add_argument("--namespace", "-n", help="default: the kubeconfig context's")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    parser.add_argument("--experiment", help="MLflow experiment (default: the job's name)")
    parser.add_argument("--image", help="trainer image (default: the operator's)")
    parser.add_argument(
        "--working-dir",
        type=Path,
        help="pack this directory (it must hold the script), less what its .gitignore and .mwmsignore files "
        "and the defaults (.git/, .env*, keys, .kube/, .aws/) leave out",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="list the files it would pack and their size; create nothing"
    )
    parser.add_argument("--requirements", type=Path, help="a pip requirements file installed on each worker")
    parser.add_argument("--name", help="the TrainJob's name (default: the script's name and a suffix)")
    parser.add_argument("--follow", "-f", action="store_true", help="show progress and the chief's log")
    parser.add_argument("--detach", action="store_true", help="with --follow: Ctrl-C never deletes the job")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    args.args = script_args
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        code = pack(args.script, args.working_dir, args.requirements)
        if args.dry_run:
            dry_run(code, sys.stdout)
            return constants.EXIT_SUCCESS
        if code.left_out:
            print(f"mwms submit: left out (ignored): {', '.join(code.left_out)}", file=sys.stderr)
        client = JobClient(Cluster(namespace=args.namespace, kubeconfig=args.kubeconfig))
        name = args.name or job_name(args.script.name)
        submit(
            client,
            name,
            code,
            replicas=args.replicas,
            args=args.args,
            experiment=args.experiment,
            image=args.image,
        )
    except SubmitError as e:
        print(f"mwms submit: {e}", file=sys.stderr)
        return constants.EXIT_INVALID_CONFIG
    print(f"trainjob/{name} created in namespace {client.namespace}", flush=True)
    if not args.follow:
        return constants.EXIT_SUCCESS
    try:
        result = Follower(client, name, sys.stdout, tty=sys.stdout.isatty()).follow()
    except KeyboardInterrupt:
        return interrupted(client, name, args.detach)
    except SubmitError as e:
        print(f"mwms submit: {e}", file=sys.stderr)
        return constants.EXIT_FAILURE
    return report(result, sys.stdout)


def interrupted(client: JobClient, name: str, detach: bool) -> int:
    """Ctrl-C: ask whether to delete the job (never with --detach, nor without a terminal to ask on)."""
    delete = False
    if not detach and sys.stdin.isatty():
        with contextlib.suppress(EOFError, KeyboardInterrupt):
            delete = input(f"\ndelete trainjob/{name}? [y/N] ").strip().lower() in ("y", "yes")
    if delete:
        client.delete_trainjob(name)
        print(f"trainjob/{name} deleted")
    else:
        print(f"\ntrainjob/{name} keeps running: kubectl get trainjob {name} -n {client.namespace}")
    return 130
