"""policies.approval.TerminalPrompt: driven with injected streams, a pipe,
and a pseudo-terminal. Threads and Events only; every wait is bounded."""

from __future__ import annotations

import io
import os
import select
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from policy_helpers import WAIT, call, run_one, tool

import policies
from dsh_actors import AbortController, AbortSignal, Agent, ApprovalRequest, Ask, ToolBatchInput, materialize
from policies.approval import PROMPT, Answer, RememberingService, TerminalPrompt, printable

MAIN = Agent("main")


def request(
    signal: AbortSignal | None = None,
    *,
    tool_name: str = "bash",
    reason: str | None = "it runs a command",
    display_reason: Any = None,
    **arguments: Any,
) -> ApprovalRequest:
    return ApprovalRequest(
        agent=MAIN,
        tool_name=tool_name,
        call_id="c1",
        reason=reason,
        display_reason=display_reason,
        signal=AbortSignal() if signal is None else signal,
        arguments=materialize(arguments or {"command": "ls"}),
    )


class WatchedOutput(io.StringIO):
    """A text stream that sets ``prompted`` once the question was written."""

    def __init__(self) -> None:
        super().__init__()
        self.prompted = threading.Event()

    def write(self, s: str) -> int:
        n = super().write(s)
        if PROMPT in self.getvalue():
            self.prompted.set()
        return n


def prompt_with(text: str) -> tuple[TerminalPrompt, io.StringIO]:
    output = io.StringIO()
    return TerminalPrompt(io.StringIO(text), output), output


# -- injected streams ------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("y\n", Answer("allowed-once")),
        ("YES\n", Answer("allowed-once")),
        ("n\n", Answer("rejected")),
        ("no\n", Answer("rejected")),
        ("a\n", Answer("allowed-once", remember=True)),
        ("always\n", Answer("allowed-once", remember=True)),
        ("never\n", Answer("rejected", remember=True)),
        ("  y  \n", Answer("allowed-once")),
    ],
)
def test_each_answer_maps_to_its_decision(typed: str, expected: Answer) -> None:
    prompt, _ = prompt_with(typed)
    assert prompt.decide(request()) == expected
    if expected.remember:  # "always" / "never": the same call is answered from memory
        assert prompt.decide(request()) == Answer(expected.answer)
        assert prompt(request(command="other")) == "unavailable"  # the input is used up now
    else:
        assert prompt(request()) == "unavailable"


def test_an_unknown_answer_asks_again() -> None:
    prompt, output = prompt_with("maybe\n\ny\n")
    assert prompt(request()) == "allowed-once"
    assert output.getvalue().count(PROMPT) == 3
    assert "please answer y, n, a (always) or never" in output.getvalue()


def test_end_of_input_is_unavailable() -> None:
    prompt, output = prompt_with("")
    assert prompt(request()) == "unavailable"
    assert "input closed" in output.getvalue()


def test_the_prompt_shows_the_tool_the_reason_and_the_arguments() -> None:
    prompt, output = prompt_with("y\n")
    prompt(request(command="ls -la", cwd="/tmp"))
    shown = output.getvalue()
    assert "tool:      bash" in shown
    assert "agent:     main" in shown
    assert "reason:    it runs a command" in shown
    assert '"command": "ls -la"' in shown and '"cwd": "/tmp"' in shown


def test_the_display_reason_is_shown_in_the_prompts_locale_with_english_as_fallback() -> None:
    display = {"en": "Run a shell command?", "fr": "Lancer une commande ?"}
    output = io.StringIO()
    TerminalPrompt(io.StringIO("y\n"), output, locale="fr")(request(display_reason=display))
    assert "reason:    Lancer une commande ?" in output.getvalue()
    output = io.StringIO()
    TerminalPrompt(io.StringIO("y\n"), output, locale="de")(request(display_reason=display))
    assert "reason:    Run a shell command?" in output.getvalue()


def test_control_characters_from_the_model_are_escaped() -> None:
    prompt, output = prompt_with("n\n")
    prompt(request(tool_name="ba\x1b[2Jsh", reason="ok\u202eevil", command="\x1b]0;owned\x07"))
    shown = output.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "ba\\x1b[2Jsh" in shown
    assert printable("a\nb") == "a\\x0ab"
    assert printable("a\nb", keep_newlines=True) == "a\nb"


def test_long_arguments_are_cut() -> None:
    output = io.StringIO()
    TerminalPrompt(io.StringIO("y\n"), output, max_argument_chars=50)(request(blob="x" * 500))
    assert "more characters)" in output.getvalue()
    assert "x" * 100 not in output.getvalue()


def test_an_already_aborted_request_is_cancelled_without_reading() -> None:
    controller = AbortController()
    controller.abort()
    prompt, _ = prompt_with("y\n")
    assert prompt(request(controller.signal)) == "cancelled"


def test_always_through_the_runtime_is_remembered_for_the_same_call_only(rt: Any) -> None:
    output = io.StringIO()
    service = RememberingService(TerminalPrompt(io.StringIO("a\nn\n"), output))
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="ask"))
    rt.use(policies.approval, service=service)
    rt.tools.register(tool("echo"))

    first = run_one(rt, call("echo", id="c1", message="hi"), agent=MAIN)
    again = run_one(rt, call("echo", id="c2", message="hi"), agent=MAIN)
    other = run_one(rt, call("echo", id="c3", message="bye"), agent=MAIN)

    assert not first.is_error and not again.is_error
    assert other.error is not None and other.error.message == 'the user rejected tool "echo"'
    assert output.getvalue().count(PROMPT) == 2  # asked for c1 and c3 only


def test_the_prompt_alone_remembers_always_and_never_for_the_same_call_only(rt: Any) -> None:
    output = io.StringIO()
    prompt = TerminalPrompt(io.StringIO("a\nnever\ny\n"), output)
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="ask"))
    rt.approvals.set(prompt)
    rt.tools.register(tool("echo"))

    first = run_one(rt, call("echo", id="c1", message="hi"), agent=MAIN)
    again = run_one(rt, call("echo", id="c2", message="hi"), agent=MAIN)
    other = run_one(rt, call("echo", id="c3", message="bye"), agent=MAIN)
    other_again = run_one(rt, call("echo", id="c4", message="bye"), agent=MAIN)
    elsewhere = run_one(rt, call("echo", id="c5", message="hi"), agent=Agent("sub"))

    assert not first.is_error and not again.is_error and not elsewhere.is_error
    for rejected in (other, other_again):
        assert rejected.error is not None and rejected.error.message == 'the user rejected tool "echo"'
    assert output.getvalue().count(PROMPT) == 3  # c1, c3 and (another agent) c5
    assert len(prompt) == 2


def test_forget_and_remember_false_make_the_prompt_ask_again() -> None:
    prompt, output = prompt_with("a\ny\n")
    assert prompt(request()) == "allowed-once"
    prompt.forget("other_tool")
    assert prompt(request()) == "allowed-once" and output.getvalue().count(PROMPT) == 1
    prompt.forget()
    assert prompt(request()) == "allowed-once" and output.getvalue().count(PROMPT) == 2

    forgetful = TerminalPrompt(io.StringIO("a\n"), io.StringIO(), remember=False)
    assert forgetful.decide(request()) == Answer("allowed-once", remember=True)
    assert forgetful(request()) == "unavailable" and len(forgetful) == 0
    assert forgetful and RememberingService(forgetful), "a service with nothing remembered is still truthy"


def test_forgetting_in_a_remembering_service_also_forgets_in_the_prompt_it_wraps() -> None:
    prompt, output = prompt_with("a\ny\n")
    service = RememberingService(prompt)
    assert service(request()) == "allowed-once"
    service.forget()
    assert len(prompt) == 0 and len(service) == 0
    assert service(request()) == "allowed-once" and output.getvalue().count(PROMPT) == 2


# -- a pipe: the signal wakes a blocked read ------------------------------------------


@pytest.fixture
def pipe() -> Iterator[tuple[io.TextIOWrapper, io.TextIOWrapper]]:
    r, w = os.pipe()
    reader = os.fdopen(r, "r")
    writer = os.fdopen(w, "w")
    try:
        yield reader, writer
    finally:
        reader.close()
        if not writer.closed:
            writer.close()


def test_a_prompt_blocked_on_its_input_answers_cancelled_when_the_signal_fires(
    pipe: tuple[io.TextIOWrapper, io.TextIOWrapper],
) -> None:
    reader, _ = pipe
    output = WatchedOutput()
    controller = AbortController()
    answers: list[str] = []
    worker = threading.Thread(target=lambda: answers.append(TerminalPrompt(reader, output)(request(controller.signal))))
    worker.start()
    assert output.prompted.wait(WAIT)
    controller.abort()
    worker.join(WAIT)
    assert answers == ["cancelled"]
    assert "approval cancelled" in output.getvalue()


def test_a_pipe_answer_and_a_closed_pipe(pipe: tuple[io.TextIOWrapper, io.TextIOWrapper]) -> None:
    reader, writer = pipe
    prompt = TerminalPrompt(reader, io.StringIO())
    writer.write("y\nnever\n")  # two answers in one write: the second is kept for the next prompt
    writer.flush()
    assert prompt.decide(request()) == Answer("allowed-once")
    assert prompt.decide(request()) == Answer("rejected", remember=True)
    writer.close()
    assert prompt(request()) == "rejected"  # "never" is remembered: no prompt
    assert prompt(request(command="other")) == "unavailable"


def test_the_batch_abort_cancels_a_pending_prompt_through_the_runtime(
    rt: Any, pipe: tuple[io.TextIOWrapper, io.TextIOWrapper]
) -> None:
    reader, _ = pipe
    output = WatchedOutput()
    controller = AbortController()
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="ask"))
    rt.use(policies.approval, service=TerminalPrompt(reader, output))
    rt.tools.register(tool("echo"))

    future = rt.tools.submit(ToolBatchInput(calls=[call("echo")], agent=MAIN, signal=controller.signal))
    assert output.prompted.wait(WAIT)
    controller.abort()
    result = future.result(WAIT).results[0].result

    assert result.error is not None and result.error.message == 'approval for tool "echo" was cancelled'


def test_a_second_request_waits_its_turn_and_can_be_cancelled_while_waiting(
    pipe: tuple[io.TextIOWrapper, io.TextIOWrapper],
) -> None:
    reader, writer = pipe
    output = WatchedOutput()
    prompt = TerminalPrompt(reader, output)
    first: list[str] = []
    second: list[str] = []
    waiting = AbortController()
    holder = threading.Thread(target=lambda: first.append(prompt(request())))
    holder.start()
    assert output.prompted.wait(WAIT)  # the first request holds the terminal
    contender = threading.Thread(target=lambda: second.append(prompt(request(waiting.signal))))
    contender.start()
    waiting.abort()
    contender.join(WAIT)
    assert second == ["cancelled"]
    assert output.getvalue().count(PROMPT) == 1  # the second was never shown
    writer.write("y\n")
    writer.flush()
    holder.join(WAIT)
    assert first == ["allowed-once"]


# -- a pseudo-terminal --------------------------------------------------------------


class Terminal:
    """The far side of a pty: what a person at the terminal sees and types."""

    def __init__(self) -> None:
        self.master, slave = os.openpty()
        self.tty_in = os.fdopen(slave, "r", closefd=False)
        self.tty_out = os.fdopen(slave, "w", closefd=True)
        self.seen = b""

    def wait_for(self, text: str) -> str:
        """Read the screen until ``text`` appears (bounded by WAIT)."""
        want = text.encode()
        deadline_reads = 0
        while want not in self.seen:
            ready, _, _ = select.select([self.master], [], [], WAIT)
            assert ready, f"the terminal never showed {text!r}; it shows {self.seen!r}"
            self.seen += os.read(self.master, 4096)
            deadline_reads += 1
            assert deadline_reads < 10_000
        return self.seen.decode("utf-8", "replace")

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def hang_up(self) -> None:
        if self.master >= 0:
            os.close(self.master)
            self.master = -1

    def close(self) -> None:
        self.hang_up()
        self.tty_in.close()
        try:
            self.tty_out.close()  # closes the descriptor even when the final flush fails
        except OSError:  # EIO: output still buffered for a terminal that hung up
            pass
        assert self.tty_out.closed


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    term = Terminal()
    try:
        yield term
    finally:
        term.close()


def test_a_person_at_a_terminal_approves_a_call(rt: Any, terminal: Terminal) -> None:
    rt.events.on("tools/pre-execute", lambda execution, next_: Ask(reason="needs a person"))
    rt.use(policies.approval, service=TerminalPrompt(terminal.tty_in, terminal.tty_out))
    rt.tools.register(tool("echo"))

    future = rt.tools.submit(ToolBatchInput(calls=[call("echo", message="hi")], agent=MAIN))
    screen = terminal.wait_for(PROMPT)
    terminal.type("y\n")
    result = future.result(WAIT).results[0].result

    assert "tool:      echo" in screen and "reason:    needs a person" in screen
    assert not result.is_error and result.value == "hi"


def test_a_person_at_a_terminal_rejects_after_a_wrong_answer(terminal: Terminal) -> None:
    prompt = TerminalPrompt(terminal.tty_in, terminal.tty_out)
    answers: list[Answer] = []
    worker = threading.Thread(target=lambda: answers.append(prompt.decide(request())))
    worker.start()
    terminal.wait_for(PROMPT)
    terminal.type("perhaps\n")
    terminal.wait_for("please answer")
    terminal.type("never\n")
    worker.join(WAIT)
    assert answers == [Answer("rejected", remember=True)]


def test_a_terminal_prompt_is_cancelled_by_the_signal(terminal: Terminal) -> None:
    prompt = TerminalPrompt(terminal.tty_in, terminal.tty_out)
    controller = AbortController()
    answers: list[str] = []
    worker = threading.Thread(target=lambda: answers.append(prompt(request(controller.signal))))
    worker.start()
    terminal.wait_for(PROMPT)
    controller.abort()
    worker.join(WAIT)
    assert answers == ["cancelled"]
    terminal.wait_for("approval cancelled")


def test_a_terminal_that_hangs_up_is_unavailable(terminal: Terminal) -> None:
    prompt = TerminalPrompt(terminal.tty_in, terminal.tty_out)
    answers: list[str] = []
    worker = threading.Thread(target=lambda: answers.append(prompt(request())))
    worker.start()
    terminal.wait_for(PROMPT)
    terminal.hang_up()
    worker.join(WAIT)
    assert answers == ["unavailable"]


def test_once_input_that_is_not_a_terminal_ended_later_requests_are_unavailable_in_one_line(tmp_path: Any) -> None:
    out = io.StringIO()
    empty = tmp_path / "empty"
    empty.write_text("")
    with open(empty) as closed:  # a file at its end, as </dev/null gives (a descriptor, not a terminal)
        prompt = TerminalPrompt(input=closed, output=out, remember=False)
        assert prompt(request()) == "unavailable"
        first = out.getvalue()
        assert "Tool call needs approval" in first and first.endswith("no answer (input closed)\n")
        assert prompt(request(tool_name="rm")) == "unavailable"
        assert out.getvalue()[len(first) :] == 'no answer for tool "rm" (input closed)\n'


def test_a_terminals_end_of_input_is_asked_again_next_time() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = io.StringIO()
    prompt = TerminalPrompt(input=Tty(""), output=out, remember=False)
    assert prompt(request()) == "unavailable"  # Ctrl-D
    assert prompt(request()) == "unavailable"
    assert out.getvalue().count("Tool call needs approval") == 2  # (asked again: a terminal reads on)


def test_answers_in_a_file_are_read(tmp_path: Any) -> None:
    # (``< answers.txt``: epoll cannot wait on a regular file, which is always ready.)
    answers = tmp_path / "answers"
    answers.write_text("y\nnever\n")
    with open(answers) as given:
        prompt = TerminalPrompt(input=given, output=io.StringIO())
        assert prompt.decide(request()) == Answer("allowed-once")
        assert prompt.decide(request(command="rm")) == Answer("rejected", remember=True)
        assert prompt(request(command="other")) == "unavailable"  # its end


@pytest.mark.parametrize("missing", ["stdin", "stdout"])
def test_a_process_without_standard_input_or_output_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    # (sys.stdin / sys.stdout are None in a process started without them: a service, ``0<&-``.)
    monkeypatch.setattr(sys, missing, None)
    assert TerminalPrompt()(request()) == "unavailable"
    if missing == "stdin":
        assert capsys.readouterr().out == 'no answer for tool "bash" (input closed)\n'
