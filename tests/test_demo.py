"""``./dev demo`` (``dsh_actors.demo``): what it prints agrees with itself
and shows every message whole."""

from __future__ import annotations

import re

import pytest

from dsh_actors import demo


def test_the_header_time_covers_the_schedule_and_no_message_is_cut(capsys: pytest.CaptureFixture[str]) -> None:
    demo.main()
    out = capsys.readouterr().out
    header = re.search(r"one batch of 7 calls, cap 3, in ([\d.]+) ms", out)
    assert header is not None, out
    schedule = out.split("schedule (ms since")[1].split("\n\n")[0]
    times = [float(at) for at in re.findall(r"^\s+([\d.]+)  c\d (?:start|end)$", schedule, re.M)]
    assert len(times) == 2 * 4  # c1 to c4 start and end (c5 is denied, c6 invalid, c7 unknown)
    assert max(times) <= float(header.group(1))
    # The INVALID_ARGS row wraps at a word boundary: its message is all there.
    joined = " ".join(out.split())
    assert 'Error: invalid arguments: "value.url" must be a string; missing required property "value.ms"' in joined
