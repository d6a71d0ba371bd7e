"""What a function's docstring says about a tool: its description and each
parameter's.

Parsed by the ``docstring-parser`` package, which reads Google (``Args:``,
and here also napoleon's ``Keyword Args:`` and ``Other Parameters:``), NumPy
(``Parameters`` / ``----------``, ``x, y : int`` naming each) and Sphinx
(``:param x:``) sections and picks the style that explains the most of the
docstring (one that starts with a section, without a summary, too). The
description is the docstring without the sections that document the
Python function's signature: the parameters (their entries describe the
properties instead) and what it returns, yields or raises (the output
schema describes the value; an exception reaches the model as the call's
error). Every other section (``Note:``, ``Example:``, ``Warning:``,
``Notes`` / ``-----``, ``.. note::``...) stays in it, where it was.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import docstring_parser
from docstring_parser import Docstring, DocstringStyle, epydoc, google, numpydoc, rest

__all__ = ["DocstringParts", "parse_docstring"]


@dataclass(frozen=True, slots=True)
class DocstringParts:
    """The parts of a docstring a tool uses."""

    description: str
    """The docstring without its signature sections (see the module's
    docstring): the summary line, the paragraphs after it and every other
    section ("" without a docstring)."""

    parameters: dict[str, str] = field(default_factory=dict)
    """Each documented parameter's description, by name."""


#: Napoleon's other Google sections of parameters (keyword-only ones are
#: often documented under ``Keyword Args:``), which docstring-parser's
#: Google parser does not know: read as ``Args:`` is.
_GOOGLE_OTHER_PARAMETERS: Final = (
    "Keyword Args", "Keyword Arguments", "Other Args", "Other Arguments", "Other Parameters", "Other Params",
)  # fmt: skip
_GOOGLE: Final = google.GoogleParser(
    [
        *google.DEFAULT_SECTIONS,
        *(google.Section(title, "param", google.SectionType.MULTIPLE) for title in _GOOGLE_OTHER_PARAMETERS),
    ]
)
#: Each style's parser, in docstring-parser's order (the first of those that
#: explain the most wins).
_PARSE: Final = {
    DocstringStyle.REST: rest.parse,
    DocstringStyle.GOOGLE: _GOOGLE.parse,
    DocstringStyle.NUMPYDOC: numpydoc.parse,
    DocstringStyle.EPYDOC: epydoc.parse,
}

# The sections that leave the description, as each style writes their
# titles. (The parameter titles are those the parsers read parameters
# from.)
_GOOGLE_TITLE: Final = re.compile(
    r"(?:Args|Arguments|Parameters|Params|Returns|Yields|Raises|Exceptions|Except"
    rf"|{'|'.join(_GOOGLE_OTHER_PARAMETERS)}):\s*"
)
_NUMPY_TITLES: Final = frozenset(
    {
        "Parameters", "Params", "Arguments", "Args", "Other Parameters", "Other Params", "Other Arguments",
        "Other Args", "Receives", "Receive", "Returns", "Return", "Yields", "Yield", "Raises", "Raise", "Warns",
        "Warn",
    }
)  # fmt: skip
_NUMPY_UNDERLINE: Final = re.compile(r"-{3,}\s*")
_SPHINX_FIELD: Final = re.compile(
    r":(?:param|parameter|arg|argument|key|keyword|type|returns?|rtype|yields?|ytype|raises?|except|exception)\b[^:]*:"
)


def _indented_sections(
    lines: list[str], starts: Callable[[str], bool], *, lazy: bool = False
) -> tuple[list[str], list[str]]:
    """Google's and Sphinx's layout: a section (or field) starts at a
    line at the left margin and runs over the blank and indented lines
    after it; ``lazy`` (Sphinx), also over the lines at the margin that
    follow it without a blank line (``:param f: a callable\nthat...``, as
    the standard library writes them). The lines outside the sections
    ``starts`` recognises, and those inside them."""
    kept: list[str] = []
    cut: list[str] = []
    into = kept
    previous = ""
    for line in lines:
        if line[:1].strip():  # at the left margin: a section's start, or text after one
            if starts(line):
                into = cut
            elif not (lazy and into is cut and previous.strip()):
                into = kept
        into.append(line)
        previous = line
    return kept, cut


def _numpy_sections(lines: list[str]) -> tuple[list[str], list[str]]:
    """NumPy's layout: a section runs from its underlined title to the next
    underlined title."""
    kept: list[str] = []
    cut: list[str] = []
    into = kept
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if line[:1].strip() and _NUMPY_UNDERLINE.fullmatch(following):
            into = cut if line.strip() in _NUMPY_TITLES else kept
        into.append(line)
    return kept, cut


def _split(doc: str, style: DocstringStyle) -> tuple[str, str] | None:
    """``doc`` as (the description's text, the signature sections' text)
    for ``style``; None for a style without sections to cut (epydoc)."""
    lines = doc.splitlines()
    if style is DocstringStyle.GOOGLE:
        kept, cut = _indented_sections(lines, lambda line: _GOOGLE_TITLE.fullmatch(line) is not None)
    elif style is DocstringStyle.REST:
        kept, cut = _indented_sections(lines, lambda line: _SPHINX_FIELD.match(line) is not None, lazy=True)
    elif style is DocstringStyle.NUMPYDOC:
        kept, cut = _numpy_sections(lines)
    else:
        return None
    # (A cut section leaves the blank lines around it: one paragraph break.)
    text = re.sub(r"\n(?:[ \t]*\n)+", "\n\n", "\n".join(kept)).strip()
    return text, "\n".join(cut)


def _parse(text: str) -> Docstring:
    """``text`` parsed in the style that explains the most of it (the most
    sections' entries), as ``docstring_parser.parse`` picks one, with
    :data:`_GOOGLE` for Google's."""
    parsed: list[Docstring] = []
    failure: docstring_parser.ParseError | None = None
    for parse in _PARSE.values():
        try:
            parsed.append(parse(text))
        except docstring_parser.ParseError as err:
            failure = err
    if not parsed and failure is not None:
        raise failure
    return max(parsed, key=lambda one: len(one.meta))


def parse_docstring(fn: object) -> DocstringParts:
    """The description and parameter descriptions of ``fn``'s docstring."""
    doc = inspect.getdoc(fn)
    if not doc:
        return DocstringParts("")
    try:
        # The style is told from the docstring after a summary line, so a
        # docstring that starts with a section (``Args:``, no summary) is
        # read as one, not as a summary line "Args:".
        style = _parse(f"_\n\n{doc}").style
        split = None if style is None else _split(doc, style)
        if style is None or split is None:
            parsed = docstring_parser.parse(doc) if style is None else _PARSE[style](doc)
            # The parser cuts the summary after its first line; a summary wrapped
            # over several lines (no blank line after the first) is one paragraph.
            joint = "\n\n" if parsed.blank_after_short_description else "\n"
            parts = (parsed.short_description, parsed.long_description)
            text = joint.join(part.strip() for part in parts if part)
            params = parsed.params
        else:
            # The parameters from the sections alone: text after a section
            # that the parser would take as its last entry's stays out. (A
            # summary line first: the parser dedents the lines after it.)
            text, sections = split
            params = _PARSE[style](f"_\n\n{sections}").params if sections else []
    except docstring_parser.ParseError:
        return DocstringParts(doc.strip())
    # (NumPy documents parameters together, ``x, y : int``: each gets it.)
    parameters = {
        name.strip(): " ".join(param.description.split())
        for param in params
        if param.description
        for name in param.arg_name.split(",")
    }
    return DocstringParts(text, parameters)
