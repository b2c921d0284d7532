"""mcp-evalserver: crash-safe, isolated evaluation campaigns for AI agents, driven over MCP."""

__version__ = "0.1.0"
