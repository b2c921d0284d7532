"""A CLI agent on a Ray node: the real Claude Code in a workspace on a worker node of a
multi-node cluster on loopback, its model bridge served by the driver and reached through the
node's relay (a unix socket in the node's bridges directory relaying to the bridge's TCP port)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.spec.campaign import RaySandboxConfig
from tests.agents.helpers import artifact_text, records, run, spec
from tests.agents.test_cli_agents import KEY, KEY_ENV, _agent, _tasks, bridged_calls, claude_fix
from testsupport.fake_providers import FakeAnthropic, serving
from testsupport.ray_cluster import LoopbackCluster

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.root, pytest.mark.slow]


async def test_claude_code_on_a_ray_node_fixes_a_bug_through_the_nodes_relay_to_the_bridge(
    ray_cluster: LoopbackCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    tasks = _tasks(tmp_path)[:1]
    with serving(FakeAnthropic(claude_fix(tmp_path))) as fake, anyio.fail_after(400):
        campaign = spec(tasks, _agent("claude-code", fake.url), scorer={"type": "tests"})
        on_ray = RaySandboxConfig(address=ray_cluster.address)
        state, directory = await run(
            tmp_path / "state", campaign.model_copy(update={"sandbox": on_ray})
        )
    assert state.trajectories["add@0"].outcome == "resolved", records(
        directory, "generation_failed"
    )
    # It ran on a worker node, and every call the provider served went through the bridge.
    workers = {ray_cluster.node_id(node) for node in ray_cluster.workers}
    (generated,) = records(directory, "generated")
    assert generated["node"] in workers
    usage = records(directory, "model_usage")
    assert sum(r["input_tokens"] for r in usage) == fake.input_tokens
    transcript = json.loads(artifact_text(directory, generated["submission"]["transcript"]))
    assert [c["name"] for c in bridged_calls(transcript)] == ["Bash", "Read", "Edit", "Bash"]
    # Through the node's relay to the bridge's TCP port, not the driver's own socket (on this
    # one machine, the node could have reached that too).
    calls = [e for e in transcript if e.get("event") == "model_call"]
    assert {e["via"] for e in calls} == {"node relay"}
    assert KEY not in json.dumps(transcript)
