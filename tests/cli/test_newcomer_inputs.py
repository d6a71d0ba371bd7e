"""What a newcomer gives the command by mistake, each a one-line error that
names the fix (never a Python error of ours): ``--tools`` naming a folder
or a file that is no Python module, a batch file that is not UTF-8 or is
empty, standard input closed or given to ``replay`` as ``-``, a ``--log``
name too long, and a standard output whose encoding lacks a character."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dsh_actors.cli import main

from .conftest import Cli, assert_one_line_error

ECHO = """
from dsh_actors import tool

@tool
def echo(text: str) -> str:
    \"\"\"Echo the text (café ✓ 😀).\"\"\"
    return text

TOOLS = [echo]
"""


def _batch(folder: Path, text: str = "hi") -> Path:
    path = folder / "batch.json"
    path.write_text(json.dumps([{"id": "c1", "name": "echo", "arguments": {"text": text}}]), encoding="utf-8")
    return path


@pytest.mark.parametrize("given", [".", "./pkg", "pkg/", "plain/"])
def test_tools_naming_a_folder_says_it_is_a_folder(cli: Cli, root: Path, given: str) -> None:
    # Was "no such file 'pkg'" (it exists), or for ".", a TypeError of importlib's.
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text(ECHO)
    (root / "plain").mkdir()
    outcome = cli("run", _batch(root), "--tools", given)
    assert_one_line_error(outcome, "run", f"--tools {given}: ", "is a folder; ")
    if given.startswith("pkg") or given.startswith("./pkg"):
        assert "it is the package pkg: run from" in outcome.err and "with --tools pkg" in outcome.err
    else:
        assert "name a .py file in it, or a module" in outcome.err
    assert "TypeError" not in outcome.err and "no such file" not in outcome.err
    # The package by its module name runs.
    assert cli("run", _batch(root), "--tools", "pkg").code == 0


def test_tools_naming_a_file_that_is_no_python_module_says_so(cli: Cli, root: Path) -> None:
    # Was "no module named 'batch.json'", though the file is right there.
    outcome = cli("run", _batch(root), "--tools", "batch.json")
    assert_one_line_error(outcome, "run", "'batch.json' is a file, not a Python module; name a module")


def test_a_function_returning_no_definitions_is_told_in_plain_words(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path]
) -> None:
    # Was "make() returned is an int" and "make() returned[0] is an int".
    module = write_module("factory", "def make():\n    return 42\n\ndef make_list():\n    return [1]\n")
    outcome = cli("schemas", "--tools", f"{module}:make")
    assert_one_line_error(outcome, "schemas", "make() returned an int; expected a ToolDefinition or a sequence")
    outcome = cli("schemas", "--tools", f"{module}:make_list")
    assert_one_line_error(outcome, "schemas", "item 0 of what make_list() returned is an int, not a ToolDefinition")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ("café".encode("latin-1"), "batch.json: not UTF-8 text (byte 0xe9 on line 1); save it as UTF-8"),
        ('[{"name": "echo"}]'.encode("utf-16"), "batch.json: UTF-16 text, not UTF-8; save it as UTF-8"),
        (b"", "batch.json: empty; it should hold the tool calls, as JSON"),
        (b" \n", "batch.json: empty; it should hold the tool calls, as JSON"),
    ],
)
def test_a_batch_file_that_is_not_utf8_text_or_is_empty_says_so(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path], data: bytes, fragment: str
) -> None:
    # Was orjson's "str is not valid UTF-8: surrogates not allowed" at line 1
    # column 1, whatever the byte and wherever it was.
    (root / "batch.json").write_bytes(data)
    outcome = cli("run", "batch.json", "--tools", write_module("echo", ECHO))
    assert_one_line_error(outcome, "run", fragment)


def test_a_batch_file_that_begins_with_a_byte_order_mark_runs(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path]
) -> None:
    # Was "UTF-8 byte order mark (BOM) is not supported" (RFC 8259: a parser may ignore it).
    path = _batch(root)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    outcome = cli("run", path, "--tools", write_module("echo", ECHO))
    assert outcome.code == 0, outcome.err
    assert outcome.out.endswith("1 call: 1 ok, 0 errors\n")


def test_standard_input_closed_is_a_one_line_error_for_run_and_replay(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # run: was "internal error: AttributeError: 'NoneType' object has no attribute 'buffer'".
    monkeypatch.setattr(sys, "stdin", None)
    outcome = cli("run", "-", "--tools", write_module("echo", ECHO))
    assert_one_line_error(outcome, "run", "standard input is closed; name the batch file, or pipe the batch to '-'")
    outcome = cli("replay", "-")
    assert_one_line_error(outcome, "replay", "standard input is closed; name the session log, or pipe the log to '-'")


def test_replay_reads_the_log_from_standard_input_given_as_a_dash(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "-: no such file", though run reads "-" as standard input.
    module = write_module("echo", ECHO)
    assert cli("run", _batch(root), "--tools", module, "--log", "run.jsonl").code == 0
    with (root / "run.jsonl").open() as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        outcome = cli("replay", "-", "--tools", module)
        assert not stdin.closed  # (replay closed its own copy)
    assert outcome.code == 0, outcome.err
    assert outcome.out.startswith("── turn 1 · step 1 ──\n✓ c1 echo")
    (root / "bad.jsonl").write_text('{"type": "tool/call"}\n[1]\n')
    with (root / "bad.jsonl").open() as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        outcome = cli("replay", "-")
    assert_one_line_error(outcome, "replay", "<stdin>:1: ")


def test_a_log_name_too_long_is_a_one_line_error(
    cli: Cli, root: Path, write_module: Callable[[str, str], Path]
) -> None:
    # Was "internal error: OSError: [Errno 36] File name too long: '...'".
    outcome = cli("run", _batch(root), "--tools", write_module("echo", ECHO), "--log", "x" * 300 + ".jsonl")
    assert_one_line_error(outcome, "run", "--log xxx", ": cannot use it: File name too long")


def _ascii_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    """Standard output as an ``ascii`` stream (PYTHONIOENCODING=ascii, a
    Windows code page): its bytes."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii", newline="\n"))
    return raw


def test_results_print_on_a_standard_output_that_cannot_encode_them(
    root: Path, write_module: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Was "internal error: UnicodeEncodeError: 'ascii' codec can't encode
    # character '\xe9'", after the batch ran, and nothing printed.
    module = str(write_module("echo", ECHO))
    batch = str(_batch(root, "café 😀"))
    raw = _ascii_stdout(monkeypatch)
    assert main(["run", batch, "--tools", module]) == 0
    cards = raw.getvalue().decode("ascii")
    assert "    caf\\xe9 \\U0001f600\n" in cards and cards.endswith("1 call: 1 ok, 0 errors\n")
    # JSON stays valid JSON of the same value: \u escapes.
    raw = _ascii_stdout(monkeypatch)
    assert main(["run", batch, "--tools", module, "--json"]) == 0
    text = raw.getvalue().decode("ascii")
    assert "caf\\u00e9 \\ud83d\\ude00" in text
    assert json.loads(text)["results"][0]["value"] == "café 😀"
    raw = _ascii_stdout(monkeypatch)
    assert main(["schemas", "--tools", module]) == 0
    assert json.loads(raw.getvalue().decode("ascii"))[0]["function"]["description"] == "Echo the text (café ✓ 😀)."


def test_a_module_not_found_names_the_ways_to_find_it(cli: Cli, root: Path, tmp_path: Path) -> None:
    # Was "no module named 'shop' (looked in the current directory and
    # sys.path)", with no word of the .py form the option also takes.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "newcomer_shop.py").write_text(ECHO)
    outcome = cli("run", _batch(root), "--tools", "newcomer_shop")
    assert_one_line_error(
        outcome,
        "run",
        "no module named 'newcomer_shop'",
        "add that folder to PYTHONPATH, or name its file (--tools path/to/newcomer_shop.py)",
    )
    assert cli("run", _batch(root), "--tools", str(elsewhere / "newcomer_shop.py")).code == 0
