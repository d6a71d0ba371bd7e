"""``server_errlog()``: a stdio server's stderr needs a file descriptor, also
where ``sys.stderr`` has none (a notebook, ``capsys``, ``redirect_stderr``)."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from pathlib import Path

import pytest
from mcp import StdioServerParameters, stdio_client

from dsh_actors.mcp import server_errlog


class NoDescriptor(io.StringIO):
    """Textual's print capture: a stream whose fileno() is -1."""

    def fileno(self) -> int:
        return -1


def test_sys_stderr_with_a_descriptor_is_the_servers_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open(tmp_path / "err", "w") as err:
        monkeypatch.setattr(sys, "stderr", err)
        assert server_errlog() is err


@pytest.mark.parametrize("stream", [io.StringIO(), NoDescriptor()], ids=["unsupported", "minus one"])
def test_without_one_it_is_the_processs_own_stderr(
    stream: io.StringIO, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open(tmp_path / "err", "w") as err:
        monkeypatch.setattr(sys, "stderr", stream)
        monkeypatch.setattr(sys, "__stderr__", err)
        assert server_errlog() is err


def test_a_closed_stderr_and_none_fall_back_to_devnull(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stderr", closed)
    monkeypatch.setattr(sys, "__stderr__", None)
    errlog = server_errlog()
    assert errlog.name == os.devnull and not errlog.closed
    assert server_errlog() is errlog  # opened once


def test_a_server_started_where_stderr_has_no_descriptor_writes_to_the_processs_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-c", "import sys; print('server: up', file=sys.stderr)"]
    )

    async def run_it() -> None:
        async with asyncio.timeout(20), stdio_client(server, errlog=server_errlog()) as (read, _):
            async for _message in read:  # until the server exits and its stdout closes
                pass

    with open(tmp_path / "err", "w") as err:
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        monkeypatch.setattr(sys, "__stderr__", err)
        asyncio.run(run_it())
    assert (tmp_path / "err").read_text() == "server: up\n"
