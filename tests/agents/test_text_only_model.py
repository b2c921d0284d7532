"""The plainest eval: a model that only answers in text (no tool calling at all) is graded on
the answers example at its true accuracy, one request per trajectory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp_evalserver.spec.agents import OpenAIAgentConfig
from mcp_evalserver.spec.campaign import load_spec
from tests.agents.fake_openai import Failure, FakeOpenAI, Reply, Response, serving
from tests.agents.helpers import KEY, KEY_ENV, openai_agent, records, run

pytestmark = pytest.mark.anyio

EXAMPLE = Path(__file__).parents[2] / "examples" / "answers-oracle.json"

#: What the model replies to each of the example's prompts: right for four tasks of six.
REPLIES = {
    "What is 17 + 25?": "42",
    "What is 12 * 12?": "144",
    "capital of France?": "Paris",
    "capital of Japan?": "Kyoto",
    "metres are in 3.5 km?": "3500",
    "February 2028": "28",
}


def text_only_model(body: dict[str, Any]) -> Response:
    """Like a local server without a tool-call parser: a request offering tools is refused."""
    if "tools" in body:
        return Failure(400, message='"auto" tool choice requires --enable-auto-tool-choice')
    prompt = body["messages"][-1]["content"]
    (reply,) = [text for key, text in REPLIES.items() if key in prompt]
    return Reply(content=reply)


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


async def test_a_text_only_model_scores_the_answers_example_at_its_true_accuracy(
    tmp_path: Path,
) -> None:
    example = load_spec(EXAMPLE)
    with serving(FakeOpenAI([], then=text_only_model)) as fake, anyio.fail_after(60):
        agent = OpenAIAgentConfig.model_validate(openai_agent(fake.url))
        spec = example.model_copy(update={"agent": agent})
        state, directory = await run(tmp_path / "state", spec)

    trajectories = list(state.trajectories.values())
    assert len(trajectories) == 6 * 3
    resolved = sum(t.outcome == "resolved" for t in trajectories)
    assert resolved / len(trajectories) == 4 / 6
    assert {t.outcome for t in trajectories} == {"resolved", "failed"}
    assert fake.requests == len(trajectories), "one request per trajectory"
    assert all("tools" not in seen.body for seen in fake.seen)
    usage = [r["usage"]["requests"] for r in records(directory, "generated")]
    assert usage == [1] * len(trajectories)
