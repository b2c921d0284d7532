"""Deterministic agents and scorers for engine tests (test fixtures, not product features).

`agent(options)` answers task `tN` with `str(N * N)`, except tasks whose N is a multiple of 3,
which it answers wrongly: a campaign's results are then known in advance. With a `control_dir`:

- a file `block-generate-<trajectory>` there makes the agent announce `generating <trajectory>`
  on the FIFO `events` and then hang (until the process is killed or the test cancels);
- every completed generation appends `<trajectory>` to `generated.log`.

`scorer(options)` grades like the exact scorer, except tasks named in `pass_rates` (task id ->
chance): those resolve by a seeded draw per trajectory id (`seed`), a flaky grader whose verdicts
are the same however often, and in whatever order, they are asked for.
`block-score-<trajectory>` makes it announce
`scoring <trajectory>` and hang. With `score_delay_s` each scoring takes that long, and with a
`control_dir` each one appends `+` when it starts and `-` when it ends to `scoring.log` (the
most `+` outstanding is how many scorings ran at once).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.submission import Submission


def seeded_draw(seed: int, trajectory_id: str) -> float:
    """A number in [0, 1) fixed by the seed and the trajectory id."""
    digest = hashlib.sha256(f"{seed}:{trajectory_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def expected_answer(task_id: str) -> str:
    number = int(task_id.removeprefix("t"))
    return str(number * number)


def scripted_answer(task_id: str) -> str:
    number = int(task_id.removeprefix("t"))
    return "wrong" if number % 3 == 0 else str(number * number)


async def _announce_and_hang(control_dir: Path, event: str) -> None:
    def announce() -> None:
        # Opening a FIFO for writing blocks until the test opens it for reading: the test
        # learns of the event without polling.
        with open(control_dir / "events", "w") as fifo:
            fifo.write(event + "\n")

    await anyio.to_thread.run_sync(announce)
    await anyio.sleep_forever()


class ScriptedAgent(Agent):
    def __init__(self, options: dict[str, Any]) -> None:
        self.delay_s = float(options.get("delay_s", 0.0))
        control = options.get("control_dir")
        self.control_dir = Path(control) if control else None

    async def generate(self, context: TrajectoryContext) -> Submission:
        if (
            self.control_dir
            and (self.control_dir / f"block-generate-{context.trajectory_id}").exists()
        ):
            await _announce_and_hang(self.control_dir, f"generating {context.trajectory_id}")
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        if self.control_dir:
            fd = os.open(self.control_dir / "generated.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{context.trajectory_id}\n".encode())
            os.close(fd)
        return Submission(answer=scripted_answer(context.task.id))


def _append(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, text.encode())
    os.close(fd)


class ScriptedScorer(Scorer):
    def __init__(self, options: dict[str, Any]) -> None:
        control = options.get("control_dir")
        self.control_dir = Path(control) if control else None
        self.delay_s = float(options.get("score_delay_s", 0.0))
        self.pass_rates = {str(k): float(v) for k, v in options.get("pass_rates", {}).items()}
        self.seed = int(options.get("seed", 0))

    async def score(self, context: ScoringContext) -> ScoreResult:
        if self.control_dir:
            _append(self.control_dir / "scoring.log", "+")
        try:
            return await self._score(context)
        finally:
            if self.control_dir:
                _append(self.control_dir / "scoring.log", "-")

    async def _score(self, context: ScoringContext) -> ScoreResult:
        if (
            self.control_dir
            and (self.control_dir / f"block-score-{context.trajectory_id}").exists()
        ):
            await _announce_and_hang(self.control_dir, f"scoring {context.trajectory_id}")
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        if (chance := self.pass_rates.get(context.task.id)) is not None:
            resolved = seeded_draw(self.seed, context.trajectory_id) < chance
        else:
            resolved = context.submission.answer == expected_answer(context.task.id)
        return ScoreResult(
            resolved=resolved, score=float(resolved), status="resolved" if resolved else "failed"
        )


def agent(options: dict[str, Any]) -> Agent:
    return ScriptedAgent(options)


def scorer(options: dict[str, Any]) -> Scorer:
    return ScriptedScorer(options)
