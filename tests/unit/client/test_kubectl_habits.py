"""kubectl's habits: global flags before the verb, -o jsonpath/custom-columns, -l, -w, the name it was run
by, completion scripts, and the in-cluster fallback (no cluster: a scripted API)."""

import io
import shutil
import subprocess
import sys

import pytest

from mwms import cli, kube, kubectl
from mwms.sdk import Client
from mwms_kit.fake_job_client import FakeJobClient, client_on

JOBS = [
    {
        "metadata": {"name": n, "namespace": "team-a", "labels": {"team": t}},
        "spec": {"replicas": 2},
        "status": {
            "phase": p,
            "conditions": [{"type": "Created", "status": "True"}, {"type": p, "status": "True"}],
        },
    }
    for n, t, p in (("a", "x", "Running"), ("b", "y", "Succeeded"))
]


def run(monkeypatch, api, *argv):
    seen = {}

    def client_of(args):
        seen["namespace"], seen["context"] = args.namespace, args.context
        return client_on(api)

    monkeypatch.setattr(cli, "client_of", client_of)
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out, err), out.getvalue(), seen


@pytest.mark.parametrize(
    "argv",
    [["-n", "team-b", "list"], ["--namespace=team-b", "list"], ["-nteam-b", "list"], ["list", "-n", "team-b"],
     ["--context", "c", "-n", "team-b", "-o", "name", "list"], ["-n", "team-b", "get", "a"]],
)  # fmt: skip
def test_global_flags_go_before_or_after_the_verb(monkeypatch, argv):
    code, _, seen = run(monkeypatch, FakeJobClient(JOBS), *argv)
    assert code == 0 and seen["namespace"] == "team-b"


def test_hoisting_leaves_what_follows_the_verb_alone():
    assert kubectl.hoist(["-n", "a", "submit", "t.py", "-n", "b"]) == ["submit", "-n", "a", "t.py", "-n", "b"]
    assert kubectl.hoist(["--bogus", "list"]) == ["--bogus", "list"]  # argparse refuses it, exit 2


JSONPATHS = [
    ("{.items[*].metadata.name}", "a b"),
    ('{range .items[*]}{.metadata.name}={.status.phase}{"\\n"}{end}', "a=Running\nb=Succeeded\n"),
    ("{.items[0].spec}", '{"replicas": 2}'),
    ('{.items[1].status.conditions[?(@.type=="Succeeded")].status}', "True"),
    ("{.items[-1].metadata.labels['team']}", "y"),
    ("{.items[5].metadata.name}", ""),
]


@pytest.mark.parametrize(("template", "shown"), JSONPATHS)
def test_jsonpath_as_kubectl(monkeypatch, template, shown):
    code, out, _ = run(monkeypatch, FakeJobClient(JOBS), "list", "-o", f"jsonpath={template}")
    assert (code, out) == (0, shown + "\n")


def test_jsonpath_of_one_job_is_over_the_object(monkeypatch):
    assert (
        run(monkeypatch, FakeJobClient(JOBS), "get", "b", "-o", "jsonpath={.status.phase}")[1]
        == "Succeeded\n"
    )


def test_custom_columns(monkeypatch):
    spec = "NAME:.metadata.name,TEAM:.metadata.labels.team,GONE:.status.nothing"
    code, out, _ = run(monkeypatch, FakeJobClient(JOBS), "list", "-o", f"custom-columns={spec}")
    assert [line.split() for line in out.splitlines()] == [["NAME", "TEAM", "GONE"], ["a", "x", "<none>"],
                                                           ["b", "y", "<none>"]]  # fmt: skip


@pytest.mark.parametrize("output", ["jsonpath={range .items[*]}", "custom-columns=NAME", "jsonpath", "table"])
def test_a_bad_output_format_is_a_usage_error(monkeypatch, output):
    with pytest.raises(SystemExit) as exited:
        run(monkeypatch, FakeJobClient(JOBS), "list", "-o", output)
    assert exited.value.code == 2


def test_selector_and_watch(monkeypatch):
    api = FakeJobClient(JOBS, changes=JOBS)
    code, out, _ = run(monkeypatch, api, "list", "-l", "team=x", "-w", "-o", "name")
    assert api.named("list_trainjobs") == ["team=x"]
    assert out.splitlines() == ["trainjob.mwms.dev/a", "trainjob.mwms.dev/a"]  # listed, then its change
    code, out, _ = run(monkeypatch, api, "get", "b", "-w")
    assert code == 0 and out.splitlines()[0].split()[:3] == ["NAME", "REPLICAS", "PHASE"]
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [["b", "2", "Succeeded"]] * 2


AS_PLUGIN = "import sys; sys.argv[0] = 'kubectl-mwms'; from mwms.cli import main; main()"


def test_kubectl_mwms_names_itself():
    assert kubectl.prog("/usr/bin/kubectl-mwms") == "kubectl mwms" and kubectl.prog("mwms") == "mwms"
    done = subprocess.run(
        [sys.executable, "-c", AS_PLUGIN, "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.startswith("usage: kubectl mwms")


def completion(shell):
    out = io.StringIO()
    assert cli.main(["completion", shell], out, io.StringIO()) == 0
    return out.getvalue()


def test_bash_completion_completes_verbs_and_each_verbs_flags(tmp_path):
    script = tmp_path / "c.bash"
    script.write_text(completion("bash"))
    probe = (
        f"source {script}; "
        "COMP_WORDS=(mwms -n x su); COMP_CWORD=3; _mwms; echo ${COMPREPLY[@]}; "
        "COMP_WORDS=(mwms submit t.py --gp); COMP_CWORD=3; _mwms; echo ${COMPREPLY[@]}; "
        "COMP_WORDS=(mwms list --all); COMP_CWORD=2; _mwms; echo ${COMPREPLY[@]}"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["submit", "--gpu --gpu-resource", "--all-namespaces"]


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion(shell):
    script = completion(shell)
    assert "--gpu-resource" in script or "-l gpu-resource" in script
    assert "list -o 'jsonpath={.items[*].metadata.name}'" in script  # job names from the cluster
    if shutil.which(shell):
        subprocess.run([shell, "-n"] if shell == "zsh" else [shell, "--no-execute"], input=script, text=True,
                       check=True)  # fmt: skip


# -- in-cluster ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "kubeconfig_file", "cluster", "inside"),
    [({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False, kube.Cluster(), True),
     ({}, False, kube.Cluster(), False),
     ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, True, kube.Cluster(), False),
     ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, False, kube.Cluster(kubeconfig="/k"), False),
     ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBECONFIG": "KC"}, True, kube.Cluster(), False)],
)  # fmt: skip
def test_the_service_account_is_used_inside_a_pod_without_a_kubeconfig(
    tmp_path, env, kubeconfig_file, cluster, inside
):
    env = {"HOME": str(tmp_path), **env}
    if "KUBECONFIG" in env:
        env["KUBECONFIG"] = str(tmp_path / "kc")
    if kubeconfig_file:
        path = tmp_path / "kc" if "KUBECONFIG" in env else tmp_path / ".kube" / "config"
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
    assert kube.in_cluster(cluster, env) is inside


def test_the_namespace_defaults_to_the_pods_own(tmp_path):
    (tmp_path / "namespace").write_text("team-a\n")
    assert kube.pod_namespace(str(tmp_path / "namespace")) == "team-a"
    assert kube.pod_namespace(str(tmp_path / "missing")) == "default"


def test_an_unmounted_service_account_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with pytest.raises(kube.SubmitError, match="service account is not usable"):
        Client()
