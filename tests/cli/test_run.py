"""``dsh-actors run``: a batch file against a tool module, printed as
cards (or JSON), exit 0 whenever the batch ran."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from dsh_actors import ToolBatchResult
from dsh_actors.cli.run import Interrupts
from dsh_actors.signals import AbortController

from .conftest import EXAMPLES, Cli, PipedStdin, assert_one_line_error, run_cli, started_cli

BATCH = EXAMPLES / "batch.json"
HELLO = 'def greet(name):\n    return f"hello, {name}"\n\n\nprint(greet("world"))\n'


def _batch(folder: Path, *calls: dict[str, Any]) -> Path:
    path = folder / "batch.json"
    path.write_text(json.dumps({"calls": list(calls)}))
    return path


def test_the_example_batch_runs_every_call_and_prints_its_card(cli: Cli, root: Path) -> None:
    outcome = cli("run", BATCH, "--tools", "examples.tools")
    assert outcome.code == 0, outcome.err
    assert outcome.err == ""
    assert (root / "scratch" / "hello.py").read_text() == HELLO
    out = outcome.out
    # write_file: a diff card of a new file
    assert "✓ c1 write_file · write scratch/hello.py" in out
    assert "--- /dev/null" in out and "+++ b/scratch/hello.py" in out and "+def greet(name):" in out
    # read_file: a line-numbered window
    assert "scratch/hello.py · lines 1–5 of 5 (python)" in out
    assert "1 │ def greet(name):" in out and '5 │ print(greet("world"))' in out
    # search_text: matches grouped by file
    assert 'scratch/hello.py\n      1: def greet(name):\n      5: print(greet("world"))\n    2 matches in 1 file' in out
    # run_shell: the command, its output and its exit status
    assert "$ echo hello from the shell\n    hello from the shell\n    exit 0" in out
    assert out.endswith("4 calls: 4 ok, 0 errors\n")


@pytest.mark.parametrize("name", ["batch.json", "batch_openai.json", "batch_anthropic.json"])
def test_each_example_batch_file_gives_the_same_results(cli: Cli, root: Path, name: str) -> None:
    outcome = cli("run", EXAMPLES / name, "--tools", "examples.tools", "--json")
    assert outcome.code == 0, outcome.err
    document = json.loads(outcome.out)
    assert [(r["name"], r["is_error"]) for r in document["results"]] == [
        ("write_file", False), ("read_file", False), ("search_text", False), ("run_shell", False)
    ]  # fmt: skip
    values = [r["value"] for r in document["results"]]
    assert values[0] == {
        "path": "scratch/hello.py",
        "created": True,
        "bytes": len(HELLO),
        "old_text": None,
        "new_text": HELLO,
    }
    assert [line["text"] for line in values[1]["lines"]] == HELLO.splitlines()
    assert values[2]["total"] == 2 and values[2]["matches"][0]["path"] == "scratch/hello.py"
    assert values[3]["output"] == "hello from the shell\n" and values[3]["exit_code"] == 0
    assert document["summary"] == {**NOTHING_OPEN, "calls": 4, "ok": 4, "error": 0}


def test_json_output_carries_content_errors_and_both_cards(cli: Cli, root: Path) -> None:
    batch = _batch(
        root,
        {"id": "s", "name": "run_shell", "arguments": {"command": "echo hi"}},
        {"id": "u", "name": "unknown_tool", "arguments": {}},
    )
    document = json.loads(cli("run", batch, "--tools", "examples.tools", "--json").out)
    shell, unknown = document["results"]
    assert shell["call_view"] == {"card": "terminal", "title": "echo hi"}
    assert shell["result_view"] == {"card": "terminal", "output": "hi\n", "exit_code": 0}
    assert shell["content"] == [{"type": "text", "text": "hi\n[exit code 0]"}]
    assert unknown["is_error"] and "value" not in unknown
    assert unknown["error"]["info"]["code"] == "UNKNOWN_TOOL"
    assert unknown["result_view"] == {
        "card": "generic",
        "content": [{"type": "text", "text": 'Error: unknown tool "unknown_tool"'}],
    }
    assert document["shape"] == "dsh" and document["summary"] == {**NOTHING_OPEN, "calls": 2, "ok": 1, "error": 1}
    assert document["pending"] == [] and document["suspension"] is None


NOTHING_OPEN = {"without_result": 0, "awaiting_approval": 0, "never_started": 0}

DEFERRING_TOOLS = """
from dsh_actors import tool

@tool(requires_approval=True, concurrency_safe=True)
def pay(to: str) -> str:
    \"\"\"Pay someone.\"\"\"
    return f"paid {to}"

@tool(concurrency_safe=True)
def look(q: str) -> str:
    \"\"\"Look up.\"\"\"
    return f"looked {q}"

@tool
def write(path: str) -> str:
    \"\"\"Write alone.\"\"\"
    return f"wrote {path}"

def register(rt):
    for definition in (pay, look, write):
        rt.tools.register(definition)
    rt.approvals.set(lambda request: "deferred")
"""

DEFERRING_CALLS = [
    {"id": "a", "name": "pay", "arguments": {"to": "bob"}},  # deferred by the module's service
    {"id": "b", "name": "look", "arguments": {"q": "x"}},  # runs beside it
    {"id": "c", "name": "write", "arguments": {"path": "p"}},  # exclusive: waits for it
]
"""A batch of DEFERRING_TOOLS' calls that suspends."""


def test_json_output_shows_the_calls_a_suspended_batch_left_open_and_counts_them_as_the_cards_do(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # The module's approval service defers "a": "b" runs beside it, "c"
    # (exclusive) waits for it. The JSON listed "b" alone and counted 1 call.
    module = write_module("deferring_tools", DEFERRING_TOOLS)
    batch = _batch(root, *DEFERRING_CALLS)
    cards = cli("run", batch, "--tools", module)
    outcome = cli("run", batch, "--tools", module, "--json")

    assert outcome.code == cards.code == 0 and outcome.err == ""
    assert cards.out.endswith("3 calls: 1 ok, 0 errors, 2 without a result (1 awaiting approval, 1 never started)\n")
    document = json.loads(outcome.out)
    assert [r["call_id"] for r in document["results"]] == ["b"]
    generic = {"card": "generic", "locations": []}
    assert document["pending"] == [
        {
            "call_id": "a",
            "name": "pay",
            "state": "deferred",
            "approval": {"reason": None, "display_reason": None},
            "waits_for": [],
            "call_view": {**generic, "title": "pay", "raw_input": {"to": "bob"}},
        },
        {
            "call_id": "c",
            "name": "write",
            "state": "pending",
            "approval": None,
            "waits_for": ["a"],
            "call_view": {**generic, "title": "write", "raw_input": {"path": "p"}},
        },
    ]
    assert document["summary"] == {
        "calls": 3,
        "ok": 1,
        "error": 0,
        "without_result": 2,
        "awaiting_approval": 1,
        "never_started": 1,
    }
    suspension = document["suspension"]
    assert suspension["format"] == "dsh-actors/suspension"
    assert [(call["id"], call["state"]) for call in suspension["calls"]] == [
        ("a", "deferred"),
        ("b", "settled"),
        ("c", "pending"),
    ]


def test_json_output_states_its_version_first_and_the_readme_documents_each_key_it_has(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # (The document had no version: a consumer could not tell which shape it read.)
    from dsh_actors.cli.run import JSON_VERSION

    module = write_module("deferring_tools", DEFERRING_TOOLS)
    batch = _batch(root, *DEFERRING_CALLS, {"id": "d", "name": "unknown_tool", "arguments": {}})
    document = json.loads(cli("run", batch, "--tools", module, "--json").out)
    assert JSON_VERSION == 1 and list(document)[0] == "version" and document["version"] == JSON_VERSION
    readme = (Path(__file__).parents[2] / "dsh_actors" / "cli" / "README.md").read_text()
    section = readme.split("#### The `--json` document", 1)[1].split("\n#", 1)[0]
    keys = {*document, *document["summary"], *document["pending"][0]}
    keys |= {key for result in document["results"] for key in result}
    assert {"value", "error", "waits_for"} <= keys
    assert not [key for key in sorted(keys) if f"`{key}`" not in section]
    assert f"| `version` | `{JSON_VERSION}` |" in section


def test_a_denied_shell_command_fails_its_call_but_the_batch_exits_0(cli: Cli, root: Path) -> None:
    batch = _batch(root, {"id": "x", "name": "run_shell", "arguments": {"command": "sudo reboot"}})
    outcome = cli("run", batch, "--tools", "examples.tools")
    assert outcome.code == 0
    assert "✗ x run_shell · $ sudo reboot" in outcome.out
    assert "Error: command refused by the shell deny list (sudo): sudo reboot" in outcome.out
    assert outcome.out.endswith("1 call: 0 ok, 1 error\n")


def test_a_write_outside_scratch_is_denied_when_no_approval_service_is_installed(cli: Cli, root: Path) -> None:
    batch = _batch(root, {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "x"}})
    outcome = cli("run", batch, "--tools", "examples.tools")
    assert outcome.code == 0
    assert "Error: write outside scratch/: notes.md" in outcome.out
    assert not (root / "notes.md").exists()


NO_CHANNEL_NOTE = (
    "dsh-actors run: note: {calls} denied: there is no terminal to ask on and no approval service; rerun with "
    "--approve yes (allow them), --approve no (reject them) or --approve prompt (ask, reading the answers from "
    "standard input)\n"
)


def test_calls_denied_for_want_of_an_approval_channel_name_approve_once_on_stderr(
    cli: Cli, root: Path, piped_stdin: PipedStdin, write_module: Any
) -> None:
    # Without a terminal (CI, a pipe) and without --approve nobody is asked:
    # each asking call was denied showing the policy's reason alone, and
    # nothing said that --approve answers them.
    piped_stdin.close()
    batch = _batch(
        root,
        {"id": "w1", "name": "write_file", "arguments": {"path": "a.md", "content": "x"}},
        {"id": "w2", "name": "write_file", "arguments": {"path": "b.md", "content": "x"}},
        {"id": "s", "name": "run_shell", "arguments": {"command": "sudo reboot"}},  # a Deny: not for want of one
    )
    for options in ((), ("--json",)):
        outcome = cli("run", batch, "--tools", "examples.tools", *options)
        assert outcome.code == 0
        assert "write outside scratch/: a.md" in outcome.out and "write outside scratch/: b.md" in outcome.out
        assert outcome.err == NO_CHANNEL_NOTE.format(calls="2 calls that ask for approval were")
    # A tool that requires approval itself (no listener asks): the same note.
    module = write_module(
        "asking_tools", DEFERRING_TOOLS.replace('    rt.approvals.set(lambda request: "deferred")\n', "")
    )
    outcome = cli("run", _batch(root, {"id": "a", "name": "pay", "arguments": {"to": "bob"}}), "--tools", module)
    assert outcome.code == 0
    assert 'Error: tool "pay" requires approval, but no approval service is installed' in outcome.out
    assert outcome.err == NO_CHANNEL_NOTE.format(calls="1 call that asks for approval was")


@pytest.mark.parametrize("case", ["--approve no", "a deny only", "the module's own service"])
def test_no_note_when_no_call_was_denied_for_want_of_an_approval_channel(
    cli: Cli, root: Path, piped_stdin: PipedStdin, write_module: Any, case: str
) -> None:
    piped_stdin.close()
    write = {"id": "w", "name": "write_file", "arguments": {"path": "a.md", "content": "x"}}
    if case == "--approve no":
        outcome = cli("run", _batch(root, write), "--tools", "examples.tools", "--approve", "no")
    elif case == "a deny only":
        sudo = {"id": "s", "name": "run_shell", "arguments": {"command": "sudo reboot"}}
        outcome = cli("run", _batch(root, sudo), "--tools", "examples.tools")
    else:
        module = write_module("rejecting_tools", DEFERRING_TOOLS.replace('"deferred"', '"rejected"'))
        outcome = cli("run", _batch(root, {"id": "a", "name": "pay", "arguments": {"to": "bob"}}), "--tools", module)
    assert outcome.code == 0 and "✗ " in outcome.out
    assert outcome.err == ""


def test_the_note_with_the_batch_on_piped_stdin_offers_prompt_only_with_a_batch_file(
    cli: Cli, root: Path, piped_stdin: PipedStdin
) -> None:
    # (--approve prompt is refused with the batch on piped stdin: it could read no answer.)
    call = {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "x"}}
    piped_stdin.send(json.dumps({"calls": [call]}))
    piped_stdin.close()
    outcome = cli("run", "-", "--tools", "examples.tools")
    assert outcome.code == 0 and "write outside scratch/: notes.md" in outcome.out
    assert outcome.err == (
        "dsh-actors run: note: 1 call that asks for approval was denied: there is no terminal to ask on and no "
        "approval service; rerun with --approve yes (allow them) or --approve no (reject them), or save the batch "
        "to a file for --approve prompt (it reads the answers from standard input)\n"
    )


def test_a_write_outside_scratch_runs_when_the_approval_service_allows_it(
    cli: Cli, root: Path, write_module: Any, tmp_path: Path
) -> None:
    answers = tmp_path / "approvals.txt"
    module = write_module(
        "approving_tools",
        f"""
        import examples.tools

        def register(rt):
            examples.tools.register(rt)

            def approve(request):
                with open({str(answers)!r}, "a") as log:
                    log.write(f"{{request.tool_name}} {{request.call_id}}: {{request.reason}}\\n")
                return "allowed-once"

            rt.approvals.set(approve)
        """,
    )
    (root / "notes.md").write_text("old line\nkept\n")
    batch = _batch(
        root,
        {"id": "w1", "name": "write_file", "arguments": {"path": "notes.md", "content": "new line\nkept\n"}},
        {"id": "w2", "name": "write_file", "arguments": {"path": "scratch/a.txt", "content": "a"}},
    )
    outcome = cli("run", batch, "--tools", module)
    assert outcome.code == 0, outcome.err
    assert (root / "notes.md").read_text() == "new line\nkept\n"
    assert answers.read_text() == "write_file w1: write outside scratch/: notes.md\n"  # scratch/ needs none
    assert (
        "--- a/notes.md\n    +++ b/notes.md\n    @@ -1,2 +1,2 @@\n    -old line\n    +new line\n     kept"
        in outcome.out
    )


@pytest.mark.parametrize(("mode", "written"), [("yes", True), ("no", False)])
def test_approve_answers_every_approval_request(cli: Cli, root: Path, mode: str, written: bool) -> None:
    batch = _batch(root, {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "x"}})
    outcome = cli("run", batch, "--tools", "examples.tools", "--approve", mode)
    assert outcome.code == 0
    assert (root / "notes.md").exists() is written
    if not written:
        assert 'Error: the user rejected tool "write_file"' in outcome.out


def test_paths_outside_the_root_folder_are_refused(cli: Cli, root: Path) -> None:
    (root.parent / "secret.txt").write_text("secret")
    batch = _batch(
        root,
        {"id": "r", "name": "read_file", "arguments": {"path": "../secret.txt"}},
        {"id": "a", "name": "read_file", "arguments": {"path": str(root.parent / "secret.txt")}},
        {"id": "s", "name": "search_text", "arguments": {"pattern": "secret", "path": ".."}},
    )
    outcome = cli("run", batch, "--tools", "examples.tools")
    assert outcome.out.count("is outside the root folder") == 3
    assert "secret\n" not in outcome.out
    assert outcome.out.endswith("3 calls: 0 ok, 3 errors\n")


def test_tool_modules_may_give_a_sequence_a_factory_or_a_register_of_the_tools_service(
    cli: Cli, root: Path, write_module: Any
) -> None:
    tool = textwrap.dedent("""
        from dsh_actors import ToolOutput, define_tool, text

        def make(name):
            return define_tool(
                name=name, description="Say hi.", parameters={},
                output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
                execute=lambda args, ctx: "hi from " + name,
            )
    """)
    variants = {
        "as_sequence": tool + "\nTOOLS = [make('hi')]\n",
        "as_factory": tool + "\ndef tools():\n    return (make('hi'),)\n",
        "as_single": tool + "\nHI = make('hi')\n",
        "as_service": tool + "\ndef register(tools):\n    tools.register(make('hi'))\n",
        "as_annotated": tool + "\ndef register(svc: 'ToolsService'):\n    svc.register(make('hi'))\n",
    }
    attrs = {"as_factory": ":tools", "as_single": ":HI"}
    batch = _batch(root, {"id": "c", "name": "hi"})
    for name, source in variants.items():
        path = write_module(name, source)
        outcome = cli("run", batch, "--tools", f"{path}{attrs.get(name, '')}")
        assert outcome.code == 0, (name, outcome.err)
        assert "✓ c hi\n    hi from hi\n1 call: 1 ok, 0 errors\n" == outcome.out, name


def test_a_module_name_is_imported_from_the_current_directory(cli: Cli, root: Path) -> None:
    (root / "cwd_tools_for_the_cli_test.py").write_text("import examples.tools\nregister = examples.tools.register\n")
    outcome = cli("run", BATCH, "--tools", "cwd_tools_for_the_cli_test")
    assert outcome.code == 0, outcome.err
    assert outcome.out.endswith("4 calls: 4 ok, 0 errors\n")


def test_a_tools_file_imports_the_modules_beside_it_as_python_file_does(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # It failed "ModuleNotFoundError: No module named ..." (`python
    # tools.py` finds them: its folder is first on sys.path).
    write_module(
        "helpers_beside_the_tools_file",
        '''
        from dsh_actors import tool

        @tool
        def add(a: int, b: int) -> int:
            """Add."""
            return a + b
        ''',
    )
    tools = write_module("tools_beside_helpers", "from helpers_beside_the_tools_file import add\nTOOLS = [add]\n")
    batch = _batch(root, {"id": "c1", "name": "add", "arguments": {"a": 1, "b": 2}})
    before = list(sys.path)
    try:
        outcome = cli("run", batch, "--tools", tools)
    finally:
        sys.modules.pop("helpers_beside_the_tools_file", None)
    assert outcome.code == 0, outcome.err
    assert outcome.out.endswith("1 call: 1 ok, 0 errors\n")
    # Only until the command ends: one command's folder never stays for the next.
    assert sys.path == before


def test_a_tool_of_a_tools_file_imports_a_module_beside_it_when_it_runs(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # It failed "ModuleNotFoundError: No module named ..." (the folder was on
    # sys.path only while the file was imported; `python tools.py` keeps it).
    write_module("helper_sibling_imported_lazily", "def greet(name):\n    return f'hello {name}'\n")
    tools = write_module(
        "tools_importing_lazily",
        '''
        from dsh_actors import tool

        @tool
        def greet(name: str) -> str:
            """Greet."""
            import helper_sibling_imported_lazily

            return helper_sibling_imported_lazily.greet(name)

        TOOLS = [greet]
        ''',
    )
    batch = _batch(root, {"id": "c1", "name": "greet", "arguments": {"name": "ada"}})
    before, finders_before = list(sys.path), list(sys.meta_path)
    for _ in range(2):  # in-process commands one after another: each as the first
        try:
            outcome = cli("run", batch, "--tools", tools)
        finally:
            sys.modules.pop("helper_sibling_imported_lazily", None)
        assert outcome.code == 0, outcome.err
        assert "hello ada" in outcome.out
        assert outcome.out.endswith("1 call: 1 ok, 0 errors\n")
        assert (sys.path, sys.meta_path) == (before, finders_before)


def test_a_module_beside_a_tools_file_never_stands_in_for_one_the_command_imports(tmp_path: Path) -> None:
    # A process of its own: policies is imported once per process. The folder
    # stays on sys.path for the command, but last: the command's own
    # policies.timeout (run applies it) is still the one it imports.
    folder = tmp_path / "tools_folder"
    folder.mkdir()
    (folder / "policies.py").write_text("raise ImportError('the tools folder policies.py was imported')\n")
    (folder / "helper_sibling_of_a_process.py").write_text("def greet(name):\n    return f'hello {name}'\n")
    (folder / "tools.py").write_text(
        "from dsh_actors import tool\n\n"
        "@tool\n"
        "def greet(name: str) -> str:\n"
        '    """Greet."""\n'
        "    import helper_sibling_of_a_process\n\n"
        "    return helper_sibling_of_a_process.greet(name)\n\n"
        "TOOLS = [greet]\n"
    )
    batch = _batch(tmp_path, {"id": "c1", "name": "greet", "arguments": {"name": "ada"}})
    done = run_cli("run", batch, "--tools", folder / "tools.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hello ada" in done.stdout
    assert done.stdout.endswith("1 call: 1 ok, 0 errors\n"), done.stdout


def test_max_parallel_caps_how_many_calls_overlap(cli: Cli, root: Path, write_module: Any, tmp_path: Path) -> None:
    module = write_module(
        "overlap_tools",
        """
        import threading
        from dsh_actors import ToolOutput, define_tool, text

        barrier = threading.Barrier(3, timeout=10)
        lock = threading.Lock()
        state = {"active": 0, "peak": 0}

        def together(args, ctx):
            barrier.wait()  # passes only if three calls run at once
            return "met"

        def alone(args, ctx):
            with lock:
                state["active"] += 1
                state["peak"] = max(state["peak"], state["active"])
            with lock:
                state["active"] -= 1
            return str(state["peak"])

        def register(rt):
            for name, body in (("together", together), ("alone", alone)):
                rt.tools.register(define_tool(
                    name=name, description=name, parameters={},
                    output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
                    execute=body, is_concurrency_safe=lambda args: True,
                ))
        """,
    )
    together = _batch(tmp_path, *({"id": f"t{i}", "name": "together"} for i in range(3)))
    outcome = cli("run", together, "--tools", module, "--max-parallel", "3", "--json")
    assert [r["value"] for r in json.loads(outcome.out)["results"]] == ["met"] * 3
    alone = _batch(tmp_path, *({"id": f"a{i}", "name": "alone"} for i in range(6)))
    outcome = cli("run", alone, "--tools", module, "--max-parallel", "1", "--json")
    assert [r["value"] for r in json.loads(outcome.out)["results"]] == ["1"] * 6


def test_the_batch_reads_from_standard_input(cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Stdin:
        buffer = __import__("io").BytesIO(b'[{"name": "run_shell", "arguments": {"command": "echo piped"}}]')

        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stdin", Stdin())
    outcome = cli("run", "-", "--tools", "examples.tools")
    assert "$ echo piped\n    piped\n    exit 0\n1 call: 1 ok, 0 errors\n" in outcome.out


def test_an_interrupt_aborts_the_batch_and_waits_for_it_to_settle() -> None:
    future: Future[ToolBatchResult] = Future()
    controller = AbortController()
    settled = ToolBatchResult(results=())
    controller.signal.add_callback(lambda signal: future.set_result(settled))
    interrupts = Interrupts(controller)
    previous = signal.signal(signal.SIGINT, interrupts)
    try:
        # A Ctrl-C before the wait begins (the batch was being submitted) is
        # not lost: the wait aborts the batch when it begins.
        signal.raise_signal(signal.SIGINT)
        assert not controller.signal.aborted
        result, interrupted = interrupts.wait(future)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert controller.signal.aborted and interrupted and result is settled


def test_an_interrupt_while_the_run_waits_aborts_the_batch_from_the_handler() -> None:
    future: Future[ToolBatchResult] = Future()
    controller = AbortController()
    settled = ToolBatchResult(results=())
    settler: list[threading.Thread] = []

    def settle(signal: Any) -> None:
        # The batch settles on another thread, as the runtime's does (never
        # inside the signal handler that aborted it).
        settler.append(threading.Thread(target=future.set_result, args=(settled,)))
        settler[0].start()

    controller.signal.add_callback(settle)
    interrupts = Interrupts(controller)
    previous = signal.signal(signal.SIGINT, interrupts)
    # Another thread presses Ctrl-C (a signal to the process, as a terminal
    # sends it): the handler runs on the main thread, inside the wait or (if
    # it comes first) just before it; either way the batch is aborted and
    # the wait ends with its result.
    presser = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
    try:
        presser.start()
        result, interrupted = interrupts.wait(future)
    finally:
        presser.join()
        signal.signal(signal.SIGINT, previous)
        for thread in settler:
            thread.join()
    assert controller.signal.aborted and interrupted and result is settled


STUBBORN = """
import sys
import threading

from dsh_actors import ToolOutput, define_tool, text


def stubborn(args, ctx):
    sys.stderr.write("body started\\n")
    sys.stderr.flush()
    threading.Event().wait()  # ignores its signal: never returns


TOOLS = [
    define_tool(
        name="stubborn",
        description="never returns",
        parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=stubborn,
    )
]
"""


def test_a_second_ctrl_c_exits_130_at_once_while_a_body_ignores_its_signal(tmp_path: Path) -> None:
    (tmp_path / "stubborn_tools.py").write_text(STUBBORN)
    batch = _batch(tmp_path, {"id": "s", "name": "stubborn", "arguments": {}})
    script = Path(sys.executable).parent / "dsh-actors"
    if not script.exists():
        pytest.skip("the dsh-actors console script is not installed (./dev setup installs it)")
    proc = started_cli([str(script), "run", str(batch), "--tools", "stubborn_tools"], tmp_path)
    try:
        assert proc.stderr is not None
        proc.send_signal(signal.SIGINT)
        assert proc.stderr.readline().startswith("dsh-actors run: interrupted; aborting the batch")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 130  # rt.stop() would wait 30 s for the body
        assert "interrupted again; quitting" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


#: A tool whose card is drawn as a Ctrl-C comes: after the batch settled (as
#: while its results are printed, or the MCP servers and the runtime stop).
PRESSED_WHILE_PRINTING = """
import signal

from dsh_actors import tool


def present_result(args, result):
    signal.raise_signal(signal.SIGINT)  # (the handler runs on this, the main, thread)
    return None


@tool(present_result=present_result)
def done() -> str:
    \"\"\"Done at once.\"\"\"
    return "finished"


TOOLS = [done]
"""


@pytest.mark.parametrize("json_output", [False, True])
def test_a_ctrl_c_after_the_batch_settled_exits_130_and_says_it_only_finishes(
    cli: Cli, root: Path, write_module: Any, json_output: bool
) -> None:
    # (It said "aborting the batch" of a batch that had ended, and the command exited 0.)
    module = write_module("pressed_tools", PRESSED_WHILE_PRINTING)
    batch = _batch(root, {"id": "d", "name": "done", "arguments": {}})
    outcome = cli("run", batch, "--tools", module, *(["--json"] if json_output else []))
    assert outcome.code == 130, outcome
    assert outcome.err == (
        "dsh-actors run: interrupted; the batch has ended; finishing (Ctrl-C again to quit at once)\n"
    )
    if json_output:
        assert json.loads(outcome.out)["results"][0]["value"] == "finished"
    else:
        assert outcome.out == "✓ d done\n    finished\n1 call: 1 ok, 0 errors\n"


# --------------------------------------------------------------------------
# A batch that cannot run: exit 1 and one line on stderr
# --------------------------------------------------------------------------


def _bad_inputs(root: Path, write_module: Any) -> dict[str, tuple[list[Any], list[str]]]:
    (root / "not_json.json").write_text("{")
    (root / "shape.json").write_text('{"messages": []}')
    (root / "used.jsonl").write_text('{"type": "tool/call"}\n')
    no_output = write_module(
        "no_output",
        """
        from dsh_actors import ToolDefinition
        TOOLS = [ToolDefinition(name="x", description="", parameters={"type": "object"}, execute=lambda a, c: 1)]
        """,
    )
    raising = write_module("raising", "def register(rt):\n    raise RuntimeError('no database')\n")
    broken = write_module("broken", "def register(rt:\n")
    needs_dep = write_module("needs_dep", "import a_dependency_that_is_not_installed\n")
    invalid_tool = write_module(
        "invalid_tool",
        """
        from dsh_actors import ToolOutput, define_tool, text
        TOOLS = [define_tool(name="x", description="", parameters={"q": {"type": "strng"}},
                             output=ToolOutput(schema={"type": "string"}, render=lambda a, v: []),
                             execute=lambda a, c: "")]
        """,
    )
    wrong_items = write_module("wrong_items", "TOOLS = ['read_file']\n")
    nothing = write_module("nothing", "X = 1\n")
    batch = str(BATCH)
    return {
        "missing file": (["missing.json", "--tools", "examples.tools"], ["missing.json: no such file"]),
        "not JSON": (["not_json.json", "--tools", "examples.tools"], ["not_json.json: not valid JSON"]),
        "unknown shape": (["shape.json", "--tools", "examples.tools"], ["unknown batch shape", "accepted: ours"]),
        "unknown module": (
            [batch, "--tools", "no_such_module_anywhere"],
            ["no module named 'no_such_module_anywhere'"],
        ),
        "missing file module": ([batch, "--tools", "nowhere/tools.py"], ["no such file 'nowhere/tools.py'"]),
        "bad ATTR": ([batch, "--tools", "examples.tools:nope"], ["examples.tools has no attribute 'nope'"]),
        "no default ATTR": ([batch, "--tools", str(nothing)], ["has neither register(rt) nor TOOLS"]),
        "ATTR of the wrong type": (
            [batch, "--tools", f"{nothing}:X"],
            ["X is an int; expected register(rt), a ToolDefinition"],
        ),
        "not definitions": ([batch, "--tools", str(wrong_items)], ["TOOLS[0] is a str, not a ToolDefinition"]),
        "registration fails": ([batch, "--tools", str(no_output)], ['cannot register tool "x": output is required']),
        "invalid definition": ([batch, "--tools", str(invalid_tool)], ["a tool in", "is invalid", "parameters.q.type"]),
        "register raises": (
            [batch, "--tools", str(raising)],
            ["raising.py: register(...) failed: RuntimeError: no database"],
        ),
        "syntax error": ([batch, "--tools", str(broken)], ["importing", "failed: SyntaxError"]),
        "missing dependency": (
            [batch, "--tools", str(needs_dep)],
            ["No module named 'a_dependency_that_is_not_installed'"],
        ),
        "used log": ([batch, "--tools", "examples.tools", "--log", "used.jsonl"], ["the file is not empty"]),
        "log folder missing": (
            [batch, "--tools", "examples.tools", "--log", "no/dir/x.jsonl"],
            ["the folder 'no/dir' does not exist"],
        ),
    }


def test_every_batch_that_cannot_run_exits_1_with_one_line_and_no_traceback(
    cli: Cli, root: Path, write_module: Any
) -> None:
    for _case, (argv, fragments) in _bad_inputs(root, write_module).items():
        outcome = cli("run", *argv)
        assert_one_line_error(outcome, "run", *fragments)
    assert not (root / "scratch").exists(), "no batch ran"


def test_a_register_that_exits_or_raises_a_base_exception_fails_like_an_import_does(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # register(rt) raising SystemExit(4) exited 4 without a word, and a bare
    # BaseException (at import too) printed a traceback; at import time a
    # SystemExit was already one line, exit 1. Ctrl-C still interrupts.
    exits = write_module("exits", "def register(rt):\n    raise SystemExit(4)\n")
    base = write_module("base", "def register(rt):\n    raise BaseException('base')\n")
    base_at_import = write_module("base_at_import", "raise BaseException('at import')\n")
    exits_at_import = write_module("exits_at_import", "import sys\nsys.exit(4)\n")
    for command, before in (("run", [BATCH]), ("schemas", [])):
        cases = {
            exits: "exits.py: register(...) failed: SystemExit: 4",
            base: "base.py: register(...) failed: BaseException: base",
            base_at_import: "base_at_import.py failed: BaseException: at import",
            exits_at_import: "exits_at_import.py failed: SystemExit: 4",
        }
        for module, fragment in cases.items():
            assert_one_line_error(cli(command, *before, "--tools", module), command, fragment)
    interrupted = write_module("interrupted", "def register(rt):\n    raise KeyboardInterrupt\n")
    outcome = cli("run", BATCH, "--tools", interrupted)
    assert (outcome.code, outcome.err) == (130, "dsh-actors run: error: interrupted\n")
    assert not (root / "scratch").exists(), "no batch ran"


def test_a_log_another_session_holds_is_a_user_error_before_anything_runs(cli: Cli, root: Path) -> None:
    # It was the right message, labelled "internal error ... (DSH_ACTORS_DEBUG=1
    # shows the traceback)", after the tools were loaded.
    from dsh_actors.session import Session

    held = root / "held.jsonl"
    held.touch()
    with Session.open(held) as other:
        other.hold()
        outcome = cli("run", BATCH, "--tools", "examples.tools", "--log", held)
    assert_one_line_error(
        outcome, "run", f"--log {held}: ", "is being written by another Session", "Close that session"
    )
    assert "internal error" not in outcome.err and "DSH_ACTORS_DEBUG" not in outcome.err
    assert not (root / "scratch").exists(), "no batch ran"
    assert held.exists() and held.read_bytes() == b"", "the other session's file is left alone"


@pytest.mark.parametrize("kind", ["/dev/null", "fifo"])
def test_a_log_that_is_not_a_regular_file_is_refused_before_anything_runs(cli: Cli, root: Path, kind: str) -> None:
    # The cards are read back from the log: /dev/null printed "0 calls" after
    # running the batch, a FIFO "internal error: OSError: Illegal seek".
    if kind == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        log = root / "log.fifo"
        os.mkfifo(log)
    else:
        log = Path(kind)
        if not log.exists():
            pytest.skip("no /dev/null here")
    outcome = cli("run", BATCH, "--tools", "examples.tools", "--log", log)
    assert_one_line_error(outcome, "run", f"--log {log}: not a regular file", "name a new file", "leave out --log")
    assert not (root / "scratch").exists(), "no batch ran"


def test_a_missing_ptc_executor_is_a_clear_error(cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "executors.ptc", None)  # import raises ModuleNotFoundError
    outcome = cli("run", BATCH, "--tools", "examples.tools", "--executor", "ptc", "--log", "x.jsonl")
    assert_one_line_error(outcome, "run", "--executor ptc: the PTC executor is not installed")
    assert not (root / "x.jsonl").exists(), "a batch that never ran leaves no log"


def test_a_missing_approval_prompt_is_a_clear_error_naming_the_way_out(
    cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "policies.approval", None)  # import raises ModuleNotFoundError
    outcome = cli("run", BATCH, "--tools", "examples.tools", "--approve", "prompt")
    assert_one_line_error(
        outcome,
        "run",
        "the approval prompt: not installed (no module policies.approval); "
        "reinstall dsh-actors, or run with --approve yes or --approve no",
    )
    assert cli("run", BATCH, "--tools", "examples.tools", "--approve", "no").code == 0


def test_the_ptc_executor_runs_the_batch_when_it_is_installed(
    cli: Cli, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = _fake_ptc_module()
    monkeypatch.setitem(sys.modules, "executors.ptc", fake)
    outcome = cli("run", BATCH, "--tools", "examples.tools", "--executor", "ptc", "--json")
    assert outcome.code == 0, outcome.err
    assert fake.PtcExecutor.batches == [4]


def _fake_ptc_module() -> Any:
    import types

    from dsh_actors import ToolModelInput

    class PtcExecutor:
        batches: list[int] = []

        def __init__(self) -> None:
            self.native: Any = None

        def bind(self, rt: Any) -> None:
            self.native = rt.native_executor

        def describe(self, tools: Any) -> ToolModelInput:
            run_code = {"name": "run_code", "description": "Run a Python program.", "parameters": {"type": "object"}}
            return ToolModelInput(schemas=(run_code,), known_names=("run_code",))

        def execute(self, batch: Any) -> Any:
            PtcExecutor.batches.append(len(batch.calls))
            return self.native.execute(batch)

    module = types.ModuleType("executors.ptc")
    module.PtcExecutor = PtcExecutor  # type: ignore[attr-defined]
    return module


def test_a_bad_command_line_exits_2_with_the_usage(cli: Cli, root: Path) -> None:
    for argv in (
        ["run", BATCH],
        ["run", BATCH, "--tools", "examples.tools", "--max-parallel", "0"],
        ["frobnicate"],
        [],
    ):
        outcome = cli(*argv)
        assert outcome.code == 2, argv
        assert "usage: dsh-actors" in outcome.err and "Traceback" not in outcome.err


def test_an_unknown_option_prints_the_subcommands_usage(cli: Cli, root: Path) -> None:
    for argv, usage in (
        (["run", BATCH, "--tools", "examples.tools", "--bogus"], "usage: dsh-actors run "),
        (["schemas", "--tools", "examples.tools", "--bogus"], "usage: dsh-actors schemas "),
        (["replay", "log.jsonl", "--bogus", "x"], "usage: dsh-actors replay "),
    ):
        outcome = cli(*argv)
        assert outcome.code == 2, argv
        assert outcome.err.startswith(usage), outcome.err
        unknown = "--bogus x" if argv[0] == "replay" else "--bogus"
        assert outcome.err.rstrip().endswith(f"error: unrecognized arguments: {unknown}")


def test_an_unknown_option_before_the_command_is_reported_as_such(cli: Cli) -> None:
    # It said "the following arguments are required: COMMAND".
    for argv, error in (
        (["--bogus"], "dsh-actors: error: unrecognized arguments: --bogus"),
        (["-v", "--bogus", "-x"], "dsh-actors: error: unrecognized arguments: --bogus -x"),
        ([], "dsh-actors: error: the following arguments are required: COMMAND"),
        (["-v"], "dsh-actors: error: the following arguments are required: COMMAND"),
    ):
        outcome = cli(*argv)
        assert outcome.code == 2, argv
        assert outcome.err.startswith("usage: dsh-actors [-h] [--version] [-v] COMMAND ...\n"), outcome.err
        assert outcome.err.rstrip().endswith(error), outcome.err


def test_help_and_version_exit_0(cli: Cli) -> None:
    top = cli("--help")
    assert top.code == 0
    for command in ("run", "resume", "schemas", "replay", "bench"):
        assert command in top.out
    assert "exit status" in top.out
    run_help = cli("run", "--help")
    assert run_help.code == 0 and "--max-parallel" in run_help.out and "tool_use" in run_help.out
    version = cli("--version")
    assert version.code == 0 and version.out.startswith("dsh-actors ")


@pytest.mark.parametrize(
    ("command", "example"),
    [
        ("run", '  dsh-actors run examples/batch_mcp.json --mcp "python -m examples.mcp_server"\n'),
        ("schemas", "  dsh-actors schemas --tools examples.tools --format anthropic\n"),
        ("replay", "  dsh-actors replay run.jsonl --tools examples.tools\n"),
        ("resume", "  dsh-actors resume suspended.json --log run.jsonl --tools my_tools.py --approve prompt\n"),
    ],
)
def test_each_commands_help_shows_examples_one_a_line_and_every_exit_status(
    cli: Cli, command: str, example: str
) -> None:
    # (Only the top-level help had examples; schemas and replay told no exit status.)
    outcome = cli(command, "--help")
    assert outcome.code == 0 and outcome.err == ""
    assert "\nexamples:\n" in outcome.out and example in outcome.out
    statuses = " ".join(outcome.out.partition("exit status:")[2].partition("examples:")[0].split())
    for status in ("0 when", "1 when", "2 for a bad command line", "74 when", "130 when interrupted"):
        assert status in statuses, (status, statuses)


def test_approve_s_help_says_a_tools_module_s_own_service_is_kept_by_default(
    cli: Cli, root: Path, write_module: Any
) -> None:
    # (It said "no approval service: asking calls are denied" without a
    # terminal, while the module's own service answers them.)
    run_help = " ".join(cli("run", "--help").out.split())
    assert (
        "it wins over an approval service the --tools module sets (default: the module's own service if it sets "
        "one, else prompt when stdin and stderr are terminals, else none: asking calls are denied)"
    ) in run_help
    module = write_module("deferring_tools", DEFERRING_TOOLS.replace('"deferred"', '"allowed-once"'))
    batch = _batch(root, {"id": "a", "name": "pay", "arguments": {"to": "bob"}})
    outcome = cli("run", batch, "--tools", module)  # (stdin is no terminal here)
    assert outcome.code == 0 and "✓ a pay" in outcome.out and "paid bob" in outcome.out


def test_a_command_leaves_no_thread_behind(cli: Cli, root: Path) -> None:
    before = set(threading.enumerate())
    cli("run", BATCH, "--tools", "examples.tools")
    assert {t for t in threading.enumerate() if t.is_alive()} - before == set()


@pytest.mark.parametrize(
    ("answers", "asked", "written", "error"),
    [
        ("y\n", 1, True, None),
        ("maybe\nalways\n", 2, True, None),  # anything else asks again
        ("n\n", 1, False, 'Error: the user rejected tool "write_file"'),
        ("", 1, False, 'Error: tool "write_file" requires approval, but no approval channel is available'),
    ],
)
def test_approve_prompt_asks_on_stderr_and_reads_the_answer_from_stdin(
    cli: Cli, root: Path, piped_stdin: PipedStdin, answers: str, asked: int, written: bool, error: str | None
) -> None:
    piped_stdin.send(answers)
    piped_stdin.close()
    batch = _batch(root, {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "x"}})
    outcome = cli("run", batch, "--tools", "examples.tools", "--approve", "prompt")
    assert outcome.code == 0, outcome.err
    assert (root / "notes.md").exists() is written
    if error is not None:
        assert error in outcome.out
    # policies.approval's TerminalPrompt, on stderr (stdout keeps the cards)
    assert "Tool call needs approval\n  agent:     cli\n  tool:      write_file\n  call:      w\n" in outcome.err
    assert "  reason:    Allow writing notes.md (outside scratch/)?\n  arguments:\n" in outcome.err
    assert outcome.err.count("Allow? [y]es / [n]o / [a]lways / never: ") == asked
    assert "Tool call needs approval" not in outcome.out


def test_approve_prompt_with_the_batch_on_piped_stdin_is_refused_naming_the_fix(
    cli: Cli, root: Path, piped_stdin: PipedStdin
) -> None:
    # Reading the batch takes the pipe to its end: no question could be answered
    # (each asking call was denied, "no approval channel is available").
    call = {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "x"}}
    piped_stdin.send(json.dumps({"calls": [call]}))
    piped_stdin.close()
    outcome = cli("run", "-", "--tools", "examples.tools", "--approve", "prompt")
    assert_one_line_error(
        outcome,
        "run",
        "--approve prompt reads its answers from standard input, which holds the batch ('-')",
        "save the batch to a file",
        "--approve yes or no",
    )
    assert not (root / "notes.md").exists()


class PromptSeen:
    """``sys.stderr`` that passes everything on to the captured stream and
    sets ``asked`` once the approval question has been written (the prompt
    then waits for its answer)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.asked = threading.Event()

    def write(self, text: str) -> int:
        written = self.stream.write(text)
        if "needs approval" in text:
            self.asked.set()
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def test_a_ctrl_c_while_the_prompt_waits_cancels_the_question_and_prints_the_results(
    cli: Cli, root: Path, piped_stdin: PipedStdin, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The old prompt blocked in sys.stdin.readline(): the run waited for a
    # line that never came (here: until the presser gave up and closed the
    # input), then reported no approval channel rather than the abort.
    stderr = PromptSeen(sys.stderr)
    monkeypatch.setattr(sys, "stderr", stderr)
    finished = threading.Event()

    def press_ctrl_c() -> None:
        if stderr.asked.wait(10):
            os.kill(os.getpid(), signal.SIGINT)  # the run's own handler aborts the batch
        if not finished.wait(10):
            piped_stdin.close()  # (only a prompt deaf to the abort gets here: let it end)

    batch = _batch(
        root,
        {"id": "w", "name": "write_file", "arguments": {"path": "notes.md", "content": "x"}},
        {"id": "s", "name": "write_file", "arguments": {"path": "scratch/a.txt", "content": "a"}},
    )
    presser = threading.Thread(target=press_ctrl_c)
    presser.start()
    try:
        outcome = cli("run", batch, "--tools", "examples.tools", "--approve", "prompt", "--max-parallel", "1")
    finally:
        finished.set()
        presser.join()
    assert stderr.asked.is_set()
    assert outcome.code == 130
    assert "dsh-actors run: interrupted; aborting the batch" in outcome.err
    assert "approval cancelled\n" in outcome.err
    assert not (root / "notes.md").exists()
    assert 'Error: approval for tool "write_file" was cancelled' in outcome.out
    assert outcome.out.endswith("2 calls: 0 ok, 2 errors\n")


_NOISY_TOOLS = """
from dsh_actors import ToolOutput, define_tool, text

def register(rt):
    rt.tools.register(define_tool(
        name="hi", description="Say hi.", parameters={},
        output=ToolOutput(schema={"type": "string"}, render=lambda a, v: [text(v)]),
        execute=lambda args, ctx: "hi",
    ))
    def broken_observer(execution, result):
        raise ZeroDivisionError("observer bug")
    rt.events.on("tools/result", broken_observer)
"""


def test_the_command_shows_the_runtimes_errors_as_one_line_each(cli: Cli, root: Path, write_module: Any) -> None:
    module = write_module("noisy_tools", _NOISY_TOOLS)
    outcome = cli("run", _batch(root, {"id": "c", "name": "hi"}), "--tools", str(module))
    assert outcome.code == 0 and outcome.out.endswith("1 call: 1 ok, 0 errors\n")
    lines = outcome.err.splitlines()
    assert len(lines) == 1, outcome.err
    assert lines[0].startswith("dsh-actors: ERROR: tools/result listener") and "observer bug" in lines[0]
    assert "Traceback" not in outcome.err and "DEBUG" not in outcome.err


@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_shows_full_records_with_tracebacks(cli: Cli, root: Path, write_module: Any, where: str) -> None:
    module = write_module("noisy_tools", _NOISY_TOOLS)
    args = ["run", str(_batch(root, {"id": "c", "name": "hi"})), "--tools", str(module)]
    outcome = cli(*(["--verbose", *args] if where == "before" else [*args, "-v"]))
    assert outcome.code == 0
    assert "| ERROR    | dsh_actors.events._bus:emit" in outcome.err
    assert "Traceback" in outcome.err and "ZeroDivisionError: observer bug" in outcome.err


def test_the_command_leaves_the_libraries_silent_again_when_it_returns(cli: Cli, root: Path, write_module: Any) -> None:
    from loguru import logger

    module = write_module("noisy_tools", _NOISY_TOOLS)
    cli("run", _batch(root, {"id": "c", "name": "hi"}), "--tools", str(module), "--verbose")
    records: list[str] = []
    sink = logger.add(lambda message: records.append(str(message)), level="DEBUG")
    try:
        from dsh_actors.events import EventBus

        bus = EventBus()
        bus.on("x", lambda: 1 / 0)
        bus.emit("x")
    finally:
        logger.remove(sink)
    assert records == []
