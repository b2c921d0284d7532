"""A client that claims a trajectory, leaves a note, then hangs in a call until killed.

Run as `python -m tests.server.killed_client URL TOKEN CAMPAIGN` with `$SLEEP_SECONDS` set:
prints `claimed <id>` and then `calling`, right before a `sleep $SLEEP_SECONDS` that it never
sees the end of (the caller picks a duration no other process sleeps, to find that command
running: not an argument of this process, which would carry it too).
"""

from __future__ import annotations

import os
import sys

import anyio

from testsupport.servers import call, http_client


async def main(url: str, token: str, campaign_id: str) -> None:
    seconds = os.environ["SLEEP_SECONDS"]
    async with http_client(url, token) as client:
        claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=60)
        claim_id = claim["claim_id"]
        await call(client, "write_file", claim_id=claim_id, path="note.txt", content="mine")
        print(f"claimed {claim['trajectory_id']}", flush=True)
        print("calling", flush=True)
        await call(
            client, "sandbox_exec", claim_id=claim_id, command=f"sleep {seconds}", timeout_s=900
        )


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3])
