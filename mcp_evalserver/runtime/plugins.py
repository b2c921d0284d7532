"""Loads user-supplied Python factories named `package.module:callable`."""

from __future__ import annotations

import importlib
from typing import Any

from mcp_evalserver.errors import InvalidInput


def load_factory(import_path: str) -> Any:
    """Imports `package.module:attribute` and returns the attribute.

    Raises:
        InvalidInput: the path is malformed, the module cannot be imported or lacks the name.
    """
    module_name, _, attribute = import_path.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"factory {import_path!r} must look like 'package.module:callable'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(
            f"cannot import {module_name!r} for factory {import_path!r}: {exc}; "
            "is it installed or on PYTHONPATH?"
        ) from exc
    try:
        factory = getattr(module, attribute)
    except AttributeError as exc:
        raise InvalidInput(f"module {module_name!r} has no attribute {attribute!r}") from exc
    if not callable(factory):
        raise InvalidInput(f"factory {import_path!r} is not callable")
    return factory
