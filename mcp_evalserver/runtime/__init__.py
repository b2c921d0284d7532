"""What agents and scorers run on: a trajectory's sandbox, the shared limits, model
endpoint calls, artifacts and plugins. Below agents and scoring, above the sandbox backends."""
