"""The ``format`` assertions of full-mode schemas.

Draft 2020-12 makes ``format`` an annotation unless a validator opts into
asserting it. Full mode asserts it, since a schema keyword is never accepted
without enforcement. Every format the JSON Schema specification defines is
either checked here or refused at registration. Format names the
specification does not define (``"password"``, ``"binary"``, OpenAPI's
``"int32"``) assert nothing: Draft 2020-12 requires an unknown format to
be ignored.

The checker starts from jsonschema's own Draft 2020-12 checkers (``date``,
``email``, ``ipv4``, ``ipv6``, ``uuid``, ``regex``, and ``idn-*`` when
``idna`` is installed) and adds checks for the formats jsonschema checks
only when optional packages are installed (``date-time``, ``time``,
``duration``, ``hostname``, ``uri``, ``uri-reference``, ``json-pointer``,
``relative-json-pointer``). None of them needs a dependency. A format
checker applies only to strings; any other type passes, as the
specification says.
"""

from __future__ import annotations

import datetime
import re
from typing import Final

from jsonschema import Draft7Validator, Draft202012Validator, FormatChecker

__all__ = ["STANDARD_FORMATS", "format_checker", "unchecked_standard_formats"]

STANDARD_FORMATS: Final = frozenset(
    {
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    }
)
"""The formats Draft 2020-12 (section 7.3 of its validation vocabulary)
defines. Draft-07 defines the same set except ``duration`` and ``uuid``."""

_TIME: Final = r"(\d{2}):(\d{2}):(\d{2})(?:\.\d+)?(?:[Zz]|([+-])(\d{2}):(\d{2}))"
_DATE_TIME_RE: Final = re.compile(rf"(\d{{4}})-(\d{{2}})-(\d{{2}})[Tt]{_TIME}", re.ASCII)
_TIME_RE: Final = re.compile(_TIME, re.ASCII)
_DURATION_RE: Final = re.compile(
    r"P(?:\d+W|(?=\d|T\d)(?:\d+Y)?(?:\d+M)?(?:\d+D)?(?:T(?=\d)(?:\d+H)?(?:\d+M)?(?:\d+S)?)?)", re.ASCII
)
_LABEL_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_URI_CHARS_RE: Final = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*", re.ASCII)
_SCHEME_RE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:", re.ASCII)
_POINTER: Final = r"(?:/(?:[^~/]|~[01])*)*"
_POINTER_RE: Final = re.compile(_POINTER)
_RELATIVE_POINTER_RE: Final = re.compile(rf"(?:0|[1-9][0-9]*)(?:#|{_POINTER})", re.ASCII)


def _time_ok(hour: str, minute: str, second: str, sign: str | None, off_h: str | None, off_m: str | None) -> bool:
    if int(hour) > 23 or int(minute) > 59 or int(second) > 60:  # 60: a leap second
        return False
    if sign is not None and (int(off_h or "0") > 23 or int(off_m or "0") > 59):
        return False
    return True


def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    match = _DATE_TIME_RE.fullmatch(value)
    if match is None:
        return False
    year, month, day, *clock = match.groups()
    try:
        datetime.date(int(year), int(month), int(day))
    except ValueError:
        return False
    return _time_ok(*clock)


def _is_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    match = _TIME_RE.fullmatch(value)
    return match is not None and _time_ok(*match.groups())


def _is_duration(value: object) -> bool:
    return not isinstance(value, str) or _DURATION_RE.fullmatch(value) is not None


def _is_hostname(value: object) -> bool:
    if not isinstance(value, str):
        return True
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253:
        return False
    return all(_LABEL_RE.fullmatch(label) is not None for label in name.split("."))


def _is_uri_reference(value: object) -> bool:
    return not isinstance(value, str) or _URI_CHARS_RE.fullmatch(value) is not None


def _is_uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return _SCHEME_RE.match(value) is not None and _URI_CHARS_RE.fullmatch(value) is not None


def _is_json_pointer(value: object) -> bool:
    return not isinstance(value, str) or _POINTER_RE.fullmatch(value) is not None


def _is_relative_json_pointer(value: object) -> bool:
    return not isinstance(value, str) or _RELATIVE_POINTER_RE.fullmatch(value) is not None


_OWN: Final = {
    "date-time": _is_date_time,
    "time": _is_time,
    "duration": _is_duration,
    "hostname": _is_hostname,
    "uri": _is_uri,
    "uri-reference": _is_uri_reference,
    "json-pointer": _is_json_pointer,
    "relative-json-pointer": _is_relative_json_pointer,
}


def _build(base: FormatChecker) -> FormatChecker:
    checker = FormatChecker(())
    checker.checkers = dict(base.checkers)
    for name, check in _OWN.items():
        checker.checks(name)(check)
    return checker


_CHECKERS: Final = {
    "2020-12": _build(Draft202012Validator.FORMAT_CHECKER),
    "draft-07": _build(Draft7Validator.FORMAT_CHECKER),
}


def format_checker(dialect: str) -> FormatChecker:
    """The asserting checker of ``dialect`` (``"2020-12"`` or ``"draft-07"``)."""
    return _CHECKERS[dialect]


def unchecked_standard_formats(dialect: str) -> frozenset[str]:
    """The standard formats this process cannot assert (refused in schemas)."""
    return STANDARD_FORMATS.difference(_CHECKERS[dialect].checkers)
