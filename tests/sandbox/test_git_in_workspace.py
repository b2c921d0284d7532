"""Git works in a workspace as in a developer's checkout: `git commit` and `git stash` need an
identity, which a sandbox cannot guess (no e-mail domain). Every backend gives one, and it
leaves nothing in the workspace's files, so nothing of it reaches the diff."""

from __future__ import annotations

import anyio
import pytest

from .conftest import BackendUnderTest

pytestmark = pytest.mark.anyio

# The base is committed with an identity given per command: the repository has none.
NO_IDENTITY = (
    "git init -q . && printf 'a\\n' > a.txt && git add -A && "
    "git -c user.email=base@t -c user.name=base commit -qm base",
)
# A local instance sees the host's files, its ~/.gitconfig included: not what may make it work.
NO_HOST_CONFIG = "export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1; "


async def test_git_commit_and_stash_work_and_leave_nothing_in_the_diff(
    backend: BackendUnderTest,
) -> None:
    work = (
        "printf 'b\\n' >> a.txt && git commit -qam work && printf 'c\\n' >> a.txt && "
        "git stash -q && git stash pop -q && git log -1 --format=%ae"
    )
    own = (
        "printf 'd\\n' >> a.txt && git -c user.email=me@t commit -qam mine && "
        "git log -1 --format=%ae"
    )
    with anyio.fail_after(120):
        instance = await backend.backend.instance(backend.spec(setup=NO_IDENTITY))
        try:
            async with await instance.workspace("git") as ws:
                committed = await ws.exec(NO_HOST_CONFIG + work)
                mine = await ws.exec(NO_HOST_CONFIG + own)
                patch = await ws.diff()
                status = await ws.exec("git status --porcelain --ignored --untracked-files=all")
        finally:
            await instance.aclose()
    assert (committed.exit_code, committed.stdout) == (0, "agent@mcp-evalserver.invalid\n"), (
        committed.stderr
    )
    # The repository's own identity (or the command's) wins over the workspace's.
    assert (mine.exit_code, mine.stdout) == (0, "me@t\n"), mine.stderr
    assert patch.count("diff --git") == 1
    assert "diff --git a/a.txt b/a.txt" in patch
    assert "+b\n+c\n+d\n" in patch
    assert status.stdout == ""  # committed; no file appeared for the identity
