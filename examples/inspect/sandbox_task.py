"""An Inspect task whose solver works in the sandbox and whose scorer checks what it left.

    inspect eval examples/inspect/sandbox_task.py --epochs 2

runs it in `evalserver` sandboxes as evalserver.yaml (beside this file) describes; `-T
sandbox=other.yaml` names another config, `-T sandbox=local` uses Inspect's own local sandbox
(bench/inspect_sandbox.py compares the two). The model is Inspect's mock model: no API key needed.
"""

from __future__ import annotations

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessage, GenerateConfig, ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox as current_sandbox

SAMPLES = 3


def mock_answer(
    input: list[ChatMessage], tools: object, tool_choice: object, config: GenerateConfig
) -> ModelOutput:
    """Inspect's mockllm answer, with its usage given: mockllm would otherwise count tokens
    with tiktoken, which downloads its encoding from the network on first use."""
    output = ModelOutput.from_content(model="mockllm", content="done")
    output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    return output


@solver
def work_in_the_sandbox():  # type: ignore[no-untyped-def]
    """Asks the model, then runs commands and writes files as an agent's tools would."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state = await generate(state)
        box = current_sandbox()
        tag = f"sample {state.sample_id} epoch {state.epoch}"
        await box.write_file("answer.txt", tag + "\n")
        shout = await box.exec(["sh", "-c", "tr a-z A-Z < answer.txt > shout.txt && ls"])
        assert shout.success, shout.stderr
        await box.exec(["sh", "-c", f"touch marker-{state.sample_id}-{state.epoch}"])
        return state

    return solve


@scorer(metrics=[accuracy()])
def left_the_right_files():  # type: ignore[no-untyped-def]
    """Correct when the sample's own shouted answer is there and no other sample's marker."""

    async def score(state: TaskState, target: Target) -> Score:
        box = current_sandbox()
        shout = await box.read_file("shout.txt")
        markers = (await box.exec(["sh", "-c", "ls marker-* 2>/dev/null || true"])).stdout.split()
        expected = f"SAMPLE {state.sample_id} EPOCH {state.epoch}\n"
        own = f"marker-{state.sample_id}-{state.epoch}"
        ok = shout == expected and markers == [own]
        return Score(value=CORRECT if ok else INCORRECT, explanation=f"{shout!r} {markers}")

    return score


@task
def sandbox_task(sandbox: str = "evalserver.yaml", samples: int = SAMPLES) -> Task:
    return Task(
        dataset=[Sample(input=f"Do task {i}.", target="done", id=i) for i in range(1, samples + 1)],
        solver=work_in_the_sandbox(),
        scorer=left_the_right_files(),
        sandbox="local" if sandbox == "local" else ("evalserver", sandbox),
        model=get_model("mockllm/model", custom_outputs=mock_answer),
    )
