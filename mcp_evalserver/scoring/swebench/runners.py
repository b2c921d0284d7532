"""Which test runner an eval script's test section starts, read from its text.

Strict mode grades from the JUnit report its pytest plugin sends from the pytest process the
test section starts (`strict.py`); a section that runs Django's `runtests.py`, SymPy's
`bin/test`, `tox` (which does not pass the plugin's environment to the pytest it starts) or
unittest gives no report, and every trajectory would be `tests_errored`. So a campaign asks
here, before it starts, whether strict mode can grade the task at all.
"""

from __future__ import annotations

import shlex

from mcp_evalserver.scoring.swebench.grading import END_TEST_OUTPUT, START_TEST_OUTPUT

#: Programs that only start the next word (after their options and, for env, assignments).
_WRAPPERS = frozenset({"env", "exec", "command", "nohup", "nice", "timeout", "stdbuf", "time"})
#: Shell words that start no test runner.
_NOT_RUNNERS = frozenset(
    {":", "cd", "pushd", "popd", "source", ".", "export", "unset", "set", "echo", "printf",
     "true", "false", "conda", "git", "test", "[", "shift", "trap", "exit", "local"}
)  # fmt: skip
_SEPARATORS = frozenset({"&&", "||", ";", "|", "(", ")", "&", "|&"})


def section_lines(script: str) -> list[str]:
    """The lines between the first start marker and the end marker after it (the whole script
    when it has no start marker)."""
    lines = script.split("\n")
    starts = [n for n, line in enumerate(lines) if START_TEST_OUTPUT in line]
    if not starts:
        return lines
    end = next(
        (n for n, line in enumerate(lines) if n > starts[0] and END_TEST_OUTPUT in line),
        len(lines),
    )
    return lines[starts[0] + 1 : end]


def section_runners(script: str) -> list[str]:
    """The programs the test section starts (`pytest` for pytest however it is started:
    `pytest`, `py.test`, `python -m pytest`, `"$PY" -m pytest`), in order."""
    runners: list[str] = []
    for line in section_lines(script):
        if line.lstrip().startswith("#"):
            continue
        for words in _commands(line):
            runner = _runner(words)
            if runner is not None:
                runners.append(runner)
    return runners


def _commands(line: str) -> list[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token in _SEPARATORS:
                commands.append([])
            else:
                commands[-1].append(token)
    except ValueError:  # an unclosed quote: not a line this can read
        return []
    return [c for c in commands if c]


def _runner(words: list[str]) -> str | None:
    index = 0
    while index < len(words):
        word = words[index]
        if "=" in word.split("/")[0] and not word.startswith("-"):
            index += 1  # VAR=value
        elif word in _WRAPPERS:
            index += 1
            while index < len(words) and (
                words[index].startswith("-") or words[index][:1].isdigit()
            ):
                index += 1
        else:
            break
    if index >= len(words):
        return None
    if words[index] in _NOT_RUNNERS:  # a builtin or a tool, unless named by a path
        return None
    program = words[index].rsplit("/", 1)[-1]
    if program in ("pytest", "py.test"):
        return "pytest"
    rest = words[index + 1 :]
    if "-m" in rest and rest.index("-m") + 1 < len(rest):
        module = rest[rest.index("-m") + 1]
        return "pytest" if module in ("pytest", "py.test") else f"{program} -m {module}"
    return words[index]
