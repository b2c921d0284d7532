"""Whether a task's test command can start inside a workspace, checked once per instance.

A workspace shows the instance at its own path, but /root, /home, /run, /tmp and /var/tmp are
private to it (on the local backend the rest of the host is read-only). A test command whose
interpreter or virtual environment lives there (a venv made from a pyenv Python under /root,
`source /home/me/venv/bin/activate`) exits 127 or says "No module named pytest" in every
evaluation, and every trajectory would be graded `failed` for the environment's fault. So when
an instance is made, the interpreters the test command names are resolved inside a workspace of
it, symlinks, `#!` lines and a venv's `pyvenv.cfg` `home` followed; one that does not resolve
fails the instance: each trajectory of the task is an `error` whose message names the path and
what to do.

Which words are checked: for the scorer's or an inferred command, its interpreter (the first
word after `VAR=value` assignments; `python` or `python3` for the inferred ones); for a task's
`eval_script`, the paths its test section starts programs from (`./x`, `/a/b`, `source
.venv/bin/activate`), bare names there are left alone (a script may define them itself).
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.scoring.grading import END_TEST_OUTPUT, START_TEST_OUTPUT
from mcp_evalserver.scoring.test_plans import TestPlan
from mcp_evalserver.spec import Task

#: What a workspace does not show of the host (`sandbox/supervisor.py`, local backend).
PRIVATE_IN_WORKSPACES = ("/root", "/home", "/run", "/tmp", "/var/tmp")
#: The inferred commands run `python`, else `python3` (`test_plans._PYTHON`).
PYTHON_ALTERNATIVES = ("python", "python3")
_PROBE_TIMEOUT_S = 60.0
_SEPARATORS = frozenset({"&&", "||", ";", "|", "(", ")", "&"})
_SOURCE = frozenset({"source", "."})
# Prints, per word: `ok WORD PATH`, `missing WORD PATH` (not found) or `broken WORD PATH` (the
# first path on the way that does not exist in the view).
_PROBE = r"""
check() {
  local w=$1 depth=$2 p t n=0 interp arg home orig
  case $w in
    */*) p=$w; [ -e "$p" ] || [ -L "$p" ] || { echo "missing $3 $p"; return 1; } ;;
    *) p=$(command -v -- "$w") || { echo "missing $3 -"; return 1; }
       case $p in /*) ;; *) return 0 ;; esac ;;
  esac
  orig=$p
  while [ -L "$p" ] && [ $n -lt 40 ]; do
    t=$(readlink -- "$p"); case $t in /*) p=$t ;; *) p=${p%/*}/$t ;; esac; n=$((n + 1))
  done
  [ -e "$p" ] || { echo "broken $3 $p"; return 1; }
  home=${orig%/*}/../pyvenv.cfg  # a venv's interpreter needs the Python it was made from
  if [ -f "$home" ]; then
    home=$(sed -n 's/^home *= *//p' "$home" | head -n 1)
    [ -z "$home" ] || [ -d "$home" ] || { echo "broken $3 $home"; return 1; }
  fi
  if [ "$depth" -lt 3 ] && [ -f "$p" ] && [ "$(head -c 2 -- "$p" 2>/dev/null)" = '#!' ]; then
    read -r interp arg _ < <(head -n 1 -- "$p" | cut -c3-)
    case $interp in */env) interp=$arg ;; esac
    [ -z "$interp" ] || check "$interp" $((depth + 1)) "$3" || return 1
  fi
  [ "$depth" -gt 0 ] || echo "ok $3 $p"
}
for word in "$@"; do check "$word" 0 "$word"; done
"""

InstanceCheck = Callable[[Instance], Awaitable[None]]


@dataclass(frozen=True)
class _Word:
    """A word to resolve; `alternatives` are tried in order, like `command -v a || command -v b`
    (the first one found must resolve)."""

    alternatives: tuple[str, ...]


def interpreter_words(task: Task, plan: TestPlan) -> list[_Word]:
    """The interpreters the task's test command starts (see the module docstring)."""
    if task.eval_script:
        return [_Word((path,)) for path in _script_paths(task.eval_script)]
    if not plan.command:
        return []
    if plan.command.startswith('PY="$(command -v python || command -v python3)"'):
        return [_Word(PYTHON_ALTERNATIVES)]
    first = _first_program(plan.command)
    return [_Word((first,))] if first else []


def _segments(line: str) -> list[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token in _SEPARATORS:
                segments.append([])
            else:
                segments[-1].append(token)
    except ValueError:  # an unclosed quote: a line this check cannot read
        return []
    return [s for s in segments if s]


def _program(words: list[str]) -> list[str]:
    while words and "=" in words[0] and not words[0].startswith(("=", "/", ".")):
        words = words[1:]  # VAR=value assignments
    return words


def _first_program(command: str) -> str | None:
    for segment in _segments(command):
        words = _program(segment)
        if words and "$" not in words[0]:
            return words[0]
    return None


def _script_paths(script: str) -> list[str]:
    lines = script.split("\n")
    starts = [n for n, line in enumerate(lines) if START_TEST_OUTPUT in line]
    if starts:
        end = next(
            (n for n, line in enumerate(lines) if n > starts[0] and END_TEST_OUTPUT in line),
            len(lines),
        )
        lines = lines[starts[0] + 1 : end]
    paths: dict[str, None] = {}
    for line in lines:
        if line.lstrip().startswith("#"):
            continue
        for segment in _segments(line):
            words = _program(segment)
            if not words or words[0] == "cd":
                return list(paths)  # relative paths mean something else after a `cd`
            word = words[1] if words[0] in _SOURCE and len(words) > 1 else words[0]
            if "/" in word and "$" not in word:
                paths.setdefault(word)
    return list(paths)


def interpreter_check(task: Task, plan: TestPlan) -> InstanceCheck | None:
    """The check to run on each new instance of the task (None: nothing to check)."""
    words = interpreter_words(task, plan)
    if not words:
        return None

    async def check(instance: Instance) -> None:
        await check_interpreters(instance, task, words, plan.preamble)

    return check


async def check_interpreters(
    instance: Instance, task: Task, words: list[_Word], preamble: str = ""
) -> None:
    """Resolves `words` in a workspace of `instance` (after `preamble`, which sets up the
    environment as the test run does).

    Raises:
        InvalidInput: one does not resolve; the message names the path and what to do.
        SandboxUnavailable: the instance is gone.
    """
    candidates = [w for word in words for w in word.alternatives]
    script = f"{preamble}\n{_PROBE}" if preamble else _PROBE
    digest = hashlib.sha256(task.id.encode()).hexdigest()[:12]
    workspace = await instance.workspace(f"interpreter-check-{digest}")
    try:
        result = await workspace.exec(
            ["bash", "-c", script, "probe", *candidates], timeout=_PROBE_TIMEOUT_S
        )
    finally:
        await workspace.destroy()
    found: dict[str, tuple[str, str]] = {}
    for line in result.stdout.splitlines():
        verdict, _, rest = line.partition(" ")
        name, _, path = rest.partition(" ")
        if verdict in ("ok", "missing", "broken") and name:
            found[name] = (verdict, path)
    for word in words:
        _verdict_on(task, word, found)


def _verdict_on(task: Task, word: _Word, found: dict[str, tuple[str, str]]) -> None:
    seen = [(w, *found.get(w, ("ok", ""))) for w in word.alternatives]
    chosen = next(((w, v, p) for w, v, p in seen if v != "missing"), seen[-1])
    name, verdict, path = chosen
    if verdict == "ok":
        return
    what = f"task {task.id}: its test command's interpreter `{name}`"
    todo = (
        "give the instance an interpreter of its own outside those directories (for example "
        "`/usr/bin/python3 -m venv .venv` inside the instance), or run the task in a docker "
        "image; until then every trajectory of this task is an error, none is graded"
    )
    hidden = next((d for d in PRIVATE_IN_WORKSPACES if path == d or path.startswith(d + "/")), None)
    if verdict == "broken" and hidden is not None:
        raise InvalidInput(
            f"{what} resolves to {path}, which workspaces do not show ({hidden} is private to "
            f"each workspace, as are {', '.join(PRIVATE_IN_WORKSPACES)}): {todo}"
        )
    if verdict == "broken":
        raise InvalidInput(
            f"{what} resolves to {path}, which does not exist in a workspace: {todo}"
        )
    tried = " or ".join(f"`{w}`" for w in word.alternatives)
    raise InvalidInput(
        f"task {task.id}: its test command's interpreter {tried} is not found in a workspace "
        f"of its instance{'' if path in ('', '-') else f' ({path})'}: install it in the "
        "instance, or give the task an `eval_script` (or the scorer a `test_command`) that "
        "names one the instance has"
    )
