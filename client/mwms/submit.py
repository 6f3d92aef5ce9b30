"""What `mwms submit train.py`, `Client().submit(...)` and `MirroredStrategyRunner(cluster=...)` send.

The code travels in a ConfigMap (spec.code) that the TrainJob owns, so it goes away with the job. The
ConfigMap is created first and the job second (its pods must find their files), then the job is made its
owner. Packing and the objects are pure functions here; kube.py is the only module that talks to the
API server.
"""

from __future__ import annotations

import base64
import contextlib
import re
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from mwms.kube import JobClient, SubmitError
from mwms.placement import Placement
from mwms_contract import names

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
            "labels": {names.LABEL_JOB_NAME: name, "app.kubernetes.io/created-by": "mwms-submit"},
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
    placement: Placement | None = None,
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
    body = {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    return body if placement is None else placement.apply(body)


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
        owner = {"apiVersion": names.API_VERSION, "kind": names.KIND, "name": name}
        client.own_configmap(configmap, {**owner, "uid": created["metadata"]["uid"]})
    except BaseException as error:
        left = take_back(client, configmap, name if created is not None else None)
        if not left:
            raise
        # What could not be taken back is said whatever went wrong: an error as SubmitError carrying it, an
        # interrupt (Ctrl-C, exit) on stderr as it goes on.
        if isinstance(error, Exception):
            said = str(error) if isinstance(error, SubmitError) else f"{type(error).__name__}: {error}"
            raise SubmitError(f"{said}; {left}") from error
        print(f"mwms submit: interrupted; {left}", file=sys.stderr, flush=True)
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
