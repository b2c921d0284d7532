"""The MCP server: tools over the campaign engine, on stdio or streamable HTTP.

`mcp_app` is the only package that imports `mcp`; `service` and `trajectories` hold the logic
the tools call; `http` serves the app with uvicorn behind a bearer token.
"""
