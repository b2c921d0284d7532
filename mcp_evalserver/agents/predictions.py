"""The `predictions` agent: patches from a SWE-bench predictions file, for evaluation only.

The file is read once, on the first trajectory (a large file must not block the event loop, so
it is read in a thread). `gold` submits each task's own `patch`, as SWE-bench's `gold` does. A
task with no prediction is that trajectory's `error`; an empty patch is an empty submission,
which the scorer counts without running anything.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.errors import NotFound
from mcp_evalserver.spec.agents import PredictionsAgentConfig
from mcp_evalserver.spec.predictions import GOLD, Prediction, load_predictions
from mcp_evalserver.spec.submission import Submission


class PredictionsAgent(Agent):
    """Hands in the prediction whose `instance_id` is the task's id."""

    def __init__(self, config: PredictionsAgentConfig) -> None:
        self.config = config
        self._predictions: dict[str, Prediction] | None = None
        self._lock = anyio.Lock()

    async def _load(self) -> dict[str, Prediction]:
        async with self._lock:
            if self._predictions is None:
                loaded = await anyio.to_thread.run_sync(load_predictions, Path(self.config.path))
                wanted = self.config.model_name
                self._predictions = {
                    p.instance_id: p
                    for p in loaded
                    if wanted is None or p.model_name_or_path == wanted
                }
            return self._predictions

    async def generate(self, context: TrajectoryContext) -> Submission:
        """Returns the task's predicted patch (empty if the prediction is empty).

        Raises:
            NotFound: the file does not exist, or holds no prediction for this task.
            InvalidInput: the file is not a valid predictions file.
        """
        task = context.task
        if self.config.path == GOLD:
            prediction = Prediction(
                instance_id=task.id, model_name_or_path=GOLD, model_patch=task.patch
            )
        else:
            predictions = await self._load()
            found = predictions.get(task.id)
            if found is None:
                model = f" of model {self.config.model_name!r}" if self.config.model_name else ""
                raise NotFound(
                    f"no prediction{model} for task {task.id!r} in {self.config.path} "
                    f"({len(predictions)} predictions there; instance_id must equal the task id)"
                )
            prediction = found
        provenance = {
            "event": "prediction",
            "source": self.config.path,
            "instance_id": prediction.instance_id,
            "model_name_or_path": prediction.model_name_or_path,
            "empty": prediction.is_empty,
        }
        return Submission(patch=prediction.model_patch or None, transcript=[provenance])
