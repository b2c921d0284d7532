"""mini-swe-agent (the optional `minisweagent` extra) on our workspaces: the sync bridge
(`environment`) and the `mini-swe-agent` agent type (`agent`, imported by the factory)."""
