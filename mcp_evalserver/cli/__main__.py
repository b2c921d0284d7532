"""`python -m mcp_evalserver.cli`: the same command line as `mcp-evalserver`."""

from mcp_evalserver.cli.main import main

raise SystemExit(main())
