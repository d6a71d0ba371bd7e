"""The root ``$schema`` values accepted as an annotation (subset and full mode).

A schema may name its dialect at the root: Draft 2020-12 or draft-07, each
with or without the empty fragment and over ``http`` or ``https``. In the
subset the two mean the same thing (the subset's keywords have the same
semantics in both); full mode validates a draft-07 schema under draft-07
rules. Any other ``$schema`` value (another draft, a custom meta-schema) is
refused: its rules would not be the ones enforced.
"""

from __future__ import annotations

from typing import Final

__all__ = ["DIALECTS", "dialect_of", "dialect_problem"]

_BASES: Final = {
    "json-schema.org/draft/2020-12/schema": "2020-12",
    "json-schema.org/draft-07/schema": "draft-07",
}

DIALECTS: Final = {
    f"{scheme}://{base}{fragment}": dialect
    for base, dialect in _BASES.items()
    for scheme in ("https", "http")
    for fragment in ("", "#")
}
"""Accepted root ``$schema`` values and the dialect each names."""


def dialect_problem(value: object) -> str | None:
    """Why ``value`` is not an accepted root ``$schema`` (``None``: it is)."""
    if type(value) is str and value in DIALECTS:
        return None
    shown = repr(value) if type(value) is str else f"a {type(value).__name__}"
    return (
        f"$schema {shown} is not supported; name Draft 2020-12 "
        '("https://json-schema.org/draft/2020-12/schema") or draft-07 '
        '("http://json-schema.org/draft-07/schema#"), or leave it out'
    )


def dialect_of(schema: object) -> str:
    """The dialect a (checked) schema's root names; Draft 2020-12 by default."""
    if isinstance(schema, dict):
        value = schema.get("$schema")
        if type(value) is str and value in DIALECTS:
            return DIALECTS[value]
    return "2020-12"
