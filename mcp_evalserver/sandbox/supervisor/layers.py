"""Stacked overlay layers of the supervisor's workspaces: checkpoint, restore, fork, squash.

Stdlib only, Python >= 3.8: shipped with the rest of the supervisor into every instance.

Each workspace lives on an *area*: a directory of the store (a tmpfs of `disk_bytes` when the
workspace has a disk cap) holding its scratch directories, its current upper layer and the
layers it froze. A checkpoint freezes the current upper where it is (nothing is copied): it
becomes the newest read-only lower of the workspace's *stack* and writes go to a fresh upper.
A fork is a new workspace (on an area of its own) whose stack is a checkpoint's. Layers are
reference-counted by the stacks that hold them, live ones and checkpoints; an area outlives its
workspace while another workspace still holds one of its layers.

Overlayfs stacks a bounded number of lowers and its options must fit one page, so a stack
deeper than `MAX_DEPTH` is squashed: its oldest layers are merged into one new layer (a copy of
their data with whiteouts and opaque directories kept, renamed directories materialised).
Older checkpoints keep their own (shallower) stacks, so they stay restorable.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import os
import shutil
import stat
import tarfile
import tempfile
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the module must import on Python 3.8
    from collections.abc import Callable, Iterator

    Stack = tuple["Layer", ...]  # newest first, as overlayfs' lowerdir lists them

MAX_DEPTH = 32  # frozen layers under a workspace's upper before the oldest are squashed
OPAQUE, REDIRECT = "trusted.overlay.opaque", "trusted.overlay.redirect"
OVERLAY_XATTRS = "trusted.overlay."
# A layer's archive keeps overlayfs' own marks that say what the layer hides (an opaque
# directory, a renamed one) and every user-visible xattr, never the kernel's bookkeeping
# (origin, impure: file handles of this instance's lower, wrong on another).
KEPT_OVERLAY_XATTRS = (OPAQUE, REDIRECT)
XATTR_PAX = "MCPEVAL.xattr."  # pax header prefix; the value is the xattr's bytes, base64
MNT_DETACH, MS_NOSUID, MS_NODEV, MS_RDONLY = 2, 2, 4, 1

_libc = ctypes.CDLL(None, use_errno=True)


class LayerError(Exception):
    """A request the layers cannot honour; `kind` names a class of mcp_evalserver.errors."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    if _libc.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    _libc.umount2(target.encode(), MNT_DETACH)


class Area:
    """A workspace's own directory in the store; `mounted` when it is a tmpfs (its disk cap)."""

    def __init__(self, path: str, mounted: bool) -> None:
        self.path, self.mounted = path, mounted
        self.live = True  # its workspace still exists
        self.layers: set[str] = set()  # directories of frozen layers here that a stack holds
        self.serial = 0

    def new_dir(self, prefix: str) -> str:
        self.serial += 1
        path = os.path.join(self.path, f"{prefix}{self.serial}")
        os.mkdir(path, 0o755)
        return path


class Layer:
    """A frozen upper: read-only from now on, shared by every stack that holds it."""

    __slots__ = ("area", "dir", "refs")

    def __init__(self, directory: str, area: Area) -> None:
        self.dir, self.area, self.refs = directory, area, 0


class LayerStore:
    """Every area and layer of one supervisor; the only place that frees them."""

    def __init__(self, store: str, base: str) -> None:
        self.store, self.base = store, base  # base: the instance's frozen tree, the last lower
        self.areas = 0
        self.checkpoints = 0
        self.max_depth = MAX_DEPTH

    def open_area(self, disk_bytes: int | None) -> Area:
        """A fresh area; a tmpfs of `disk_bytes` when given (the workspace's disk cap)."""
        self.areas += 1
        path = os.path.join(self.store, f".a{self.areas}")
        os.makedirs(path, mode=0o700)
        if disk_bytes:
            opts = f"size={int(disk_bytes)},mode=0700"
            _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, opts)
        return Area(path, bool(disk_bytes))

    def new_checkpoint_id(self) -> str:
        self.checkpoints += 1
        return f"cp{self.checkpoints}"

    def hold(self, stack: Stack) -> None:
        for layer in stack:
            layer.refs += 1

    def release(self, stack: Stack) -> None:
        for layer in stack:
            layer.refs -= 1
            if layer.refs == 0:
                shutil.rmtree(layer.dir, ignore_errors=True)
                layer.area.layers.discard(layer.dir)
                self.maybe_close(layer.area)

    def freeze(self, directory: str, area: Area) -> Layer:
        area.layers.add(directory)
        return Layer(directory, area)

    def retire(self, area: Area) -> None:
        """Its workspace is gone: free everything in it but the layers others still hold."""
        area.live = False
        if not area.layers:
            self.maybe_close(area)
            return
        with contextlib.suppress(OSError):
            for entry in os.listdir(area.path):
                path = os.path.join(area.path, entry)
                if path not in area.layers:
                    shutil.rmtree(path, ignore_errors=True)

    def maybe_close(self, area: Area) -> None:
        if area.live or area.layers:
            return
        # Empty it first: holders made meanwhile keep copies of this mount in their own
        # namespaces, and only emptying it frees what it holds there too.
        with contextlib.suppress(OSError):
            for entry in os.listdir(area.path):
                shutil.rmtree(os.path.join(area.path, entry), ignore_errors=True)
        if area.mounted:
            _umount(area.path)
        shutil.rmtree(area.path, ignore_errors=True)

    def squash(self, stack: Stack, area: Area) -> Stack:
        """`stack` with its oldest layers merged into one new layer on `area`.

        Keeps the newest `max_depth // 2` layers as they are, so squashing is rare.

        Raises:
            LayerError: LimitExceeded when the merged copy does not fit the area.
        """
        keep = max(1, self.max_depth // 2)
        old = list(reversed(stack[keep:]))  # oldest first, the order they apply in
        merged_dir = area.new_dir("s")
        view: list[str] = []  # the squashed layers over the base, mounted only if needed

        def merged_view() -> str:
            if not view:
                target = tempfile.mkdtemp(prefix=".m", dir=self.store)
                lowers = ":".join([layer.dir for layer in reversed(old)] + [self.base])
                _mount("overlay", target, "overlay", MS_RDONLY, "lowerdir=" + lowers)
                view.append(target)
            return view[0]

        try:
            for layer in old:
                _apply_layer(layer.dir, merged_dir, "", merged_view)
        except OSError as e:
            shutil.rmtree(merged_dir, ignore_errors=True)
            if e.errno == errno.ENOSPC:
                raise LayerError("LimitExceeded", "no room left to squash old checkpoints") from e
            raise
        finally:
            for target in view:
                _umount(target)
                with contextlib.suppress(OSError):
                    os.rmdir(target)
        squashed = self.freeze(merged_dir, area)
        return (*stack[:keep], squashed)


class WorkspaceLayers:
    """One workspace's stack, its current upper and the checkpoints it may restore."""

    def __init__(self, store: LayerStore, area: Area, stack: Stack = ()) -> None:
        self.store, self.area = store, area
        self.stack: Stack = stack
        store.hold(stack)
        self.checkpoints: dict[str, Stack] = {}
        self.upper, self.work = self._fresh_upper()

    def _fresh_upper(self) -> tuple[str, str]:
        upper, work = self.area.new_dir("u"), self.area.new_dir("w")
        # The upper's own directory gives the view's top its mode and owner: the base's.
        st = os.stat(self.store.base)
        os.chown(upper, st.st_uid, st.st_gid)
        os.chmod(upper, stat.S_IMODE(st.st_mode))
        return upper, work

    def overlay(self) -> dict[str, object]:
        """What a holder needs to mount this workspace's overlay (its base is the holder's)."""
        return {"lowers": [layer.dir for layer in self.stack], "upper": self.upper,
                "work": self.work}  # fmt: skip

    def mounted_areas(self) -> list[str]:
        """The areas that are mounts (tmpfs) under every stack it has or may restore, its own
        first: what its holder's mount namespace must show. Fixed from its creation on: its
        own layers lie on its own area, the rest came with the checkpoint it forked."""
        areas = {self.area.path: self.area}
        for stack in (self.stack, *self.checkpoints.values()):
            areas.update((layer.area.path, layer.area) for layer in stack)
        return [path for path, area in areas.items() if area.mounted]

    def checkpoint(self, keep_upper: bool = False) -> tuple[str, bool]:
        """Freezes the upper; (checkpoint id, whether the overlay must be mounted again).

        An upper with no changes freezes nothing: the checkpoint is the current stack.
        `keep_upper` (processes of the workspace run on the mounted overlay, which must stay):
        a copy of the upper is frozen instead, and the overlay stays as it is.
        """
        changed = bool(os.listdir(self.upper))
        if changed and keep_upper:
            copy = os.path.join(self.area.path, f"c{self.area.serial + 1}")
            self.area.serial += 1
            try:
                copy_tree(self.upper, copy, keep=KEPT_OVERLAY_XATTRS)
            except OSError as e:
                shutil.rmtree(copy, ignore_errors=True)
                if e.errno == errno.ENOSPC:
                    msg = "no room left in the workspace's disk to copy its changes"
                    raise LayerError("LimitExceeded", msg) from e
                raise
            cid = self.store.new_checkpoint_id()
            self.checkpoints[cid] = (self.store.freeze(copy, self.area), *self.stack)
            self.store.hold(self.checkpoints[cid])
            return cid, False
        if changed:
            layer = self.store.freeze(self.upper, self.area)
            stack = (layer, *self.stack)
            self.store.hold(stack)
            self.store.release(self.stack)
            self.stack = stack
            if len(stack) > self.store.max_depth:
                try:
                    squashed = self.store.squash(stack, self.area)
                except LayerError:
                    squashed = stack  # no room to merge yet: deeper, still mountable
                self.store.hold(squashed)
                self.store.release(stack)
                self.stack = squashed
            shutil.rmtree(self.work, ignore_errors=True)
            self.upper, self.work = self._fresh_upper()
        cid = self.store.new_checkpoint_id()
        self.checkpoints[cid] = self.stack
        self.store.hold(self.stack)
        return cid, changed

    def restore(self, cid: str) -> None:
        """Back to checkpoint `cid`: the upper and any layer only later states held go.

        Raises:
            LayerError: NotFound for a checkpoint this workspace does not have.
        """
        stack = self.stack_of(cid)
        self.store.hold(stack)
        self.store.release(self.stack)
        self.stack = stack
        for path in (self.upper, self.work):
            shutil.rmtree(path, ignore_errors=True)
        self.upper, self.work = self._fresh_upper()

    def stack_of(self, cid: str) -> Stack:
        """Checkpoint `cid`'s stack.

        Raises:
            LayerError: NotFound for a checkpoint this workspace does not have.
        """
        stack = self.checkpoints.get(cid)
        if stack is None:
            known = ", ".join(sorted(self.checkpoints, key=lambda c: int(c[2:]))) or "none"
            raise LayerError(
                "NotFound", f"no checkpoint {cid!r} in this workspace; it has: {known}"
            )
        return stack

    def fork(self, cid: str, area: Area) -> WorkspaceLayers:
        """A new workspace's layers on `area`: checkpoint `cid`'s stack, and every checkpoint
        this one may restore (the child may go back to them too)."""
        if cid not in self.checkpoints:
            raise LayerError("NotFound", f"no checkpoint {cid!r} to fork from")
        child = WorkspaceLayers(self.store, area, self.checkpoints[cid])
        for known, stack in self.checkpoints.items():
            child.checkpoints[known] = stack
            self.store.hold(stack)
        return child

    def close(self) -> None:
        """The workspace is gone: drop what it held; its area goes once nobody needs it."""
        self.store.release(self.stack)
        for stack in self.checkpoints.values():
            self.store.release(stack)
        self.stack, self.checkpoints = (), {}
        self.store.retire(self.area)

    @classmethod
    def imported(cls, store: LayerStore, area: Area, archive: IO[bytes]) -> WorkspaceLayers:
        """A new workspace's layers on `area`, its stack read from `archive` (`write_archive`
        of a checkpoint of this instance, or of one provisioned anew from the same spec).

        Raises:
            LayerError: InvalidInput for an archive that is not one of ours; LimitExceeded
                when its files do not fit the area (the workspace's disk cap).
        """
        try:
            dirs = read_archive(archive, lambda: area.new_dir("i"))
        except (tarfile.TarError, ValueError, OSError) as e:
            if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise LayerError(
                    "LimitExceeded",
                    "the checkpoint's files do not fit a workspace's disk cap: start it on an "
                    "instance whose `disk_bytes` is larger than the files the checkpoint holds",
                ) from e
            raise LayerError("InvalidInput", f"not a checkpoint archive: {e}") from e
        return cls(store, area, tuple(store.freeze(d, area) for d in dirs))


# --- archives: a checkpoint that outlives its instance ---------------------------------------
def write_archive(dirs: list[str], out: IO[bytes]) -> None:
    """The layers `dirs` (newest first) as one pax tar streamed to `out`: layer k's entries
    under `k/`, files exactly (modes, owners, times, symlinks, hard links, whiteouts) and
    their xattrs in pax headers. Only our own frozen layers: nothing the sandbox can write."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for number, top in enumerate(dirs):
            for path, name in _walk(top, str(number)):
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    continue  # a unix socket: nothing a later process could connect to
                info = tar.gettarinfo(path, arcname=name)
                info.uname = info.gname = ""  # owners by number: names differ per image
                headers = {}
                with contextlib.suppress(OSError):
                    for attr in os.listxattr(path, follow_symlinks=False):
                        if attr.startswith(OVERLAY_XATTRS) and attr not in KEPT_OVERLAY_XATTRS:
                            continue
                        value = os.getxattr(path, attr, follow_symlinks=False)
                        headers[XATTR_PAX + attr] = base64.b64encode(value).decode()
                info.pax_headers = headers
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)


def _walk(top: str, name: str) -> Iterator[tuple[str, str]]:
    """(path, archive name) of `top` and everything under it, each directory before its
    entries; symlinks are entries, never followed."""
    yield top, name
    for entry in sorted(os.scandir(top), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path, name + "/" + entry.name)
        else:
            yield entry.path, name + "/" + entry.name


def read_archive(archive: IO[bytes], new_layer: Callable[[], str]) -> list[str]:
    """Recreates the layers of a `write_archive` archive; their directories, newest first.

    Entries are made only inside directories made here from the same archive: a symlink in it
    is never followed, whatever its name or target.

    Raises:
        ValueError: an entry this format never holds (a name out of place, a device).
    """
    layers: list[str] = []
    made: dict[str, str] = {}  # archive name -> path, of every directory made so far
    files: dict[str, str] = {}  # archive name -> path, of regular files (hard link targets)
    metas: list[tuple[str, tarfile.TarInfo]] = []  # directories: times set once filled
    with tarfile.open(fileobj=archive, mode="r|") as tar:
        for info in tar:
            parts = info.name.split("/")
            if any(p in ("", ".", "..") for p in parts) or not parts[0].isdigit():
                raise ValueError(f"entry {info.name!r} out of place")
            if len(parts) == 1:
                if not info.isdir() or int(parts[0]) != len(layers):
                    raise ValueError(f"layer {info.name!r} out of order")
                path = new_layer()
                layers.append(path)
                made[info.name] = path
                metas.append((path, info))
                continue
            parent = made.get("/".join(parts[:-1]))
            if parent is None:
                raise ValueError(f"entry {info.name!r} comes before its directory")
            path = os.path.join(parent, parts[-1])
            if info.isdir():
                os.mkdir(path, 0o700)
                made[info.name] = path
                metas.append((path, info))
                continue
            if info.isreg():
                source = tar.extractfile(info)
                assert source is not None
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                with os.fdopen(os.open(path, flags, 0o600), "wb") as f:
                    shutil.copyfileobj(source, f)
                files[info.name] = path
            elif info.islnk():
                target = files.get(info.linkname)
                if target is None:
                    raise ValueError(f"hard link {info.name!r} to an unknown file")
                os.link(target, path)
                continue  # the same inode: its metadata came with the first name
            elif info.issym():
                os.symlink(info.linkname, path)
            elif info.ischr() and info.devmajor == info.devminor == 0:  # a whiteout
                os.mknod(path, stat.S_IFCHR | 0o600, 0)
            elif info.isfifo():
                os.mkfifo(path, 0o600)
            else:
                raise ValueError(f"entry {info.name!r} is of a kind no layer holds")
            _set_meta(path, info)
    for path, info in reversed(metas):  # deepest first: filling a directory changes its times
        _set_meta(path, info)
    return layers


def _set_meta(path: str, info: tarfile.TarInfo) -> None:
    os.chown(path, info.uid, info.gid, follow_symlinks=False)
    if not info.issym():
        os.chmod(path, info.mode)
    for key, value in info.pax_headers.items():
        if key.startswith(XATTR_PAX):
            name = key[len(XATTR_PAX) :]
            os.setxattr(path, name, base64.b64decode(value), follow_symlinks=False)
    os.utime(path, (info.mtime, info.mtime), follow_symlinks=False)


# --- squashing -------------------------------------------------------------------------------
def _xattr(path: str, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError:
        return None


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _remove(path: str) -> os.stat_result | None:
    """Removes whatever is at `path`; what was there (None: nothing)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)
    return st


def _copy_meta(src: str | int, dst: str, st: os.stat_result, keep: tuple[str, ...] = ()) -> None:
    """Owner, mode, times and user-visible xattrs (of overlayfs' own, only those in `keep`) of
    `src`: a path (its last component not followed) or an open file descriptor."""
    os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(dst, stat.S_IMODE(st.st_mode))
    follow = {} if isinstance(src, int) else {"follow_symlinks": False}
    with contextlib.suppress(OSError):
        for name in os.listxattr(src, **follow):
            if name in keep or not name.startswith(OVERLAY_XATTRS):
                os.setxattr(dst, name, os.getxattr(src, name, **follow),
                            follow_symlinks=False)  # fmt: skip
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)


def _copy_entry(src: str, dst: str, st: os.stat_result, keep: tuple[str, ...] = ()) -> None:
    """One non-directory entry, exactly (a whiteout stays a whiteout)."""
    if stat.S_ISREG(st.st_mode):
        shutil.copyfile(src, dst, follow_symlinks=False)
    elif stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
    else:  # whiteouts (0/0 character devices), fifos, sockets, devices
        os.mknod(dst, st.st_mode, st.st_rdev)
    _copy_meta(src, dst, st, keep)


#: What copying an entry of a live tree raises when the entry went, or changed kind, after the
#: copy listed it (a checkpoint copies the upper of a workspace whose processes write on).
_WENT_MEANWHILE = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP})
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _ChangedKind(Exception):
    """The entry is no longer of the kind it was listed as (a swap meanwhile)."""


def copy_tree(src: str, dst: str, keep: tuple[str, ...] = ()) -> None:
    """`src` at `dst`; `keep`: the overlayfs marks to copy (a layer copied as a layer).

    `src` may be changing (the upper of a workspace whose processes run, which they control):
    it is walked by file descriptors, each directory opened in its parent's and nothing
    followed, so a symlink swapped in for a directory or a file never leads the copy out of
    `src`, and a file is read only through the inode that was checked to be a regular file
    (never a FIFO or a device swapped in). An entry that goes, or changes kind, while it is
    copied is left out, as if listed after it went; the copy holds every other entry as it
    was at some moment of it.
    """
    fd = os.open(src, _DIRECTORY)
    try:
        _copy_directory(fd, dst, keep)
    finally:
        os.close(fd)


def _copy_directory(fd: int, dst: str, keep: tuple[str, ...]) -> None:
    os.mkdir(dst, 0o700)
    with os.scandir(fd) as entries:
        for entry in entries:
            target = os.path.join(dst, entry.name)
            try:
                _copy_at(fd, entry.name, target, keep)
            except _ChangedKind:
                _remove(target)
            except OSError as e:
                if e.errno not in _WENT_MEANWHILE:
                    raise
                _remove(target)
    _copy_meta(fd, dst, os.fstat(fd), keep)


def _copy_at(parent: int, name: str, dst: str, keep: tuple[str, ...]) -> None:
    """The entry `name` of the directory `parent` at `dst`, exactly."""
    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, _DIRECTORY, dir_fd=parent)  # a symlink swapped in: ELOOP
        try:
            _copy_directory(fd, dst, keep)
        finally:
            os.close(fd)
        return
    if stat.S_ISREG(st.st_mode):
        # O_PATH opens no device and wakes no FIFO; the inode checked is the one read.
        pinned = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            st = os.fstat(pinned)
            if not stat.S_ISREG(st.st_mode):
                raise _ChangedKind(name)
            # One line, not parenthesized: the supervisor runs on Python 3.8.
            with open(f"/proc/self/fd/{pinned}", "rb") as source, open(dst, "xb") as copy:
                shutil.copyfileobj(source, copy, 1 << 20)
                copy.flush()  # before the times are set: a later write would move them
                _copy_meta(source.fileno(), dst, st, keep)
        finally:
            os.close(pinned)
        return
    if stat.S_ISLNK(st.st_mode):
        try:
            os.symlink(os.readlink(name, dir_fd=parent), dst)
        except OSError as e:
            if e.errno == errno.EINVAL:  # no longer a symlink
                raise _ChangedKind(name) from e
            raise
    else:  # whiteouts (0/0 character devices), fifos, sockets, devices: made, never opened
        os.mknod(dst, st.st_mode, st.st_rdev)
    _copy_meta(f"/proc/self/fd/{parent}/{name}", dst, st, keep)


def _apply_layer(src: str, dst: str, rel: str, merged_view: Callable[[], str]) -> None:
    """Applies one layer's directory `src` onto the merge `dst`, as overlayfs would stack it."""
    for entry in os.scandir(src):
        source, target = entry.path, os.path.join(dst, entry.name)
        path = rel + "/" + entry.name
        st = os.lstat(source)
        if not stat.S_ISDIR(st.st_mode):
            _remove(target)
            _copy_entry(source, target, st)
            continue
        if _xattr(source, REDIRECT) is not None:
            # A renamed directory: its content comes from elsewhere in the stack. Materialise
            # the merged result and make it opaque, so nothing below shows through.
            _remove(target)
            final = merged_view() + path
            if os.path.isdir(final) and not os.path.islink(final):
                copy_tree(final, target)
                os.setxattr(target, OPAQUE, b"y")
                continue
            # Renamed or removed again by a newer squashed layer, which will say so.
            os.mkdir(target, 0o700)
            os.setxattr(target, OPAQUE, b"y")
            _apply_layer(source, target, path, merged_view)
            _copy_meta(source, target, st)
            continue
        before = None
        if _xattr(source, OPAQUE) == b"y":
            _remove(target)
        elif not os.path.isdir(target) or os.path.islink(target):
            before = _remove(target)
        if not os.path.isdir(target):
            os.mkdir(target, 0o700)
            # Over a deletion or a non-directory, overlayfs shows only this layer's content.
            if _xattr(source, OPAQUE) == b"y" or before is not None:
                os.setxattr(target, OPAQUE, b"y")
        _apply_layer(source, target, path, merged_view)
        _copy_meta(source, target, st)


def overlay_options(base: str, overlay: dict[str, object]) -> str:
    """The overlay's mount options: a workspace's stack (`WorkspaceLayers.overlay`) over
    `base`, the instance's frozen tree."""
    lowers = [str(d) for d in overlay["lowers"]] + [base]  # type: ignore[attr-defined]
    return "lowerdir={},upperdir={},workdir={}".format(
        ":".join(lowers), overlay["upper"], overlay["work"]
    )
