"""Runs `python bench/NAME.py` as `python -m bench.NAME` from the repository root.

Run as a file, a bench would have bench/ first on sys.path, where bench/mcp.py shadows the
`mcp` SDK, and the repository root (`bench`, `testsupport`, `demo`) not on it at all. So each
bench imports this module when it is run as a file (`if not __package__`), before anything
else: it re-executes the same interpreter in module mode with `-P` (neither the script's
folder nor the working directory on sys.path) and the repository root on PYTHONPATH.
"""

import os
import sys
from pathlib import Path

_script = Path(sys.argv[0]).resolve()
_path = os.environ.get("PYTHONPATH")
os.environ["PYTHONPATH"] = os.pathsep.join([str(_script.parents[1]), *([_path] if _path else [])])
os.execv(sys.executable, [sys.executable, "-P", "-m", f"bench.{_script.stem}", *sys.argv[1:]])
