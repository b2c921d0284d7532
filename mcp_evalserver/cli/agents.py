"""The `agents install` command: a CLI agent's runtime and pinned package, into the cache."""

from __future__ import annotations

import argparse
from typing import Any

from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.agents import CLI_PACKAGES


def add_agents_command(commands: Any) -> None:
    """Adds `agents install NAME[@VERSION]...` to the CLI's subcommands."""
    agents = commands.add_parser(
        "agents",
        help=f"install the command-line agents ({', '.join(CLI_PACKAGES)}) into the cache",
    )
    verbs = agents.add_subparsers(dest="agents_command", metavar="VERB", required=True)
    install = verbs.add_parser(
        "install",
        help="install the Node runtime and each agent's pinned (or given) npm version, once "
        "per machine, with this machine's npm; campaigns also install on first use",
    )
    names = ", ".join(f"{name} (default {version})" for name, (_, version) in CLI_PACKAGES.items())
    install.add_argument("agents", nargs="+", metavar="NAME[@VERSION]", help=names)


def dispatch_agents(args: argparse.Namespace, store: CampaignStore) -> int | None:
    """Runs `agents install`; None when `args` is another command.

    Raises:
        InvalidInput: an agent name this server does not know.
        CliUnavailable: npm is missing or the version cannot be installed.
    """
    if args.command != "agents":
        return None
    # Imported here: only this command and the CLI agents need the installer.
    from mcp_evalserver.agents.cli import packages

    wanted = []
    for given in args.agents:
        name, _, version = given.partition("@")
        if name not in CLI_PACKAGES:
            known = ", ".join(CLI_PACKAGES)
            raise InvalidInput(f"no command-line agent {name!r}; known: {known}")
        wanted.append((name, *CLI_PACKAGES[name][:1], version or CLI_PACKAGES[name][1]))
    node = packages.install_node_sync()
    print(f"{packages.NODE_PACKAGE}@{node.version} {node.integrity} {node.prefix}")
    packages.helpers_dir()  # what a Ray node's workspaces run beside the CLI, there too
    for name, package, version in wanted:
        found = packages.install_sync(name, package, version, node=node)
        print(f"{package}@{found.version} {found.integrity} {found.prefix}")
    return 0
