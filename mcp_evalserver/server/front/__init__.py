"""`--http --workers N`: one port served by N processes (workers.py), one of which drives the
campaigns while it holds the lease (lease.py, service.py); the others reach it over a unix
socket (rpc.py) and reach workspaces directly. Handshake-era sessions stay with the worker that
opened them (sessions.py)."""
