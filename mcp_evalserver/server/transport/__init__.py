"""How clients reach the server: streamable HTTP (uvicorn, bearer tokens) and stdio pipes."""
