"""A local backend started from a process whose controlling terminal is a pty: the operator's.

Run by tests/sandbox/test_attacks.py as `python terminal_attack.py FD INSTANCE_DIR`, with the
pty's slave on FD. It takes that pty as its controlling terminal (as a shell's child would
have it), then a trajectory tries to write onto it and push keystrokes into it, through a
command and through the `write_file` tool. Prints what each attempt came to, as JSON.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import termios

import anyio

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.sandbox.local import LocalBackend

# Echo onto /dev/tty, then TIOCSTI every byte of a marker into its input (echoed back too).
ATTACK = (
    "echo PWNED-BY-ECHO > /dev/tty; "
    "python3 -c \"import fcntl; f = open('/dev/tty', 'wb'); "
    "[fcntl.ioctl(f, 0x5412, bytes([c])) for c in b'PWNED-BY-STI']\""
)


async def attack(path: str) -> dict[str, str]:
    outcome: dict[str, str] = {}
    async with LocalBackend() as backend:
        instance = await backend.instance(InstanceSpec(path=path))
        async with instance, await instance.workspace("tty") as ws:
            result = await ws.exec(ATTACK)
            outcome["exec"] = f"exit {result.exit_code}: {result.stderr.strip()}"
            try:
                await ws.write_file("/dev/tty", "PWNED-BY-WRITE-FILE\n")
                outcome["write_file"] = "written"
            except errors.EvalServerError as e:
                outcome["write_file"] = f"{type(e).__name__}: {e}"
    return outcome


def main() -> None:
    fd, path = int(sys.argv[1]), sys.argv[2]
    os.setsid()
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
    os.close(fd)
    print(json.dumps(anyio.run(attack, path)))


if __name__ == "__main__":
    main()
