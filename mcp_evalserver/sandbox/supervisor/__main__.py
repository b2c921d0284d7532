"""`python3 -I -S DIR`, DIR being this folder wherever it was copied: runs the supervisor.

Run as a folder, Python puts it first on sys.path and runs this file outside any package; our
modules import one another relatively, so the folder is imported as a package of its own
instead, and taken off sys.path, where its names would shadow the standard library's.
"""

import importlib
import importlib.util
import os
import sys


def _package() -> str:
    if __package__:  # python -m mcp_evalserver.sandbox.supervisor
        return __package__
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == here:
        del sys.path[0]
    name = "mcp_evalserver_supervisor"
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(here, "__init__.py"), submodule_search_locations=[here]
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return name


importlib.import_module(_package() + ".main").main()
