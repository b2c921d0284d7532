"""Sandboxes: Backend -> Instance -> Workspace, driven through an in-instance supervisor."""
