"""Where a workspace's file operations resolve from (in_view.py): a dirfd of its view, and how
paths are resolved relative to it."""

from __future__ import annotations

import errno
import os

from .linux import RESOLVE_NO_MAGICLINKS, RESOLVE_NO_XDEV, openat2

#: Errors that mean "not here": the forked child answers instead (see in_view.py).
NOT_HERE = frozenset({errno.EXDEV, errno.ELOOP, errno.ENOSYS, errno.EAGAIN, errno.ENXIO,
                      errno.EPERM, errno.EOPNOTSUPP})  # fmt: skip
OPEN = os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK


class Elsewhere(Exception):
    """This operation is for the forked child (files.py): see in_view.py."""


class ViewDir:
    """The dirfd paths of one workspace resolve from, while its holder lives."""

    def __init__(self, fd: int, holder_pid: int, prefix: str, resolve: int) -> None:
        self.fd, self.holder_pid = fd, holder_pid
        self.prefix, self.resolve = prefix, resolve | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV

    def relative(self, path: str, workdir: str) -> str:
        """`path` (absolute in the view, or relative to `workdir`) relative to this dirfd.

        Raises:
            Elsewhere: it lies outside the directory this dirfd is.
        """
        full = path if path.startswith("/") else f"{workdir.rstrip('/')}/{path}"
        if self.prefix == "/":
            return full.lstrip("/") or "."
        if full == self.prefix:
            return "."
        if not full.startswith(self.prefix + "/"):
            raise Elsewhere
        return full[len(self.prefix) + 1 :] or "."

    def open(self, relative: str, flags: int, mode: int = 0) -> int:
        """Raises: Elsewhere (see NOT_HERE), OSError as open(2)."""
        try:
            # openat2 refuses O_PATH with any flag but O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW.
            extra = os.O_CLOEXEC if flags & os.O_PATH else OPEN
            return openat2(self.fd, relative, flags | extra, self.resolve, mode)
        except OSError as e:
            if e.errno in NOT_HERE:
                raise Elsewhere from e
            raise
