"""The dashboard: server-rendered pages over the campaigns' ledgers, and the static report."""
