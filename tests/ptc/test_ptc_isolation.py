"""Isolation (SPEC section 7): the program runs in a separate, limited
process that is killed with its whole process group when it runs too
long, uses too much memory, prints too much, forks, or its batch is
aborted; after every run nothing is left running. The audit hook refuses
sockets, subprocesses, new code and writes outside the working folder."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from dsh_actors import AbortController, Agent, Session, ToolBatchExecutionError

from .helpers import (
    GUARD,
    alive,
    assert_gone,
    batch,
    children,
    code_of,
    echo_tool,
    install,
    must,
    run_code,
    tool,
)


def pid_reporter(rt: Any) -> list[int]:
    """A tool ``pid(pid=os.getpid())`` the program calls first, so the test
    knows the worker's pid even when the run is killed."""
    pids: list[int] = []
    rt.tools.register(
        tool("pid", lambda args, ctx: pids.append(args["pid"]) or 0, parameters={"pid": {"type": "integer"}})
    )
    return pids


REPORT = "import os\nawait tools.pid(pid=os.getpid())\n"


def failed_as(result: Any, kind: str) -> str:
    assert code_of(result) == "CODE_RUN_FAILED", result
    message: str = result.error.message
    assert message.startswith(f"code run failed ({kind}): "), message[:300]
    return message


def test_an_infinite_loop_is_killed_at_the_timeout_with_its_output_and_sub_calls(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    result = run_code(rt, REPORT + "print('looping')\nwhile True:\n    pass\n")
    message = failed_as(result, "timeout")
    assert "the program did not finish within 2000 ms and was killed" in message
    assert "- c1:ptc:1 pid: succeeded" in message
    assert message.endswith("Output before the run ended:\nlooping\n")
    assert_gone(pids[0])


def test_a_4_gib_allocation_fails_as_memory(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    result = run_code(rt, REPORT + "block = bytearray(4 * 1024 ** 3)\nreturn len(block)")
    message = failed_as(result, "memory")
    assert "MemoryError" in message
    assert_gone(pids[0])


def test_growing_memory_until_the_limit_fails_as_memory(rt: Any) -> None:
    install(rt, timeout_ms=10000, memory_limit_mb=128)
    result = run_code(rt, "chunks = []\nwhile True:\n    chunks.append(bytearray(8 * 1024 * 1024))\n")
    failed_as(result, "memory")


def test_a_fork_bomb_is_blocked_and_leaves_nothing_behind(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    result = run_code(rt, REPORT + "while True:\n    os.fork()\n")
    message = failed_as(result, "error")
    assert "Blocked: run_code does not allow os.fork" in message
    assert_gone(pids[0])
    shell = run_code(rt, REPORT + "import subprocess\nsubprocess.run(['sh', '-c', ':(){ :|:& };:'])\n")
    assert "run_code does not allow subprocess.Popen" in failed_as(shell, "error")
    assert_gone(pids[1])
    raw = run_code(rt, "import _posixsubprocess\n_posixsubprocess.fork_exec()")
    assert "does not allow" in failed_as(raw, "error")


def test_a_100_mb_print_flood_is_killed_at_the_output_limit(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    result = run_code(rt, REPORT + "print('x' * 100_000_000)\n")
    message = failed_as(result, "output")
    assert "the program printed more than 65536 bytes and was killed" in message
    output = message.split("Output before the run ended:\n", 1)[1]
    assert output == "x" * 65536
    assert_gone(pids[0])
    lines = run_code(rt, REPORT + "while True:\n    print('spam ' * 20)\n")
    assert len(failed_as(lines, "output").split("Output before the run ended:\n", 1)[1].encode()) <= 65536
    assert_gone(pids[1])


def test_a_returned_value_counts_toward_the_output_limit(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_output_bytes=1000)
    message = failed_as(run_code(rt, "print('a' * 10)\nreturn 'b' * 2000"), "output")
    assert "are more than 1000 bytes" in message


def test_a_returned_value_or_tool_arguments_past_the_message_limit_fail_as_the_programs_output(rt: Any) -> None:
    # 9 MB as JSON is past the largest message a worker may send (8 MB
    # here): the program's doing, said as such, not a broken worker.
    install(rt, timeout_ms=20000)
    rt.tools.register(echo_tool())
    returned = failed_as(run_code(rt, "return 'z' * 9_000_000"), "output")
    assert "the program returned a value of more than 8388608 bytes as JSON" in returned
    called = failed_as(run_code(rt, "return await tools.echo(message='m' * 9_000_000)"), "output")
    assert "the program called a tool with arguments of more than 8388608 bytes as JSON" in called


def test_the_parent_keeps_no_arguments_of_the_sub_calls_that_have_settled(rt: Any, ptc: Any) -> None:
    # 20 calls of 2 MB each, one after the other: the parent (this process)
    # holds the arguments of the calls in flight only, not 40 MB until the
    # run ends (10,000 calls of 8 MB each would be 80 GB). (Logged to a
    # session that keeps no events in memory: the start events are written.)
    import tracemalloc

    held: list[int] = []
    rt.tools.register(tool("store", lambda args, ctx: len(args["data"]), parameters={"data": {"type": "string"}}))
    rt.tools.register(tool("measure", lambda args, ctx: held.append(tracemalloc.get_traced_memory()[0])))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        code = "data = 'x' * 2_000_000\nfor _ in range(20):\n    await tools.store(data=data)\nawait tools.measure()"
        result = run_code(rt, code, agent=Agent("main", session=Session(keep_events=False)))
    finally:
        tracemalloc.stop()
    assert not result.is_error, result
    assert held[0] - before < 10_000_000, f"{held[0] - before:,} bytes held"


def test_the_parent_keeps_no_results_of_the_sub_calls_that_have_succeeded(rt: Any, ptc: Any) -> None:
    # 20 calls whose results are 2 MB each, one after the other: the parent
    # (this process) keeps neither the sub-batch's results (each goes to
    # the run as it commits; the sub-batch's reply holds none) nor the
    # successes' on the run's sub-calls, not 40 MB until the run ends.
    import tracemalloc

    held: list[int] = []
    rt.tools.register(tool("load", lambda args, ctx: "x" * 2_000_000))
    rt.tools.register(tool("measure", lambda args, ctx: held.append(tracemalloc.get_traced_memory()[0])))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        code = "for _ in range(20):\n    await tools.load()\nawait tools.measure()"
        result = run_code(rt, code, agent=Agent("main", session=Session(keep_events=False)))
    finally:
        tracemalloc.stop()
    assert not result.is_error, result
    assert held[0] - before < 10_000_000, f"{held[0] - before:,} bytes held"


def test_aborting_the_batch_kills_the_program_and_fires_the_running_sub_calls_signal(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    started = threading.Event()
    saw_abort: list[bool] = []

    def wait_for_abort(args: Any, ctx: Any) -> str:
        started.set()
        saw_abort.append(ctx.signal.wait(GUARD))
        return "finished anyway"

    rt.tools.register(tool("slow", wait_for_abort))
    controller = AbortController()
    future: Future[Any] = rt.tools.submit(
        batch(REPORT + "await tools.slow()\nawait tools.pid(pid=0)\n", signal=controller.signal)
    )
    must(started, "the sub-call started")
    controller.abort("the user pressed stop")
    result = future.result(GUARD).results[0].result
    message = failed_as(result, "aborted")
    assert "the tool batch was aborted; the program was killed" in message
    assert saw_abort == [True]
    assert "- c1:ptc:2 slow: failed (ABORTED): tool call aborted" in message
    assert "c1:ptc:3" not in message  # never made: the program was killed first
    assert_gone(pids[0])


def test_aborting_kills_a_program_that_is_busy_computing(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    started = threading.Event()
    rt.tools.register(tool("started", lambda args, ctx: started.set() or 0))
    controller = AbortController()
    future: Future[Any] = rt.tools.submit(
        batch(REPORT + "await tools.started()\nwhile True:\n    pass\n", signal=controller.signal)
    )
    must(started, "the program started computing")
    controller.abort()
    failed_as(future.result(GUARD).results[0].result, "aborted")
    assert_gone(pids[0])


def test_a_batch_aborted_before_the_run_starts_runs_nothing(rt: Any, ptc: Any) -> None:
    controller = AbortController()
    controller.abort()
    result = run_code(rt, "return 1", signal=controller.signal)
    assert code_of(result) == "ABORTED_BEFORE_DISPATCH"


def test_stopping_the_runtime_kills_running_programs_and_spare_workers(rt: Any, ptc: Any) -> None:
    pids = pid_reporter(rt)
    started = threading.Event()
    saw_abort: list[bool] = []

    def wait_for_abort(args: Any, ctx: Any) -> str:
        started.set()
        saw_abort.append(ctx.signal.wait(GUARD))
        return "x"

    rt.tools.register(tool("slow", wait_for_abort))
    future: Future[Any] = rt.tools.submit(batch(REPORT + "await tools.slow()"))
    must(started, "the sub-call started")
    spares = ptc.worker_pids()
    assert pids[0] in spares  # the running worker, and the spare(s)
    rt.stop()
    assert saw_abort == [True]
    try:
        failed_as(future.result(GUARD).results[0].result, "aborted")
    except ToolBatchExecutionError:
        pass  # the batch's actor may have stopped before it could reply
    for pid in (*spares, *pids):
        assert_gone(pid)
    assert children() == []


def test_stop_with_a_sub_call_ignoring_its_signal_kills_the_worker_and_returns_within_its_timeout(
    rt: Any, ptc: Any
) -> None:
    pids = pid_reporter(rt)
    started, release = threading.Event(), threading.Event()

    def stubborn(args: Any, ctx: Any) -> str:
        started.set()
        release.wait(GUARD)  # ignores its signal
        return "late"

    rt.tools.register(tool("stubborn", stubborn))
    future: Future[Any] = rt.tools.submit(batch(REPORT + "await tools.stubborn()"))
    try:
        must(started, "the sub-call started")
        stopper = threading.Thread(target=rt.stop, kwargs={"timeout": 0.3}, name="test-stop")
        stopper.start()
        stopper.join(GUARD)  # (it waited out 30 s for the run, which waited for the sub-call)
        assert not stopper.is_alive(), "rt.stop(timeout=0.3) did not return in time"
        assert future.done(), "the run_code batch was not answered by stop()"
        assert_gone(pids[0])  # the worker is torn down, while the sub-call still runs
        assert not release.is_set()
    finally:
        release.set()
    try:
        failed_as(future.result(GUARD).results[0].result, "aborted")
    except ToolBatchExecutionError as exc:
        assert 'c1 (tool "run_code")' in str(exc)  # answered by the stop: its thread was still busy


def test_closing_the_executor_kills_its_spare_workers_and_later_runs_fail(rt: Any) -> None:
    executor = install(rt, timeout_ms=2000, spare_workers=2)
    spares = executor.worker_pids()
    assert len(spares) == 2 and all(alive(p) for p in spares)
    executor.close()
    for pid in spares:
        assert_gone(pid)
    assert executor.worker_pids() == []
    assert failed_as(run_code(rt, "return 1"), "unavailable")
    executor.close()  # idempotent


def test_a_scopes_own_executor_closed_and_dropped_is_freed_while_the_runtime_runs(rt: Any) -> None:
    # (Its stop hook held it, and so its memory, until rt.stop().)
    import gc
    import weakref

    from dsh_actors import Agent
    from executors.ptc import PtcExecutor

    refs = []
    for i in range(3):
        executor = PtcExecutor(timeout_ms=2000)
        refs.append(weakref.ref(executor))
        unset = rt.tools.scope(Agent(f"agent-{i}")).set_executor(executor)
        spares = executor.worker_pids()
        assert spares and all(alive(p) for p in spares)
        unset()  # (a scope done with its executor: unsetting it does not close it)
        executor.close()
        for pid in spares:
            assert_gone(pid)
        del executor, unset
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


def test_a_worker_runs_one_program_only(rt: Any, ptc: Any) -> None:
    first = run_code(rt, "import os\nreturn os.getpid()").value["result"]
    second = run_code(rt, "import os\nreturn os.getpid()").value["result"]
    assert first != second
    assert_gone(first)
    assert_gone(second)


def test_a_worker_that_dies_fails_the_run_as_crashed(rt: Any, ptc: Any) -> None:
    message = failed_as(run_code(rt, "import os\nprint('bye')\nos._exit(3)"), "crashed")
    assert message.startswith(
        "code run failed (crashed): the worker process exited without finishing the run (exit code 3): "
        "a program ends by returning or raising, not by ending its process\n\n"
    ), message
    assert message.endswith("Output before the run ended:\nbye\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="whether a worker still runs is read from /proc")
def test_a_program_that_closes_the_protocol_pipe_is_named_not_reported_as_killed_by_a_signal(rt: Any, ptc: Any) -> None:
    # It closes the worker's end of the pipe to the parent (an fd past 2
    # that is a pipe open for writing) and waits: the worker still runs
    # when the parent sees the pipe end, and the SIGKILL is the parent's.
    code = close_protocol_pipe("O_WRONLY") + "await asyncio.Event().wait()"
    message = failed_as(run_code(rt, code), "crashed")
    assert message.startswith(
        "code run failed (crashed): the worker process closed its protocol pipe without finishing the run "
        "and was killed (it was still running; a program must not close file descriptors it did not open)"
    ), message


def close_protocol_pipe(mode: str) -> str:
    """Code that closes the worker's end of a protocol pipe: an fd past 2
    that is a pipe open with ``mode`` (``O_WRONLY``: to the parent,
    ``O_RDONLY``: from it)."""
    return (
        "import fcntl, os, stat\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        mode = os.fstat(fd).st_mode\n"
        "    except OSError:\n"
        "        continue\n"
        f"    if stat.S_ISFIFO(mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.{mode}:\n"
        "        os.close(fd)\n"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pipes are found through fcntl")
@pytest.mark.parametrize(
    ("mode", "then"),
    [
        ("O_RDONLY", "return await tools.echo(message='x')"),  # the call's result cannot be read
        ("O_RDONLY", "await asyncio.Event().wait()"),  # the lifeline finds the pipe closed
        ("O_WRONLY", "return 1"),  # the done message cannot be written
    ],
)
def test_a_program_that_closes_a_protocol_pipe_is_named_however_the_worker_ends(
    rt: Any, ptc: Any, mode: str, then: str
) -> None:
    # The worker exits on its own as soon as it finds its pipe closed
    # (before, it exited 0 or 87, unexplained, or its event loop logged
    # the failed read into the output until the output limit killed it).
    rt.tools.register(echo_tool())
    message = failed_as(run_code(rt, close_protocol_pipe(mode) + then), "crashed")
    headline = message.split("\n\n")[0]
    assert headline.startswith("code run failed (crashed): the worker process closed its protocol pipe "), headline
    assert headline.endswith("a program must not close file descriptors it did not open)"), headline
    assert "worker.py" not in message


def test_a_worker_command_that_cannot_start_fails_the_run_as_crashed(rt: Any) -> None:
    install(rt, timeout_ms=2000, worker_command=["/nonexistent/python"])
    message = failed_as(run_code(rt, "return 1"), "crashed")
    assert "the worker process could not be started" in message


def test_a_worker_that_is_not_a_worker_breaks_the_protocol(rt: Any) -> None:
    import sys

    install(
        rt,
        timeout_ms=2000,
        worker_command=[sys.executable, "-c", "print('hello', flush=True); import time; time.sleep(60)"],
    )
    message = failed_as(run_code(rt, "return 1"), "protocol")
    assert "a line that is not JSON" in message


@pytest.mark.parametrize(
    ("code", "refusal"),
    [
        ("import socket\nsocket.socket()", "run_code does not allow socket.__new__"),
        ("import socket\nsocket.create_connection(('127.0.0.1', 9))", "run_code does not allow socket."),
        ("import os\nos.system('true')", "run_code does not allow os.system"),
        ("import os\nos.execv('/bin/true', ['true'])", "run_code does not allow os.exec"),
        ("import os\nos.posix_spawn('/bin/true', ['true'], {})", "run_code does not allow os.posix_spawn"),
        ("import os\nos.kill(os.getpid(), 0)", "run_code does not allow os.kill"),
        ("exec('x = 1')", "run_code does not allow compiling new code"),
        ("eval(compile('1', 'f', 'eval'))", "run_code does not allow compiling new code"),
        ("import ctypes", "run_code does not allow importing ctypes"),
        (
            "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))",
            "run_code does not allow resource.setrlimit",
        ),
        ("open('/tmp/dsh-ptc-escape', 'w')", "run_code does not allow writing '/tmp/dsh-ptc-escape'"),
        ("import os\nos.remove('/etc/hostname')", "run_code does not allow os.remove on '/etc/hostname'"),
        (
            "import os\nos.symlink('/etc/passwd', 'link')\nopen('link', 'a')",
            "run_code does not allow a symbolic link to '/etc/passwd'",
        ),
        ("import os\nos.chdir('/')", "run_code does not allow os.chdir"),
    ],
)
def test_the_audit_hook_refuses(rt: Any, ptc: Any, code: str, refusal: str) -> None:
    message = failed_as(run_code(rt, code), "error")
    assert refusal in message, message[:400]


def test_starting_an_event_loop_is_refused_with_a_message_that_names_the_fix(rt: Any, ptc: Any) -> None:
    expected = "a program runs on the worker's event loop already: await coroutines directly"
    message = failed_as(run_code(rt, "asyncio.new_event_loop()"), "error")
    assert message.startswith("code run failed (error): Blocked: run_code does not allow starting an event loop")
    assert expected in message.splitlines()[0], message[:400]
    in_thread = run_code(
        rt,
        "import threading\nerrors = []\nasync def main():\n    return 1\n"
        "def target():\n    try:\n        asyncio.run(main())\n    except Exception as exc:\n        errors.append(str(exc))\n"
        "t = threading.Thread(target=target)\nt.start()\nt.join()\nreturn errors",
    ).value["result"]
    assert len(in_thread) == 1 and expected in in_thread[0], in_thread
    # Any other socket keeps the plain refusal.
    plain = failed_as(run_code(rt, "import socket\nsocket.socketpair()"), "error")
    assert "run_code does not allow socket.__new__" in plain.splitlines()[0], plain[:400]


def test_what_programs_may_do_despite_the_audit_hook(rt: Any, ptc: Any) -> None:
    result = run_code(
        rt,
        "import dataclasses, collections, statistics, json, os, tempfile\n"
        "@dataclasses.dataclass\nclass P:\n    x: int\n"
        "Pair = collections.namedtuple('Pair', 'a b')\n"
        "with open('notes.txt', 'w') as fh:\n    fh.write('kept')\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as tmp:\n    tmp.write('t')\n"
        "os.mkdir('sub')\n"
        "os.rename('notes.txt', 'sub/notes.txt')\n"
        "await asyncio.sleep(0)\n"
        "return [repr(P(1)), Pair(1, 2).b, statistics.mean([1, 3]), open('sub/notes.txt').read(),\n"
        "        os.path.dirname(tmp.name) == os.getcwd(), len(open('/etc/hostname').read()) > 0]",
    )
    assert result.value["result"] == ("__run_code__.<locals>.P(x=1)", 2, 2, "kept", True, True)


def test_the_working_folder_is_removed_after_the_run(rt: Any, ptc: Any) -> None:
    folder = run_code(rt, "import os\nopen('f', 'w').write('x')\nreturn os.getcwd()").value["result"]
    assert os.path.basename(folder).startswith("dsh-ptc-")
    assert not os.path.exists(folder)
    locked = run_code(
        rt,
        "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0)\n"
        "return os.getcwd()",
    ).value["result"]
    assert not os.path.exists(locked)


def test_the_worker_does_not_inherit_the_parents_environment(rt: Any, ptc: Any) -> None:
    os.environ["DSH_PTC_SECRET"] = "s3cret"
    try:
        result = run_code(rt, "import os\nreturn sorted(os.environ)")
    finally:
        del os.environ["DSH_PTC_SECRET"]
    assert "DSH_PTC_SECRET" not in result.value["result"]
    assert "TMPDIR" in result.value["result"]


def _as_an_unprivileged_user() -> list[str]:
    """A worker command that runs the worker as an ordinary user: itself
    when the tests do not run as root, else ``nobody`` (root is exempt
    from per-user limits such as ``RLIMIT_NPROC``)."""
    if os.geteuid() != 0:
        return ["{python}", "-I", "{worker}"]
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    try:
        probe = subprocess.run([*drop, sys.executable, "-I", "-c", "pass"], capture_output=True, timeout=GUARD)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("setpriv cannot run this Python as nobody")
    if probe.returncode != 0:
        pytest.skip("setpriv cannot run this Python as nobody")
    # (nobody may not enter the folder root made: opened to it first)
    return ["sh", "-c", 'chmod 777 "$1" && shift && exec "$@"', "sh", "{workdir}", *drop, "{python}", "-I", "{worker}"]


def test_a_program_of_an_ordinary_user_can_start_threads(rt: Any) -> None:
    # (RLIMIT_NPROC 0, meant to back up the refusal of subprocesses, counts
    # threads too: "RuntimeError: can't start new thread" for any user but root.)
    install(rt, timeout_ms=10000, worker_command=_as_an_unprivileged_user())
    code = (
        "import os, threading\nran = []\nthread = threading.Thread(target=ran.append, args=('thread',))\n"
        "thread.start()\nthread.join()\n"
        "return [os.geteuid() != 0, ran, await asyncio.to_thread(sum, [1, 2])]"
    )
    result = run_code(rt, code)
    assert not result.is_error, result.error.message[:500]
    assert result.value["result"] == (True, ("thread",), 3)
    assert "run_code does not allow os.fork" in failed_as(run_code(rt, "import os\nos.fork()"), "error")
