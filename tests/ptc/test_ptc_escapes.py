"""Escapes from a PTC program's isolation, each refused: writes outside the
working folder through a directory descriptor or a hard link, reading other
processes' /proc entries, output written to fd 2, filling the disk, and a
worker that outlives its parent."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from executors.ptc import workers

from .helpers import GUARD, _stat, install, run_code
from .test_ptc_isolation import failed_as

# --------------------------------------------------------------------------
# Writes outside the working folder
# --------------------------------------------------------------------------


def test_os_open_for_writing_relative_to_an_outside_folder_is_refused(rt: Any, ptc: Any, tmp_path: Path) -> None:
    outside = str(tmp_path)
    message = failed_as(
        run_code(
            rt, f"import os\nd = os.open({outside!r}, os.O_RDONLY)\nos.open('x', os.O_WRONLY | os.O_CREAT, dir_fd=d)"
        ),
        "error",
    )
    assert "run_code does not allow os.open of 'x' for writing relative to a directory descriptor" in message
    assert os.listdir(outside) == []


def test_the_original_posix_open_cannot_open_a_relative_path(rt: Any, ptc: Any, tmp_path: Path) -> None:
    # A program that digs out the real posix.open (to pass dir_fd unseen)
    # may still open absolute paths (dir_fd is then ignored, and the path is
    # checked), but not relative ones.
    outside = str(tmp_path)
    code = (
        "import os\nreal = os.open.__globals__['_posix_open']\n"
        f"d = os.open({outside!r}, os.O_RDONLY)\n"
        "real('x', os.O_WRONLY | os.O_CREAT, 0o666, dir_fd=d)"
    )
    message = failed_as(run_code(rt, code), "error")
    assert "run_code does not allow opening a relative path with the original posix.open" in message
    absolute = (
        f"import os\nreal = os.open.__globals__['_posix_open']\nreal({outside + '/y'!r}, os.O_WRONLY | os.O_CREAT)"
    )
    assert "does not allow writing" in failed_as(run_code(rt, absolute), "error")
    assert os.listdir(outside) == []


def test_directory_descriptors_inside_the_folder_still_work_for_reading(rt: Any, ptc: Any) -> None:
    code = (
        "import os, shutil\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('kept')\n"
        "d = os.open('a', os.O_RDONLY)\nfd = os.open('b/f', os.O_RDONLY, dir_fd=d)\n"
        "text = os.read(fd, 10).decode()\nshutil.rmtree('a')\n"
        "return [text, os.path.exists('a')]"
    )
    assert run_code(rt, code).value["result"] == ("kept", False)


def test_a_hard_link_to_an_outside_file_is_refused(rt: Any, ptc: Any, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("original")
    code = f"import os\nos.link({str(victim)!r}, 'inside')\nopen('inside', 'w').write('changed')"
    message = failed_as(run_code(rt, code), "error")
    assert f"run_code does not allow os.link on {str(victim)!r} (outside its working folder)" in message
    assert victim.read_text() == "original"
    inside = run_code(
        rt,
        "import os, stat\nopen('a', 'w').write('x')\nos.link('a', 'b')\nos.mkfifo('fifo')\n"
        "return [open('b').read(), stat.S_ISFIFO(os.stat('fifo').st_mode)]",
    )
    assert inside.value["result"] == ("x", True)


@pytest.mark.parametrize(
    ("code", "refusal"),
    [
        ("open('sub/../x', 'w')", "run_code does not allow writing 'sub/../x'"),
        ("import os\nos.symlink('sub/../..', 'up')", "run_code does not allow a symbolic link to 'sub/../..'"),
        ("import os\nos.symlink('/tmp', 'tmp')", "run_code does not allow a symbolic link to '/tmp'"),
        (
            "import shutil, os\nshutil.rmtree('x', dir_fd=os.open('/', os.O_RDONLY))",
            "relative to a directory descriptor",
        ),
        ("import gc\ngc.get_objects()", "run_code does not allow gc.get_objects"),
        ("import os\nos.mkfifo('/tmp/dsh-ptc-fifo')", "run_code does not allow os.mkfifo on '/tmp/dsh-ptc-fifo'"),
        ("import os\nos.mknod('/tmp/dsh-ptc-node')", "run_code does not allow os.mknod on '/tmp/dsh-ptc-node'"),
        ("import os\nos.mkfifo('f', dir_fd=os.open('/tmp', os.O_RDONLY))", "relative to a directory descriptor"),
    ],
)
def test_paths_that_could_lead_out_of_the_folder_are_refused(rt: Any, ptc: Any, code: str, refusal: str) -> None:
    message = failed_as(run_code(rt, "import os\nos.mkdir('sub')\n" + code), "error")
    assert refusal in message, message[:400]


# --------------------------------------------------------------------------
# Other processes reached without a /proc path or os.kill
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "refusal"),
    [
        # Signal 0 only checks: before the fix, SIGKILL here killed the runtime.
        (
            "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), 0)",
            "run_code does not allow os.pidfd_open",
        ),
        ("import posix\nposix.pidfd_open(os.getppid())", "run_code does not allow os.pidfd_open"),
        ("import signal\nsignal.pidfd_send_signal(0, 0)", "run_code does not allow signal.pidfd_send_signal"),
        ("import _signal\n_signal.pidfd_send_signal(0, 0)", "run_code does not allow signal.pidfd_send_signal"),
        (
            "os.setpriority(os.PRIO_PROCESS, os.getppid(), os.getpriority(os.PRIO_PROCESS, os.getppid()))",
            "run_code does not allow os.setpriority",
        ),
        (
            "os.sched_setaffinity(os.getppid(), os.sched_getaffinity(os.getppid()))",
            "run_code does not allow os.sched_setaffinity",
        ),
        (
            "p = os.getppid()\nos.sched_setscheduler(p, os.sched_getscheduler(p), os.sched_getparam(p))",
            "run_code does not allow os.sched_setscheduler",
        ),
        (
            "os.sched_setparam(os.getppid(), os.sched_getparam(os.getppid()))",
            "run_code does not allow os.sched_setparam",
        ),
        (
            "import sys\ndel sys.modules['posix']\nimport posix\nposix.pidfd_open(os.getppid())",
            "run_code does not allow importing posix anew",
        ),
        (
            "import sys\ndel sys.modules['_signal']\nimport _signal",
            "run_code does not allow importing _signal anew",
        ),
    ],
)
def test_calls_that_reach_another_process_without_an_audit_event_are_refused(
    rt: Any, ptc: Any, code: str, refusal: str
) -> None:
    message = failed_as(run_code(rt, "import os\n" + code), "error")
    assert refusal in message, message[:400]


def test_a_refused_process_call_keeps_no_reference_to_the_original(rt: Any, ptc: Any) -> None:
    code = (
        "import os, signal\nreachable = []\n"
        "for f in (os.pidfd_open, signal.pidfd_send_signal, os.setpriority):\n"
        "    reachable += [c.cell_contents for c in f.__closure__ or ()] + list(f.__globals__.values())\n"
        "names = {getattr(v, '__name__', '') for v in reachable if type(v) is type(len)}\n"
        "return sorted(names & {'pidfd_open', 'pidfd_send_signal', 'setpriority'})"
    )
    assert run_code(rt, code).value["result"] == ()


# --------------------------------------------------------------------------
# Other processes' /proc entries
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "f'/proc/{os.getppid()}/environ'",
        "f'/proc/{os.getppid()}/mem'",
        "f'/proc/{os.getppid()}/cmdline'",
        "f'/proc/self/../{os.getppid()}/environ'",
        "f'/proc/thread-self/../../../{os.getppid()}/environ'",
        "f'/proc/self/root/proc/{os.getppid()}/environ'",
        "f'/proc/self/cwd/../../proc/{os.getppid()}/environ'",
        "f'/dev/fd/../../{os.getppid()}/environ'",
        "f'/proc/{os.getppid()}/task/{os.getppid()}/environ'",
        "'/proc/1/environ'",
    ],
)
def test_reading_another_processs_proc_entries_is_refused(rt: Any, ptc: Any, path: str) -> None:
    message = failed_as(run_code(rt, f"import os\nopen({path}, 'rb').read()"), "error")
    assert "(another process's /proc entry)" in message, message[:400]


def test_proc_entries_are_refused_through_listings_links_and_directory_descriptors(rt: Any, ptc: Any) -> None:
    link = failed_as(
        run_code(rt, "import os\nos.symlink(f'/proc/{os.getppid()}', 'p')\nopen('p/environ').read()"), "error"
    )
    assert "run_code does not allow a symbolic link to" in link
    listing = failed_as(run_code(rt, "import os\nos.listdir(f'/proc/{os.getppid()}/fd')"), "error")
    assert "(another process's /proc entry)" in listing
    by_fd = "import os\nd = os.open('/proc', os.O_RDONLY)\nos.open(f'{os.getppid()}/environ', os.O_RDONLY, dir_fd=d)"
    assert "(another process's /proc entry)" in failed_as(run_code(rt, by_fd), "error")


def test_the_workers_own_proc_entries_stay_readable(rt: Any, ptc: Any) -> None:
    code = (
        "import os\nreturn [open('/proc/self/status').read().startswith('Name:'),\n"
        "        'PATH=' in open('/proc/thread-self/environ').read(), len(open('/proc/meminfo').read()) > 0,\n"
        "        len(os.listdir('/proc')) > 0]"
    )
    assert run_code(rt, code).value["result"] == (True, True, True, True)


# --------------------------------------------------------------------------
# Output on fd 2, and the working folder's size
# --------------------------------------------------------------------------


def test_100_mb_written_to_fd_2_fails_at_the_output_limit(rt: Any, ptc: Any) -> None:
    message = failed_as(run_code(rt, "import os\nos.write(2, b'x' * 100_000_000)\nreturn 1"), "output")
    assert "the program wrote more than 65536 bytes of output (its stderr file descriptor included)" in message
    assert "Worker stderr (its end):\nxxxx" in message


def test_fd_2_output_and_printed_output_share_the_limit(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_output_bytes=1000)
    shared = "import os\nos.write(2, b'e' * 600)\nprint('o' * 600)\nreturn 1"
    assert "more than 1000 bytes" in failed_as(run_code(rt, shared), "output")  # neither alone is
    assert run_code(rt, "import os\nos.write(2, b'warning')\nreturn 1").value == {"result": 1, "output": ""}


def test_what_a_launcher_writes_to_stderr_before_the_run_is_not_the_programs_output(rt: Any) -> None:
    # e.g. docker pulling an image: it writes while the worker is a spare.
    chatty = "{python} -c \"import os; os.write(2, b'pulling ' * 25_000)\"; exec {python} -I {worker}"
    install(rt, timeout_ms=5000, worker_command=["sh", "-c", chatty])
    assert run_code(rt, "return 1").value == {"result": 1, "output": ""}


def test_a_file_larger_than_the_folder_limit_cannot_be_written(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_folder_mb=1)
    message = failed_as(run_code(rt, "open('big', 'wb').write(b'x' * (2 << 20))"), "error")
    assert "File too large" in message


def test_files_past_the_folder_limit_fail_the_run_when_it_returns(rt: Any) -> None:
    install(rt, timeout_ms=5000, max_folder_mb=1)
    code = "for n in range(3):\n    open(f'f{n}', 'wb').write(b'x' * 600_000)\nreturn 'done'"
    message = failed_as(run_code(rt, code), "disk")
    # Measured when it returns, or already while it wrote the third file.
    assert re.search(r"the program wrote more than 1 MB \(\d+ bytes\) to its working folder and was killed", message)


def test_a_running_program_past_the_folder_limit_is_killed(rt: Any) -> None:
    install(rt, timeout_ms=20000, max_folder_mb=1)
    code = "import time\nfor n in range(3):\n    open(f'f{n}', 'wb').write(b'x' * 600_000)\ntime.sleep(30)"
    started = time.monotonic()
    failed_as(run_code(rt, code), "disk")
    assert time.monotonic() - started < 15  # well before the timeout


def test_too_many_files_fail_the_run(rt: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from executors.ptc import run

    assert run.MAX_FOLDER_ENTRIES == workers.MAX_FOLDER_ENTRIES == 10_000
    monkeypatch.setattr(run, "MAX_FOLDER_ENTRIES", 100)  # creating 10,000 files takes seconds here
    install(rt, timeout_ms=20000)
    code = "import os\nos.mkdir('d')\nfor n in range(100):\n    os.close(os.open(f'd/{n}', os.O_CREAT | os.O_WRONLY))"
    message = failed_as(run_code(rt, code), "disk")
    assert "the program made more than 100 files and folders" in message


# --------------------------------------------------------------------------
# A worker dies with its parent
# --------------------------------------------------------------------------

PARENT = textwrap.dedent(
    """
    import sys
    from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool, text
    from executors.ptc import PtcExecutor

    def report(args, ctx):
        print(args["pid"], args["cwd"], flush=True)
        return 0

    rt = ToolRuntime().start()
    rt.tools.set_executor(PtcExecutor(timeout_ms=120000))
    rt.tools.register(define_tool(
        name="report", description="report", parameters={"pid": {"type": "integer"}, "cwd": {"type": "string"}},
        output=ToolOutput(schema={"type": "json"}, render=lambda args, value: [text(str(value))]), execute=report,
    ))
    program = "import os, time\\nawait tools.report(pid=os.getpid(), cwd=os.getcwd())\\n" + sys.argv[1]
    rt.tools.execute(ToolBatchInput(calls=(ToolCall(id="c", name="run_code", arguments={"code": program}),)))
    """
)


def _gone_or_zombie(pid: int) -> bool:
    stat = _stat(str(pid))
    return stat is None or stat[0] == "Z"


@pytest.mark.parametrize("rest", ["time.sleep(600)", "while True:\n    pass"], ids=["sleeping", "busy"])
def test_a_worker_dies_with_its_parent_and_its_folder_is_removed_at_the_next_start(
    rt: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rest: str
) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    # A temporary folder of its own: no other process's start removes the
    # dead parent's folder before this test looks for it.
    folders = tmp_path / "tmp"
    folders.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folders))
    parent = subprocess.Popen(
        [sys.executable, str(script), rest],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=os.getcwd(),
        env={**os.environ, "TMPDIR": str(folders)},
    )
    try:
        assert parent.stdout is not None
        ready, _, _ = select.select([parent.stdout], [], [], 30)  # a cold interpreter and a worker
        assert ready, "the parent never reported its worker"
        line = parent.stdout.readline().decode()
        assert line, "the parent exited before its program ran"
        pid_text, folder = line.split()
        pid = int(pid_text)
        assert os.path.dirname(folder) == os.path.realpath(folders)
        assert os.path.isdir(folder) and not _gone_or_zombie(pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(GUARD)
        if parent.stdout is not None:
            parent.stdout.close()
    deadline = time.monotonic() + GUARD
    while not _gone_or_zombie(pid):  # a bounded poll: the kill is immediate, its delivery is not
        assert time.monotonic() < deadline, f"worker {pid} outlived its parent"
        time.sleep(0.01)
    assert os.path.isdir(folder)  # nobody was left to remove it
    install(rt, timeout_ms=2000)  # the next start
    assert not os.path.exists(folder)


def test_stale_folders_are_removed_only_for_dead_processes(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(GUARD)  # its pid is now free
    own = workers._own_prefix()
    dead = tmp_path / f"{workers.FOLDER_PREFIX}{child.pid}.123-abc"
    reused = tmp_path / f"{own.rsplit('.', 1)[0]}.1-abc"  # this pid, another start time
    mine = tmp_path / f"{own}abc"
    other = tmp_path / "dsh-ptc-unrelated"
    for folder in (dead, reused, mine, other):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "f").write_text("x")
    os.chmod(dead / "sub", 0)
    removed = workers.remove_stale_folders(str(tmp_path))
    assert sorted(removed) == sorted([str(dead), str(reused)])
    assert mine.is_dir() and other.is_dir()


def test_a_worker_started_for_a_thread_that_has_ended_still_runs(rt: Any) -> None:
    # The parent-death signal fires when the thread that started a worker
    # exits: workers are started on the pool's own thread, not the caller's.
    from executors.ptc import PtcExecutor

    executor = PtcExecutor(timeout_ms=5000)
    native: list[int] = []

    def bind_and_wait_until_the_spare_is_ready() -> None:
        native.append(threading.get_native_id())
        executor.bind(rt)  # starts the spare, asked for from this thread
        (spare,) = executor.workers._idle
        select.select([spare.stdout_fd], [], [], GUARD)  # it has asked for its parent-death signal

    binder = threading.Thread(target=bind_and_wait_until_the_spare_is_ready)
    binder.start()
    binder.join(GUARD)
    deadline = time.monotonic() + GUARD
    while os.path.exists(f"/proc/self/task/{native[0]}"):  # until the kernel is done with the thread
        assert time.monotonic() < deadline
        time.sleep(0.01)
    spares = executor.worker_pids()
    rt.tools.set_executor(executor)
    assert len(spares) == 1
    assert run_code(rt, "import os\nreturn os.getpid()").value["result"] == spares[0]


def test_working_folders_are_named_after_their_process(rt: Any, ptc: Any) -> None:
    folder = run_code(rt, "import os\nreturn os.getcwd()").value["result"]
    assert os.path.dirname(folder) == os.path.realpath(tempfile.gettempdir())
    assert os.path.basename(folder).startswith(workers._own_prefix())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_is_killed_when_the_thread_that_started_it_ends() -> None:
    # The parent-death signal on its own (the lifeline pipe stays open: this
    # process lives on): end the pool's spawner thread under a live worker.
    pool = workers.WorkerPool(workers.default_command(), {"PATH": os.environ.get("PATH", "")}, spares=1)
    worker = pool.acquire()
    try:
        ready, _, _ = select.select([worker.stdout_fd], [], [], GUARD)  # it has asked for the signal
        assert ready, "the worker never got ready"
        spawner = pool._spawner
        assert spawner is not None and spawner.name == "dsh-ptc-spawn"
        pool._requests.put(None)
        spawner.join(GUARD)
        assert not spawner.is_alive()
        deadline = time.monotonic() + GUARD
        while not worker.exited():
            assert time.monotonic() < deadline, "the worker outlived the thread that started it"
            time.sleep(0.01)
        assert worker.kill() == -signal.SIGKILL
    finally:
        pool._spawner = None
        pool.discard(worker)
        pool.close()
