"""The real OpenCode, run once offline against the scripted fake provider: a store to read.

Run as `unshare -n python -m tests.agents.opencode_offline LAUNCHER ROOT` (a network namespace
of its own: loopback only, as in a workspace). Brings loopback up, serves `FakeAnthropic`
driving OpenCode through the `add` fix (tests/agents/test_cli_agents.py), and runs
`LAUNCHER run` in `ROOT/add` with its home at `ROOT/home`; exits with OpenCode's status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcp_evalserver.agents.cli.programs import PROGRAMS
from tests.agents.test_cli_agents import CLAUDE_MODEL, _tasks, opencode_fix
from testsupport.fake_providers import FakeAnthropic, serving


def main(launcher: str, root: Path) -> int:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    _tasks(root)
    home = root / "home"
    home.mkdir()
    program = PROGRAMS["opencode"]
    with serving(FakeAnthropic(opencode_fix(root))) as fake:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8",
               "TERM": "dumb", **program.env("offline-token")}  # fmt: skip
        # The provider is the fake itself here, not a bridge.
        config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
        config["provider"]["anthropic"]["options"]["baseURL"] = f"{fake.url}/v1"
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(config)
        prompt = "TASK=add: f is wrong; make test_calc.py pass."
        argv = [launcher, *program.mode, program.model_flag, program.model_prefix + CLAUDE_MODEL]
        done = subprocess.run([*argv, prompt], cwd=root / "add", env=env, timeout=300)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], Path(sys.argv[2])))
