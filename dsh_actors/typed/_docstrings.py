"""What a function's docstring says about a tool: its description and each
parameter's.

Parsed by the ``docstring-parser`` package, which reads Google (``Args:``),
NumPy (``Parameters`` / ``----------``) and Sphinx (``:param x:``) sections
and picks the style that explains the most of the docstring.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import docstring_parser

__all__ = ["DocstringParts", "parse_docstring"]


@dataclass(frozen=True, slots=True)
class DocstringParts:
    """The parts of a docstring a tool uses."""

    description: str
    """The text before the sections: the summary line and any paragraphs
    after it ("" without a docstring)."""

    parameters: dict[str, str] = field(default_factory=dict)
    """Each documented parameter's description, by name."""


def parse_docstring(fn: object) -> DocstringParts:
    """The description and parameter descriptions of ``fn``'s docstring."""
    doc = inspect.getdoc(fn)
    if not doc:
        return DocstringParts("")
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return DocstringParts(doc.strip())
    # The parser cuts the summary after its first line; a summary wrapped
    # over several lines (no blank line after the first) is one paragraph.
    joint = "\n\n" if parsed.blank_after_short_description else "\n"
    text = joint.join(part.strip() for part in (parsed.short_description, parsed.long_description) if part)
    parameters = {param.arg_name: " ".join(param.description.split()) for param in parsed.params if param.description}
    return DocstringParts(text, parameters)
