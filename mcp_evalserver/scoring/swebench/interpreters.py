"""Whether a task's test command can start inside a workspace, checked on each instance.

A workspace shows the instance at its own path, but /root, /home, /run, /tmp and /var/tmp are
private to it (on the local backend the rest of the host is read-only). A test command whose
interpreter or virtual environment lives there (a venv made from a pyenv Python under /root,
`source /home/me/venv/bin/activate`, conda under /root/miniconda3) exits 127 or says "No
module named pytest" in every evaluation, and every trajectory would be graded `failed` for the
environment's fault. So before a trajectory of the task uses an instance, the eval script the
scorer would run is followed in a throwaway workspace of it, and a program it starts that does
not resolve there fails the instance for that task: each of its trajectories is an `error`
whose message names the path and what to do.

Following the script: bash runs it with a DEBUG trap (`extdebug`) that lets every command
that shapes the environment run as written (assignments, `export`, `cd`/`pushd`, `source` and
`.`, `eval`, shell functions such as `conda activate`, builtins) and skips every other program
(nothing is installed, applied or tested). In the test section (between SWE-bench's markers)
each program a command starts, after its own `VAR=value` words and wrappers (`env`, `exec`,
`timeout`, ...), is expanded and resolved on the PATH and in the directory the command would
have: symlinks, `#!` lines and a venv's `pyvenv.cfg` `home` followed. A file `source`d or a
directory `cd`'d into that does not exist is reported too (anywhere in the script). Inside a
function or a sourced file commands run as written; a function the test section calls that is
not an environment manager (`conda`, `pyenv`, `workon`, ...) is skipped, unchecked.
"""

from __future__ import annotations

import hashlib
import secrets
from functools import partial

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.sandboxes import InstanceCheck
from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.spec.campaign import Task

#: What a workspace does not show of the host (`sandbox/supervisor/view.py`, local backend).
PRIVATE_IN_WORKSPACES = ("/root", "/home", "/run", "/tmp", "/var/tmp")
_PROBE_TIMEOUT_S = 60.0
_VERDICTS = ("ok", "missing", "broken")
# Prepended to the eval script. Reports on stdout, one `TAG VERDICT WORD PATH` line per
# program (ok; missing: not found; broken: the first path on the way that does not exist);
# the script's own output goes nowhere.
_FOLLOW = r"""
# Splits $1 into words as the shell would, unexpanded (quotes, $(...), backslashes kept): the
# array __mcp_w.
__mcp_words() {
  local s=$1 word='' q='' depth=0 k ch have=0
  __mcp_w=()
  for ((k = 0; k < ${#s}; k++)); do
    ch=${s:k:1}
    if [ -n "$q" ]; then
      word+=$ch
      if [ "$q" = "'" ]; then [ "$ch" != "'" ] || q=''
      elif [ "$ch" = '\' ]; then k=$((k + 1)); word+=${s:k:1}
      elif [ "$ch" = '"' ] && [ $depth -eq 0 ]; then q=''
      elif [ "$ch" = '(' ] && [ "${s:k-1:1}" = '$' ]; then depth=$((depth + 1))
      elif [ "$ch" = ')' ] && [ $depth -gt 0 ]; then depth=$((depth - 1))
      fi
      continue
    fi
    case $ch in
      ' '|$'\t'|$'\n')
        if [ $depth -eq 0 ]; then
          [ $have = 0 ] || __mcp_w+=("$word")
          word='' have=0
          continue
        fi ;;
      "'"|'"') q=$ch ;;
      '\') word+=$ch; k=$((k + 1)); ch=${s:k:1} ;;
      '(') [ "${s:k-1:1}" != '$' ] || depth=$((depth + 1)) ;;
      ')') [ $depth -eq 0 ] || depth=$((depth - 1)) ;;
    esac
    word+=$ch have=1
  done
  [ $have = 0 ] || __mcp_w+=("$word")
}
# The PATH's directories that do not exist here, `:`-joined ("-" for none).
__mcp_gone() {
  local d gone=()
  local IFS=:
  for d in $PATH; do [ -z "$d" ] || [ -d "$d" ] || gone+=("$d"); done
  [ ${#gone[@]} -gt 0 ] && printf '%s' "${gone[*]}" || printf -
}
__mcp_say() { printf '%s %s %s %s\n' "$__mcp_tag" "$1" "$2" "$3" >&"$__mcp_fd"; }
# Resolves program $1 (depth $2, reported as $3): symlinks, #! lines, a venv's home.
__mcp_check() {
  local w=$1 depth=$2 p t n=0 interp arg home orig
  case $w in
    */*) p=$w; [ -e "$p" ] || [ -L "$p" ] || { __mcp_say missing "$3" "$p"; return 1; } ;;
    *) p=$(command -v -- "$w") || { __mcp_say missing "$3" "PATH:$(__mcp_gone)"; return 1; }
       case $p in /*) ;; *) return 0 ;; esac ;;
  esac
  orig=$p
  while [ -L "$p" ] && [ $n -lt 40 ]; do
    t=$(readlink -- "$p"); case $t in /*) p=$t ;; *) p=${p%/*}/$t ;; esac; n=$((n + 1))
  done
  [ -e "$p" ] || { __mcp_say broken "$3" "$p"; return 1; }
  home=${orig%/*}/../pyvenv.cfg  # a venv's interpreter needs the Python it was made from
  if [ -f "$home" ]; then
    home=$(sed -n 's/^home *= *//p' "$home" | head -n 1)
    [ -z "$home" ] || [ -d "$home" ] || { __mcp_say broken "$3" "$home"; return 1; }
  fi
  if [ "$depth" -lt 3 ] && [ -f "$p" ] && [ "$(head -c 2 -- "$p" 2>/dev/null)" = '#!' ]; then
    read -r interp arg _ < <(head -n 1 -- "$p" | cut -c3-)
    case $interp in */env) interp=$arg ;; esac
    [ -z "$interp" ] || __mcp_check "$interp" $((depth + 1)) "$3" || return 1
  fi
  [ "$depth" -gt 0 ] || __mcp_say ok "$3" "$p"
}
# Word $1 of the command, expanded with the command's own assignments: a program, or (when
# $2 is `file`) a path that must exist. A word computed by a command is not known here.
__mcp_resolve() {
  local raw=$1 kind=$2 w
  case $raw in *'$('*|*'`'*) return 0 ;; esac
  (
    for a in "${__mcp_assign[@]}"; do eval "export $a" 2>/dev/null; done
    eval "w=$raw" 2>/dev/null || exit 0
    if [ "$kind" = file ]; then
      [ -e "$w" ] || __mcp_say broken "$raw" "$w"
    elif [ -z "$w" ]; then
      __mcp_say missing "$raw" -
    else
      __mcp_check "$w" 0 "$raw"
    fi
  )
}
__mcp_is_assignment() { [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*\+?= ]]; }
__mcp_is_redirection() { [[ $1 =~ ^[0-9]*[\<\>\&] ]]; }
__mcp_in=0 __mcp_n=0
declare -A __mcp_seen=()
__mcp_step() {
  local c=$BASH_COMMAND i=0 p kind w
  [ ${#FUNCNAME[@]} -le 2 ] || return 0  # in a function or a sourced file: as written
  __mcp_n=$((__mcp_n + 1))
  [ $__mcp_n -le 2000 ] || exit 0  # a loop the skipped commands never end
  case $c in
    *'>>>>> Start Test Output'*) __mcp_in=1; return 1 ;;
    *'>>>>> End Test Output'*) exit 0 ;;
    'for '*|'case '*|'select '*|'[['*|'(('*) return 0 ;;
  esac
  __mcp_words "${c:0:4000}"
  w=("${__mcp_w[@]}")
  __mcp_assign=()
  while [ $i -lt ${#w[@]} ] && __mcp_is_assignment "${w[i]}"; do
    __mcp_assign+=("${w[i]}")
    i=$((i + 1))
  done
  [ $i -lt ${#w[@]} ] || return 0  # assignments alone set the environment the tests get
  p=${w[i]}
  case $p in
    set|trap|exit|return|logout|wait|kill|shift) return 1 ;;
    source|.) [ -z "${w[i+1]}" ] || __mcp_resolve "${w[i+1]}" file; return 0 ;;
    cd|pushd)
      [ -z "${w[i+1]}" ] || [[ ${w[i+1]} == -* ]] || __mcp_resolve "${w[i+1]}" file
      return 0 ;;
    command) [[ ${w[i+1]} != -[vV] ]] || return 0 ;;
  esac
  # Wrappers start the program after their options (env also takes assignments).
  while [[ $p =~ ^(exec|command|env|nohup|nice|timeout|stdbuf|xvfb-run|time)$ ]]; do
    i=$((i + 1))
    while [ $i -lt ${#w[@]} ]; do
      if __mcp_is_assignment "${w[i]}"; then
        __mcp_assign+=("${w[i]}")
      elif [[ ${w[i]} != -* ]] && ! __mcp_is_redirection "${w[i]}" \
          && ! { [ "$p" = timeout ] && [[ ${w[i]} =~ ^[0-9.]+[smhd]?$ ]]; }; then
        break
      fi
      i=$((i + 1))
    done
    [ $i -lt ${#w[@]} ] || return 1  # `exec >log`: nothing started
    p=${w[i]}
  done
  __mcp_is_redirection "$p" && return 1
  kind=$(type -t -- "$p" 2>/dev/null)
  case $kind in
    builtin|keyword|alias) return 0 ;;
    function)
      [ $__mcp_in = 0 ] && return 0
      case " conda pyenv workon deactivate nvm module " in *" $p "*) return 0 ;; esac
      return 1 ;;
  esac
  case $p in which|dirname|basename|realpath|readlink) return 0 ;; esac
  [ $__mcp_in = 1 ] || return 1
  local seen="$PWD|$PATH|${__mcp_assign[*]}|$p"
  [ -n "${__mcp_seen[$seen]}" ] || __mcp_resolve "$p" program
  __mcp_seen[$seen]=1
  return 1
}
exec {__mcp_fd}>&1 >/dev/null 2>&1
__mcp_tag=$1
shift
shopt -s extdebug
trap __mcp_step DEBUG
"""


def interpreter_check(task: Task, script: str | None) -> InstanceCheck | None:
    """The check of `task`'s test command, `script` being the eval script the scorer runs
    (None: nothing runs, nothing to check)."""
    if not script:
        return None
    key = hashlib.sha256(script.encode()).hexdigest()
    return InstanceCheck(
        f"interpreters:{key}", partial(check_test_command, task=task, script=script)
    )


async def check_test_command(instance: Instance, task: Task, script: str) -> None:
    """Follows `script` in a workspace of `instance` (see the module docstring).

    Raises:
        InvalidInput: a program it starts does not resolve in a workspace; the message names
            the path and what to do.
        SandboxUnavailable: the instance is gone.
    """
    tag = f"mcp-evalserver-probe-{secrets.token_hex(8)}"
    digest = hashlib.sha256(task.id.encode()).hexdigest()[:12]
    workspace = await instance.workspace(f"interpreter-check-{digest}-{secrets.token_hex(4)}")
    try:
        result = await workspace.exec(
            ["bash", "-c", f"{_FOLLOW}\n{script}", "probe", tag], timeout=_PROBE_TIMEOUT_S
        )
    finally:
        await workspace.destroy()
    if result.timed_out:
        return  # a script this cannot follow in time: no verdict, the tests will tell
    for line in result.stdout.splitlines():
        words = line.split(" ", 3)
        if len(words) == 4 and words[0] == tag and words[1] in _VERDICTS[1:]:
            _refuse(task, words[1], words[2], words[3])


def _refuse(task: Task, verdict: str, word: str, path: str) -> None:
    what = f"task {task.id}: its test command's `{word}`"
    todo = (
        "give the instance an interpreter of its own outside those directories (for example "
        "`/usr/bin/python3 -m venv .venv` inside the instance), or run the task in a docker "
        "image; until then every trajectory of this task is an error, none is graded"
    )
    # A path (broken on the way, or named and missing), else a bare name the PATH lacks.
    if verdict == "broken" or (path != "-" and not path.startswith("PATH:")):
        hidden = _hidden_by(path)
        if hidden is not None:
            raise InvalidInput(
                f"{what} resolves to {path}, which workspaces do not show ({hidden} is private "
                f"to each workspace, as are {', '.join(PRIVATE_IN_WORKSPACES)}): {todo}"
            )
        raise InvalidInput(
            f"{what} resolves to {path}, which does not exist in a workspace: {todo}"
        )
    expanded = " (it expands to nothing)" if path == "-" and "$" in word else ""
    gone = [d for d in path.removeprefix("PATH:").split(":") if d != "-"]
    hidden_gone = [d for d in gone if _hidden_by(d) is not None]
    if hidden_gone:
        hidden = _hidden_by(hidden_gone[0])
        raise InvalidInput(
            f"{what} is not found in a workspace of its instance: the PATH the command would "
            f"have names {', '.join(hidden_gone)}, which workspaces do not show ({hidden} is "
            f"private to each workspace, as are {', '.join(PRIVATE_IN_WORKSPACES)}): {todo}"
        )
    raise InvalidInput(
        f"{what} is not found in a workspace of its instance on the PATH the command would "
        f"have{expanded}: install it in the instance, or give the task an `eval_script` (or "
        "the scorer a `test_command`) that names one the instance has"
    )


def _hidden_by(path: str) -> str | None:
    """The private directory `path` lies in, if any."""
    return next((d for d in PRIVATE_IN_WORKSPACES if path == d or path.startswith(d + "/")), None)
