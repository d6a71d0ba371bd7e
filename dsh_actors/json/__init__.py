"""Lossless JSON: the only values that cross an actor boundary
(``docs/reference.md``, section 2).

A value is *lossless JSON* when it is ``None``, a ``bool``, a ``str``, an
``int`` in ``[-2**63, 2**64-1]``, a finite ``float`` other than ``-0.0``, a
``list``/``tuple`` of lossless values, or a ``dict`` (or :class:`FrozenDict`)
whose keys are all ``str`` and whose values are lossless. Types must match
exactly (``type(v) is str``): subclasses (str enums, ``IntEnum``,
``OrderedDict``, ``defaultdict``, numpy scalars) are rejected, and so is
everything else (sets, bytes, dataclasses, ...). Two more rules make "lossless"
mean "survives :func:`dumps` then :func:`loads` unchanged":

* a ``str`` must be encodable as UTF-8, so a lone surrogate (``"\\ud800"``, as
  ``os.fsdecode`` produces for undecodable file names) is rejected;
* cycles are rejected (the same object twice in sibling positions is fine),
  and so is nesting deeper than :data:`MAX_JSON_DEPTH`.

**Depth.** A scalar has depth 0; a container has depth 1 plus the largest depth
of its items, so ``[]`` and ``{"a": 1}`` have depth 1 and ``[[1]]`` depth 2.
Values of depth up to ``MAX_JSON_DEPTH`` (256) are accepted; depth 257 is
rejected with ``nesting deeper than 256``. Nothing here recurses: every walk
uses an explicit stack, so a 100,000-deep list gets that error, never a
``RecursionError``.

**Paths.** Errors are :class:`~dsh_actors.errors.LosslessJsonError` with a
``path`` and a ``problem``. The path starts at the name given (``value`` by
default); a list/tuple item adds ``[3]``; a dict key that is a Python
identifier of at most 64 characters adds ``.key``, any other key adds
``["key"]`` quoted as a JSON string (``value.a[3]["content-type"]``,
``value["3"]``); a longer key is cut to its first 48 characters and shown as
``["abc…"]``. A path of more than 20 steps shows its first and last 8
steps and how many are left out between them
(``value[0][0][0][0][0][0][0][0] … (240 more) … [0][0][0][0][0][0][0][0]``),
wherever it is written: :func:`path_for_key` and :func:`path_for_index`
keep it so. A bad dict key is reported at the path of its dict; a key that
is not a ``str`` in a path of a Python value (a tool's, before it is
lossless JSON) is ``[<int key>]``, as :func:`path_for_key` writes it.

**Frozen values.** :func:`materialize` returns a detached, deep-frozen copy:
dicts become :class:`FrozenDict`, lists become tuples, scalars (and ``str``,
however long) are kept as they are. A tuple never equals a list, so
``materialize({"a": [1]}) == {"a": [1]}`` is False: compare
``thaw(frozen)`` with plain values (or compare with tuples). A frozen value is returned unchanged when
materialized again (a ``FrozenDict`` in O(1), a tuple after one walk that
copies nothing), and a ``FrozenDict`` inside a new value is taken as it is.
A mutable sub-value that occurs in several places is checked and copied at
each one, as orjson writes it at each one.

Every function here is pure and thread-safe: none keeps state between calls
(a ``FrozenDict`` caches its hash and depth on first use; a race there is
harmless). A mutable input must not be mutated by another thread while it
is being read.
"""

from __future__ import annotations

from ._frozen import FrozenDict, JsonValue, check_lossless, is_lossless, materialize, thaw
from ._rules import MAX_JSON_DEPTH, path_for_index, path_for_key
from ._text import dumps, loads, text_problem

__all__ = [
    "MAX_JSON_DEPTH",
    "FrozenDict",
    "JsonValue",
    "check_lossless",
    "dumps",
    "is_lossless",
    "loads",
    "materialize",
    "path_for_index",
    "path_for_key",
    "text_problem",
    "thaw",
]
