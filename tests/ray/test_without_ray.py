"""Choosing Ray where it is not installed (no `ray` extra): a clear error before anything runs,
that says how to install it, and nothing recorded lost or changed.

Each check runs in a child Python where `import ray` fails, as it does without the extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.engine.ledger import LEDGER_FILE
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec
from tests.server.helpers import answer_spec

pytestmark = pytest.mark.anyio

HINT = "pip install 'mcp-evalserver[ray]'"
WITHOUT_RAY = "import sys; sys.modules['ray'] = None\n"


def _without_ray(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY + program, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    program = "from mcp_evalserver.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
    return _without_ray(program, *args)


def _ray_spec() -> dict[str, object]:
    return answer_spec(2, sandbox={"type": "ray", "address": "auto"})


def test_the_backend_itself_says_how_to_install_ray() -> None:
    program = (
        "from mcp_evalserver.sandbox.ray import connect\n"
        "from mcp_evalserver.errors import InvalidInput\n"
        "try:\n"
        "    connect('auto')\n"
        "except InvalidInput as e:\n"
        "    print(e)\n"
    )
    result = _without_ray(program)
    assert HINT in result.stdout, result.stderr


def test_running_a_campaign_placed_on_ray_is_refused_before_it_is_recorded(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(_ray_spec()))
    state = tmp_path / "state"
    result = _cli("--state-dir", str(state), "run", str(spec), "--no-progress")
    assert result.returncode == 2, result.stderr
    assert HINT in result.stderr
    assert not list(state.glob("*/" + LEDGER_FILE)), "no campaign was recorded"


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["run", "SPEC", "--no-progress"], id="run"),
        pytest.param(["--stdio"], id="stdio-server"),
        pytest.param(["--http", "--port", "0"], id="http-server"),
    ],
)
def test_the_ray_option_without_ray_is_refused_before_anything_runs(
    command: list[str], tmp_path: Path
) -> None:
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(answer_spec(2)))
    state = tmp_path / "state"
    args = [str(spec) if arg == "SPEC" else arg for arg in command]
    result = _cli("--state-dir", str(state), "--ray", "auto", *args)
    assert result.returncode == 2, result.stderr
    assert HINT in result.stderr
    assert not list(state.glob("*/" + LEDGER_FILE))


async def test_resuming_a_ray_campaign_without_ray_changes_nothing_recorded(
    tmp_path: Path,
) -> None:
    store = CampaignStore(tmp_path)
    # Created where Ray is installed (this process); resumed where it is not.
    campaign_id = await store.create(CampaignSpec.model_validate(_ray_spec()))
    ledger = store.directory(campaign_id) / LEDGER_FILE
    before = ledger.read_bytes()
    result = await anyio.to_thread.run_sync(
        _cli, "--state-dir", str(tmp_path), "resume", campaign_id, "--no-progress"
    )
    assert result.returncode == 2, result.stderr
    assert HINT in result.stderr
    assert ledger.read_bytes() == before


def test_the_start_campaign_tool_answers_a_tool_error_with_the_hint(tmp_path: Path) -> None:
    program = (
        "import anyio, json\n"
        "from pathlib import Path\n"
        "from mcp import Client\n"
        "from mcp_evalserver.server.mcp_app import create_server\n"
        "async def main() -> None:\n"
        "    async with Client(create_server(Path(sys.argv[1]))) as client:\n"
        "        spec = json.loads(sys.argv[2])\n"
        "        result = await client.call_tool('start_campaign', {'spec': spec})\n"
        "        print(json.dumps({'is_error': result.is_error,\n"
        "                          'text': ' '.join(c.text for c in result.content)}))\n"
        "anyio.run(main)\n"
    )
    state = tmp_path / "state"
    result = _without_ray(program, str(state), json.dumps(_ray_spec()))
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["is_error"] is True
    assert HINT in answer["text"]
    assert not list(state.glob("*/" + LEDGER_FILE))
