"""The shared vocabulary: campaign specs, tasks, agent and scorer configs, submissions.

It imports nothing of ours but `errors`: every other layer may import it."""
