"""MCP content blocks to the runtime's content blocks.

=================================  ==============================================
MCP block                          content block
=================================  ==============================================
``text``                           :class:`TextBlock` with the text
``image``                          :class:`ImageBlock` (base64 data, MIME type)
``audio``                          :class:`TextBlock` ``[audio <mime>, N bytes]``
                                   (no audio block exists; the data is left out)
``resource`` with ``text``         :class:`TextBlock` ``[resource <uri> (<mime>)]``
                                   then the text on the next line
``resource`` with an image blob    :class:`ImageBlock` of the blob
``resource`` with a ``text/*``     :class:`TextBlock` ``[resource <uri> (<mime>)]``
blob                               then the decoded text (UTF-8, or the MIME
                                   type's ``charset``); as another blob when it
                                   does not decode
``resource`` with another blob     :class:`TextBlock` ``[resource <uri> (<mime>),
                                   N bytes]``
``resource_link``                  :class:`TextBlock` ``[resource link <name>:
                                   <uri> (<mime>)]`` and its description
anything else (read back only)     :class:`TextBlock` ``[<type> content]``
=================================  ==============================================

An image (or image blob) whose data is not base64 text, or whose MIME
type is not ``image/<subtype>``, which :class:`ImageBlock` refuses, makes
:func:`blocks_from_wire` raise ``InvalidValueError`` naming it
(``content.1: ImageBlock data is a data URL, ...``): the mount fails such
a call ``MCP_PROTOCOL_ERROR``, and :func:`error_text` leaves it out (it
has no text).

The last row is for wire values read back (a logged ``user_content``
written by a newer MCP SDK, say): a ``tools/call`` result never gets here
with a block of a type the MCP SDK does not know, since the SDK refuses the
whole result and the call fails ``MCP_PROTOCOL_ERROR`` (``content.0: unknown
type "hologram"``).

A block whose ``annotations.audience`` names the user but not the assistant
(``["user"]``) is for the user only: :func:`for_model` says so, and the mount
keeps such blocks from the model (they reach the log and the cards).

The functions take MCP's wire form (the JSON dicts), so they work the same on
the SDK's models dumped with ``by_alias=True`` and on a value read back.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidValueError
from ..model import ContentBlock, ImageBlock, TextBlock

__all__ = ["blocks_from_wire", "error_text", "for_model"]


def _size(data: object) -> str:
    if type(data) is not str:
        return "0 bytes"
    padding = len(data) - len(data.rstrip("="))
    n = max(0, len(data) * 3 // 4 - padding)
    return "1 byte" if n == 1 else f"{n} bytes"


def _mime(block: Mapping[str, Any], key: str = "mimeType") -> str:
    mime = block.get(key)
    return mime if type(mime) is str and mime else "unknown type"


def _resource(resource: Mapping[str, Any]) -> ContentBlock:
    uri = resource.get("uri", "")
    if type(resource.get("text")) is str:
        mime = resource.get("mimeType")
        head = f"[resource {uri}]" if not mime else f"[resource {uri} ({mime})]"
        return TextBlock(f"{head}\n{resource['text']}")
    blob = resource.get("blob")
    mime = _mime(resource)
    if type(blob) is str and mime.startswith("image/"):
        return ImageBlock(data=blob, mime_type=mime)
    if type(blob) is str and mime.startswith("text/"):
        text = _decoded(blob, mime)
        if text is not None:
            return TextBlock(f"[resource {uri} ({mime})]\n{text}")
    return TextBlock(f"[resource {uri} ({mime}), {_size(blob)}]")


def _decoded(blob: str, mime: str) -> str | None:
    """A ``text/*`` blob's text, in the MIME type's charset (default
    UTF-8); None when it is not base64 or not text in that charset."""
    charset = "utf-8"
    for param in mime.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"')
    try:
        return base64.b64decode(blob, validate=True).decode(charset)
    except (ValueError, LookupError):  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None


def for_model(block: Mapping[str, Any]) -> bool:
    """Whether a wire block may reach the model: not when its
    ``annotations.audience`` is a list without ``"assistant"`` in it."""
    annotations = block.get("annotations")
    if not isinstance(annotations, Mapping):
        return True
    audience = annotations.get("audience")
    if not isinstance(audience, Sequence) or isinstance(audience, str):
        return True
    return not audience or "assistant" in audience


def block_from_wire(block: Mapping[str, Any]) -> ContentBlock:
    """One MCP content block (wire form) as a content block (module table)."""
    kind = block.get("type")
    if kind == "text" and type(block.get("text")) is str:
        return TextBlock(block["text"])
    if kind == "image" and type(block.get("data")) is str and type(block.get("mimeType")) is str:
        return ImageBlock(data=block["data"], mime_type=block["mimeType"])
    if kind == "audio":
        return TextBlock(f"[audio {_mime(block)}, {_size(block.get('data'))}]")
    if kind == "resource" and isinstance(block.get("resource"), Mapping):
        return _resource(block["resource"])
    if kind == "resource_link":
        name = block.get("name") or block.get("title") or "resource"
        line = f"[resource link {name}: {block.get('uri', '')}"
        mime = block.get("mimeType")
        line += f" ({mime})]" if mime else "]"
        description = block.get("description")
        return TextBlock(f"{line}\n{description}" if type(description) is str and description else line)
    return TextBlock(f"[{kind if type(kind) is str else 'unknown'} content]")


def blocks_from_wire(content: Sequence[Mapping[str, Any]]) -> list[ContentBlock]:
    """Every MCP content block of a result, in order; ``InvalidValueError``
    naming the first image :class:`ImageBlock` refuses (data that is not
    base64, a MIME type that is not ``image/<subtype>``: ``content.<i>:
    ...``)."""
    out: list[ContentBlock] = []
    for i, block in enumerate(content):
        try:
            out.append(block_from_wire(block))
        except InvalidValueError as err:
            raise InvalidValueError(f"content.{i}: {err.message}") from None
    return out


def error_text(content: Sequence[Mapping[str, Any]]) -> str:
    """The server's text of an ``isError`` result: its text blocks (and the
    text renderings of the others) joined by newlines."""
    parts = []
    for block in content:
        try:
            rendered = block_from_wire(block)
        except InvalidValueError:  # an image ImageBlock refuses: no text either way
            continue
        if type(rendered) is TextBlock:
            parts.append(rendered.text)
    return "\n".join(parts)
