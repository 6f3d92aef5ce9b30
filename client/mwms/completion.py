"""`mwms completion bash|zsh|fish`: shell completion scripts written from the command's own parser, so a new
verb or flag completes without editing them. Job names complete from the cluster (`mwms list -o jsonpath`).

    source <(mwms completion bash)          # ~/.bashrc
    source <(mwms completion zsh)           # ~/.zshrc
    mwms completion fish | source           # ~/.config/fish/config.fish
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

SHELLS = ("bash", "zsh", "fish")
# Verbs whose positional arguments are TrainJob names.
NAMED = ("get", "logs", "wait", "delete", "runs", "describe", "events")
JOB_NAMES = "mwms list -o 'jsonpath={.items[*].metadata.name}' 2>/dev/null"


def verbs(top: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each verb and its option strings."""
    found: dict[str, list[str]] = {}
    for action in top._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sorted({o for a in sub._actions for o in a.option_strings})
    return found


def bash(commands: Mapping[str, list[str]]) -> str:
    cases = "\n".join(
        f'        {verb}) opts="{" ".join(options)}" ;;' for verb, options in sorted(commands.items())
    )
    named = "|".join(verb for verb in NAMED if verb in commands) or "none"
    return f"""# mwms completion for bash: source <(mwms completion bash)
_mwms() {{
    local cur verb opts i
    cur="${{COMP_WORDS[COMP_CWORD]}}"
    verb=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            -n|--namespace|--kubeconfig|--context|-o|--output|-l|--selector) ((i++)) ;;
            -*) ;;
            *) verb="${{COMP_WORDS[i]}}"; break ;;
        esac
    done
    if [[ -z "$verb" ]]; then
        COMPREPLY=($(compgen -W "{" ".join(sorted(commands))}" -- "$cur"))
        return
    fi
    case "$verb" in
{cases}
        *) opts="" ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        return
    fi
    case "$verb" in
        {named}) COMPREPLY=($(compgen -W "$({JOB_NAMES})" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -f -- "$cur")) ;;
    esac
}}
complete -F _mwms mwms kubectl-mwms
"""


def zsh(commands: Mapping[str, list[str]]) -> str:
    """zsh runs the bash function through bashcompinit, as kubectl's first zsh completion did."""
    return (
        "#compdef mwms kubectl-mwms\n# mwms completion for zsh: source <(mwms completion zsh)\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash(commands).split("\n", 1)[1]
    )


def fish(commands: Mapping[str, list[str]]) -> str:
    lines = [
        "# mwms completion for fish: mwms completion fish | source",
        "complete -c mwms -f",
        f"complete -c mwms -n __fish_use_subcommand -a '{' '.join(sorted(commands))}'",
    ]
    for verb, options in sorted(commands.items()):
        when = f"'__fish_seen_subcommand_from {verb}'"
        for option in options:
            flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
            lines.append(f"complete -c mwms -n {when} {flag}")
        if verb in NAMED:
            lines.append(f'complete -c mwms -n {when} -a "({JOB_NAMES})"')
        if verb == "submit":
            lines.append(f"complete -c mwms -n {when} -F")
    return "\n".join(lines) + "\n"


def script(shell: str, top: argparse.ArgumentParser) -> str:
    return {"bash": bash, "zsh": zsh, "fish": fish}[shell](verbs(top))
