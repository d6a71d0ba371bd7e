"""Tools from typed functions: :func:`tool`.

``@tool`` reads a plain or ``async def`` function's signature, type hints
and docstring and returns a :class:`TypedToolDefinition`: a
:class:`~dsh_actors.ToolDefinition` whose arguments and value pydantic-core
validates, callable as the function (``_tool.py``). The pieces:

* ``_docstrings.py``: the description and per-parameter descriptions, from
  Google, NumPy or Sphinx docstrings (the ``docstring-parser`` package);
* ``_pydantic.py``: :class:`PydanticEnforcer`, pydantic-core behind the
  interface registration and the pipeline use for every schema, and the
  translation of pydantic's errors into path-named violations.
"""

from __future__ import annotations

from ._pydantic import PydanticEnforcer
from ._tool import TypedToolDefinition, tool

__all__ = ["PydanticEnforcer", "TypedToolDefinition", "tool"]
