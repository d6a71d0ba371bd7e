"""The ``dsh-actors`` command: argument parsing and exit statuses.

``main(argv)`` parses ``argv`` (default ``sys.argv[1:]``), runs one command
and returns its exit status; it never lets a traceback reach the user
(``DSH_ACTORS_DEBUG=1`` shows the one of an internal error).

Exit statuses: ``0`` the command ran (for ``run``, ``resume`` and
``recover``: the batch ran, even if some calls failed; the summary line
counts them; ``recover`` also when the log has nothing to recover); ``1`` it could not run (a
one-line ``dsh-actors <command>: error: ...`` on stderr); ``2`` a bad
command line (argparse's usage message); ``74`` standard output is
closed or cannot be written (a full disk: one line says which); ``130``
interrupted (Ctrl-C, in any command, ``bench`` included, and while the
commands load). ``bench`` otherwise returns the benchmarks' own status.

Logging: the libraries are silent by default (their loguru messages are
disabled at import); the command is an application, so it turns them on
while it runs, on stderr: warnings and errors as one line each
(``dsh-actors: ERROR: tools/result listener ... raised: ...``), and with
``--verbose`` (``-v``, before or after the command) every message from
DEBUG up, with tracebacks. :func:`main` removes loguru's default stderr
handler of the process (the command owns its stderr) and disables the
libraries' messages again when it returns.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import logging
import os
import runpy
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from loguru import logger

from ..errors import printable
from .exits import EXIT_INTERRUPTED, EXIT_OUTPUT_FAILED, OUTPUT_CLOSED, OutputError, silence_output

# The commands' modules are imported by main(), once its Ctrl-C handler is
# in place: this module imports little of its own (see main).

__all__ = ["build_parser", "main"]

PROG = "dsh-actors"
LIBRARY_LOGGERS = ("dsh_actors", "policies", "executors")
"""The loguru names the command enables while it runs."""
COMMANDS = ("run", "resume", "recover", "schemas", "replay", "bench")
"""The commands' names (an error names its command)."""
BENCH_PACKAGE = "benchmarks"
"""The package ``dsh-actors bench`` runs as ``python -m``."""
BENCH_PROG_ENV = "DSH_ACTORS_BENCH_PROG"
"""The environment variable that tells the benchmarks' usage line its
program name while ``dsh-actors bench`` runs them."""

_EPILOG = """\
exit status: 0 the command ran (run, resume, recover: the batch ran, even if calls failed);
1 it could not run (one line on stderr says why); 2 a bad command line;
74 standard output is closed or cannot be written; 130 interrupted.

examples:
  dsh-actors run examples/batch.json --tools examples.tools
  dsh-actors run examples/batch_openai.json --tools examples.tools --log run.jsonl
  dsh-actors replay run.jsonl --tools examples.tools
  dsh-actors resume suspended.json --log run.jsonl --tools my_tools.py --decide c1=yes
  dsh-actors recover --log run.jsonl --tools my_tools.py
  dsh-actors schemas --tools examples.tools --format anthropic
  dsh-actors run examples/batch_mcp.json --mcp "python examples/mcp_server.py"
  dsh-actors bench --quick
"""


#: The exit statuses every command shares, at the end of each one's list.
_EXIT_TAIL = "2 for a bad command line, 74 when standard output cannot be written, 130 when interrupted."

_RUN_EPILOG = f"""\
exit status: 0 when the batch ran (even if some calls failed, or it suspended on a deferred approval), \
1 when it could not run, {_EXIT_TAIL}

examples:
  dsh-actors run examples/batch.json --tools examples.tools
  dsh-actors run examples/batch_openai.json --tools examples.tools --log run.jsonl --json
  dsh-actors run examples/batch_mcp.json --mcp "python -m examples.mcp_server"
  dsh-actors run batch.json --tools my_tools.py --mcp "notes_=python -m examples.mcp_server"
  dsh-actors run batch.json --mcp-config ~/.cursor/mcp.json --json
  dsh-actors run - --tools examples.tools --approve no < examples/batch_anthropic.json
"""

_RESUME_EPILOG = f"""\
exit status: 0 when the batch ran on (even if some calls failed, or it suspended again), 1 when it could not \
(a wrong suspension file or log, a decision for a call that does not wait, a suspension resumed already; \
nothing ran), {_EXIT_TAIL}

examples:
  dsh-actors run batch.json --tools my_tools.py --log run.jsonl --json > suspended.json
  dsh-actors resume suspended.json --log run.jsonl --tools my_tools.py --decide c1=yes --decide c2=no
  dsh-actors resume suspended.json --log run.jsonl --tools my_tools.py --approve prompt
  dsh-actors resume - --log run.jsonl --tools my_tools.py --approve yes --json < suspended.json
"""

_RECOVER_EPILOG = f"""\
exit status: 0 when the step was finished (even if some calls failed), and when the log has nothing to recover \
(stderr says so); 1 when it could not be (no such log, several unfinished steps and none named, a step the log \
does not have, a tool the step needs missing, the log held by a process still running it; nothing ran), \
{_EXIT_TAIL}

examples:
  dsh-actors run batch.json --tools my_tools.py --log run.jsonl   # killed before the batch ended
  dsh-actors recover --log run.jsonl --tools my_tools.py
  dsh-actors recover --log run.jsonl --tools my_tools.py --turn 1 --step 2 --approve no --json
"""

_SCHEMAS_EPILOG = f"""\
exit status: 0 when the schemas were printed, 1 when the tools, a server or the executor could not be \
loaded, {_EXIT_TAIL}

examples:
  dsh-actors schemas --tools examples.tools --format anthropic
  dsh-actors schemas --mcp "python -m examples.mcp_server" --format raw
  dsh-actors schemas --tools examples.tools --executor ptc
"""

_REPLAY_EPILOG = f"""\
exit status: 0 when the log was drawn, 1 when it could not be read (a bad line is named FILE:LINE), \
{_EXIT_TAIL}

examples:
  dsh-actors replay run.jsonl --tools examples.tools
  dsh-actors replay run.jsonl --max-lines 0 --color always | less -R
  cat run.jsonl | dsh-actors replay -
"""


class _HelpFormatter(argparse.HelpFormatter):
    """A command's help: its description and epilog filled to the
    terminal's width paragraph by paragraph, and the indented lines of an
    ``examples:`` paragraph kept as they are, one command a line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n\n".join(
            "\n".join(indent + line for line in paragraph.splitlines())
            if paragraph.startswith("examples:")
            else super(_HelpFormatter, self)._fill_text(paragraph, width, indent)
            for paragraph in text.split("\n\n")
        )


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("dsh-actors")
    except metadata.PackageNotFoundError:
        return "unknown"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1 or value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer of at most 2**63-1, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of lines (0: no limit), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of lines (0: no limit), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (``bench`` is forwarded before
    parsing: its options belong to the benchmarks)."""
    from .batchfile import ACCEPTED_SHAPES
    from .loading import EXECUTORS
    from .resume import DECIDE_ANSWERS, decision
    from .run import APPROVE_MODES
    from .schemas import FORMATS

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run, inspect and replay batches of LLM tool calls with the dsh-actors runtime.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    # (Not required=True: argparse would report a missing COMMAND before an
    # unrecognized argument; main reports either.)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    # Also accepted after the command; SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)

    display = argparse.ArgumentParser(add_help=False, parents=[common])
    display.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the cards: auto (default) only on a terminal and when NO_COLOR is unset",
    )
    display.add_argument(
        "--max-lines",
        type=_count,
        default=40,
        metavar="N",
        help="show at most N lines of each card's body (default 40; 0: no limit)",
    )

    tools_help = (
        "the tools: a module (imported with the current directory on sys.path) or a .py file; "
        "ATTR (default: register, else TOOLS) is register(rt), register(tools), "
        "a sequence of ToolDefinitions, or a function returning one"
    )
    mcp_help = (
        "also mount the tools of an MCP server started with this command line over stdio "
        "(split like a shell would; repeatable; needs the mcp extra); a leading 'python' is this "
        "command's own interpreter. PREFIX= (letters, digits, _ and -) names the tools PREFIX + name, so two "
        "servers with the same tool names can be mounted together: --mcp 'a_=python -m examples.mcp_server' "
        "--mcp 'b_=python -m examples.mcp_server'. --tools, --mcp, --mcp-config or several"
    )
    mcp_config_help = (
        "also mount every MCP server a JSON file lists as Claude Desktop, Claude Code and Cursor keep them: "
        '{"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}} (repeatable; stdio servers '
        'only; "disabled": true leaves one out); each is mounted as --mcp mounts a server, its tools under '
        "their own names"
    )
    executor_help = "the batch executor (default native)"
    no_timeout_help = (
        "do not enforce the tools' timeout_ms (default: policies.timeout fails a call past its tool's "
        "timeout_ms with TOOL_TIMEOUT; a --tools module that applies it itself still does)"
    )
    json_help = (
        "print the results as one JSON document instead of cards (the calls a suspended batch left open "
        "are under 'pending')"
    )

    def add_tool_sources(command: argparse.ArgumentParser, tools: str, executor: str = executor_help) -> None:
        # The tools a command loads (--tools, --mcp, --mcp-config) and the
        # executor it offers them with; the command's parser is the one its
        # errors are reported by (main's command_parser). tool_sources: the
        # options, one of which main requires (the commands that call this
        # are the ones that take tools).
        sources = (
            command.add_argument("--tools", metavar="MODULE[:ATTR]", help=tools),
            command.add_argument("--mcp", action="append", default=[], metavar='"[PREFIX=]COMMAND ..."', help=mcp_help),
            command.add_argument("--mcp-config", action="append", default=[], metavar="FILE", help=mcp_config_help),
        )
        command.set_defaults(command_parser=command, tool_sources=sources)
        command.add_argument("--executor", choices=EXECUTORS, default="native", help=executor)

    def add_batch_options(command: argparse.ArgumentParser, approve: str) -> None:
        # How a command that runs a batch answers approvals (each says when
        # it asks), enforces timeouts and prints the results: run, resume
        # and recover alike.
        command.add_argument("--approve", choices=APPROVE_MODES, help=approve)
        command.add_argument("--no-timeout", dest="timeout", action="store_false", help=no_timeout_help)
        command.add_argument("--json", action="store_true", help=json_help)

    run = commands.add_parser(
        "run",
        parents=[display],
        help="execute a batch of tool calls read from a JSON file",
        description=(
            "Execute the tool calls of a JSON batch file against the tools a Python module registers "
            "(--tools) and MCP servers serve (--mcp, --mcp-config), as one model step, and print each result with its "
            "tool's card, then a summary line ('3 calls: 2 ok, 1 error'). "
            f"Accepted batch shapes: {ACCEPTED_SHAPES}."
        ),
        epilog=_RUN_EPILOG,
        formatter_class=_HelpFormatter,
    )
    run.add_argument("batch", metavar="BATCH.json", help="the batch file ('-': standard input)")
    add_tool_sources(run, tools_help)
    run.add_argument(
        "--log",
        metavar="FILE",
        help="write the session log (JSONL) to FILE, a new file or an empty regular one "
        "(the results are read back from it)",
    )
    run.add_argument(
        "--max-parallel",
        type=_positive_int,
        metavar="N",
        help="run at most N calls at once (default: the executor's, 10)",
    )
    run.add_argument("--agent", default="cli", metavar="ID", help="the agent id the batch runs as (default cli)")
    add_batch_options(
        run,
        "answer the calls a policy asks approval for: yes, no, or prompt on the terminal; it wins over "
        "an approval service the --tools module sets (default: the module's own service if it sets one, "
        "else prompt when stdin and stderr are terminals, else none: asking calls are denied)",
    )

    resume = commands.add_parser(
        "resume",
        parents=[display],
        help="finish a batch that run suspended on a deferred approval",
        description=(
            "Finish a batch that 'dsh-actors run --log FILE' suspended (its approval service answered "
            "'deferred'): read its suspension (what 'run --json' printed, or its 'suspension' value), decide the "
            "deferred calls, and run the batch on with the same tools, in the same log; the results are printed "
            "as run prints them. A suspension is resumed once: the log records the decisions."
        ),
        epilog=_RESUME_EPILOG,
        formatter_class=_HelpFormatter,
    )
    resume.add_argument(
        "suspension",
        metavar="SUSPENSION.json",
        help="the 'run --json' (or 'resume --json') document of a suspended batch, or its 'suspension' value "
        "('-': standard input)",
    )
    add_tool_sources(resume, f"{tools_help} (the run's)")
    resume.add_argument(
        "--log",
        metavar="FILE",
        help="the session log the suspended batch's run wrote (run --log FILE); the resumed batch goes on in it",
    )
    resume.add_argument(
        "--agent",
        metavar="ID",
        help="the agent the batch ran as (default: the one the suspension names; another is refused)",
    )
    resume.add_argument(
        "--decide",
        action="append",
        default=[],
        type=decision,
        metavar="CALL_ID=ANSWER",
        help=(
            f"answer a deferred call (repeatable): ANSWER is {', '.join(DECIDE_ANSWERS)} (yes and allowed-once "
            "run it, no and rejected reject it, cancelled cancels it, deferred leaves it waiting)"
        ),
    )
    add_batch_options(
        resume,
        "answer each deferred call --decide does not, and the calls that ask for approval as they run: yes, "
        "no, or prompt on the terminal (default: prompt when stdin and stderr are terminals, else the "
        "deferred calls without a --decide stay deferred, and the batch suspends again; with no --decide at "
        "all, nothing would be decided: refused)",
    )

    recover = commands.add_parser(
        "recover",
        parents=[display],
        help="finish a batch a crash interrupted, from its log",
        description=(
            "Finish a batch whose 'dsh-actors run --log FILE' was interrupted by a crash (the process killed, "
            "the machine stopped), from its log: each call with a logged result keeps it, each that never "
            "started runs, each that started runs again only if its tool is idempotent, else ends INTERRUPTED "
            "(rt.tools.recover); the log then holds a result for every call, and the step's results are printed "
            "as run prints them. The log's one unfinished step is taken; with several, name one with --turn and "
            "--step. A batch that suspended is unfinished too: recover asks its deferred approvals again (its "
            "suspension can no longer be resumed)."
        ),
        epilog=_RECOVER_EPILOG,
        formatter_class=_HelpFormatter,
    )
    recover.add_argument(
        "--log",
        metavar="FILE",
        required=True,
        help="the session log the interrupted batch's run wrote (run --log FILE); the step is finished in it",
    )
    add_tool_sources(recover, f"{tools_help} (the run's)")
    recover.add_argument(
        "--agent",
        metavar="ID",
        help="the agent whose step to recover (default: any; the log names the agent each step ran as)",
    )
    recover.add_argument("--turn", type=int, metavar="T", help="the turn of the step to recover (with --step)")
    recover.add_argument(
        "--step",
        type=int,
        metavar="S",
        help="the step to recover (with --turn; default: the log's one unfinished step; run logs turn 1, step 1)",
    )
    add_batch_options(
        recover,
        "answer the calls that ask for approval as they run, the deferred ones asked again included: yes, no, "
        "or prompt on the terminal (default: as for run)",
    )

    schemas = commands.add_parser(
        "schemas",
        parents=[common],
        help="print the model-facing tool schemas in a provider's format",
        description="Print the tool schemas the executor offers the model, as JSON in a provider's tool format.",
        epilog=_SCHEMAS_EPILOG,
        formatter_class=_HelpFormatter,
    )
    add_tool_sources(schemas, tools_help, "whose model input to describe (ptc: run_code)")
    schemas.add_argument(
        "--format",
        choices=FORMATS,
        default="openai",
        help='openai: Chat Completions {"type": "function", "function": {...}} (default); '
        'openai-responses: {"type": "function", "name", ..., "strict": false}; '
        'anthropic: {"name", "description", "input_schema"}; raw: ours',
    )

    replay = commands.add_parser(
        "replay",
        parents=[display],
        help="render a session log with the tools' cards",
        description=(
            "Render a session log (JSONL) in the terminal with each tool's present_call/present_result cards, "
            "grouped by model step, PTC sub-calls nested under their call; generic cards for unknown tools."
        ),
        epilog=_REPLAY_EPILOG,
        formatter_class=_HelpFormatter,
    )
    replay.add_argument("file", metavar="FILE", help="the session log ('-': standard input)")
    replay.add_argument("--tools", metavar="MODULE[:ATTR]", help=f"{tools_help} (without it: generic cards)")
    replay.set_defaults(command_parser=replay)

    commands.add_parser(
        "bench",
        add_help=False,
        help="run the benchmarks (python -m benchmarks; try: dsh-actors bench --help)",
    )
    return parser


_VERBOSE_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
    "<cyan>{name}</cyan>:<cyan>{function}</cyan>:<cyan>{line}</cyan> - "
    "<level>{extra[safe_message]}</level>\n{extra[safe_exception]}"
)
"""loguru's default format, with the message escaped for the terminal."""

_VERBOSE_HELP = (
    "log everything the runtime says (DEBUG and up, with tracebacks) on stderr; default: warnings and errors"
)


def _one_line(record: Any) -> str:
    # A callable format: loguru appends no traceback unless it asks for one;
    # the traceback the library appends to a message (errors.log_exception,
    # also in extra["traceback"]) is cut off it.
    # A message of several lines (a tool's failure, a program's traceback)
    # is folded into one: its lines joined with " | ".
    # What a tool or a server wrote (escape sequences, say) is shown escaped.
    message, appended = str(record["message"]), record["extra"].get("traceback")
    if type(appended) is str:
        message = message.removesuffix("\n" + appended)
    lines = [line.strip() for line in message.splitlines()]
    record["extra"]["one_line"] = printable(" | ".join(line for line in lines if line))
    return f"{PROG}: {{level}}: {{extra[one_line]}}\n"


def _verbose_format(record: Any) -> str:
    # loguru's default format, the message made safe for the terminal.
    record["extra"]["safe_message"] = printable(str(record["message"]), keep_newlines=True)
    exception = record["exception"]
    shown = "" if exception is None or exception.value is None else "".join(traceback.format_exception(exception.value))
    record["extra"]["safe_exception"] = printable(shown, keep_newlines=True)
    return _VERBOSE_FORMAT


class _StdlibLines(logging.Handler):
    """Warnings and errors other libraries log through the standard
    ``logging`` module (the MCP SDK's, say), when nothing else handles
    them, as the command's one-line messages; their tracebacks only with
    ``-v``. It stands in for ``logging.lastResort`` (which printed them
    whole) while the command runs: a ``--tools`` module's own
    ``logging.basicConfig`` still takes effect, and a handler of its
    replaces it, so nothing prints twice."""

    def __init__(self, verbose: bool) -> None:
        super().__init__(logging.WARNING)
        self.verbose = verbose

    def emit(self, record: logging.LogRecord) -> None:
        try:
            lines = [line.strip() for line in record.getMessage().splitlines() if line.strip()]
            text = printable(f"{PROG}: {record.levelname}: {record.name}: {' | '.join(lines)}") + "\n"
            if self.verbose and record.exc_info is not None and record.exc_info[1] is not None:
                text += printable("".join(traceback.format_exception(record.exc_info[1])), keep_newlines=True)
            sys.stderr.write(text)
        except Exception:  # noqa: BLE001 - logging never raises into the code that logged
            self.handleError(record)


@contextlib.contextmanager
def library_logging(verbose: bool) -> Iterator[None]:
    """The libraries' messages on stderr while the command runs (see the
    module docstring), off again afterwards."""
    with contextlib.suppress(ValueError):  # already removed
        logger.remove(0)  # loguru's default handler: the command owns stderr
    if verbose:
        sink = logger.add(sys.stderr, level="DEBUG", format=_verbose_format, backtrace=False, diagnose=False)
    else:
        sink = logger.add(sys.stderr, level="WARNING", format=_one_line)
    for name in LIBRARY_LOGGERS:
        logger.enable(name)
    last_resort = logging.lastResort
    logging.lastResort = _StdlibLines(verbose)
    try:
        yield
    finally:
        logging.lastResort = last_resort
        for name in LIBRARY_LOGGERS:
            logger.disable(name)
        with contextlib.suppress(ValueError):
            logger.remove(sink)


def _find_benchmarks(package: str) -> bool:
    """Whether ``package.__main__`` can be imported, looking in the current
    directory too (the benchmarks are not installed: they run from a
    checkout, as ``python -m`` would find them there)."""
    cwd = os.getcwd()
    for attempt in range(2):
        try:
            if importlib.util.find_spec(f"{package}.__main__") is not None:
                return True
        except (ImportError, ValueError):
            pass
        if attempt == 0:
            if cwd in sys.path:
                return False
            sys.path.insert(0, cwd)
    sys.path.remove(cwd)
    return False


def bench(argv: Sequence[str]) -> int:
    """Run ``python -m benchmarks`` with ``argv``; its exit status."""
    package = BENCH_PACKAGE
    if not _find_benchmarks(package):
        _error(
            "bench",
            f"no module {package}.__main__: the benchmarks are not installed with the package; "
            "run this from the root of a checkout of the repository (or ./dev bench there)",
        )
        return 1
    saved, saved_prog = sys.argv, os.environ.get(BENCH_PROG_ENV)
    sys.argv = [f"{PROG} bench", *argv]
    os.environ[BENCH_PROG_ENV] = f"{PROG} bench"  # runpy puts the module's path in sys.argv[0]
    try:
        runpy.run_module(package, run_name="__main__", alter_sys=True)
    except SystemExit as exit:
        code = exit.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        sys.stderr.write(f"{code}\n")
        return 1
    finally:
        sys.argv = saved
        if saved_prog is None:
            os.environ.pop(BENCH_PROG_ENV, None)
        else:
            os.environ[BENCH_PROG_ENV] = saved_prog
    return 0


def _is_verbose_flag(arg: str) -> bool:
    """``-v``/``--verbose`` as argparse reads it (``-vv``, or ``--verb``,
    an unambiguous prefix)."""
    return (len(arg) >= 2 and arg[0] == "-" and set(arg[1:]) == {"v"}) or (
        len(arg) >= len("--verb") and "--verbose".startswith(arg)
    )


def _bench_arguments(argv: Sequence[str]) -> tuple[list[str], bool]:
    """The arguments ``bench`` forwards to the benchmarks, and whether
    ``-v`` was among them: the command's own ``-v``/``--verbose`` is taken
    out (every command takes it after its name; the benchmarks have no such
    option), up to a ``--``, after which everything is theirs."""
    forwarded: list[str] = []
    verbose = False
    for index, arg in enumerate(argv):
        if arg == "--":
            forwarded.extend(argv[index:])
            break
        if _is_verbose_flag(arg):
            verbose = True
        else:
            forwarded.append(arg)
    return forwarded, verbose


def _error(command: str | None, message: str) -> None:
    where = PROG if command is None else f"{PROG} {command}"
    sys.stderr.write(f"{where}: error: {printable(message)}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit status (see the module docstring).

    Ctrl-C ends every command alike, from here on (the import of the
    commands' modules included, which happens here): ``dsh-actors
    <command>: error: interrupted`` and exit status 130, never a traceback
    (``run`` first aborts its batch and prints the results: its own handler
    stands in while the batch runs)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    lead = 0
    while lead < len(args_list) and _is_verbose_flag(args_list[lead]):
        lead += 1
    command = args_list[lead] if lead < len(args_list) and args_list[lead] in COMMANDS else None
    try:
        return _main(args_list, lead)
    except KeyboardInterrupt:
        _error(command, "interrupted")
        return EXIT_INTERRUPTED
    except OutputError as err:
        _error(command, str(err))
        silence_output()
        return EXIT_OUTPUT_FAILED
    except BrokenPipeError:
        # The reader went away (dsh-actors replay log | head): not an error.
        silence_output()
        return 0


def _main(args_list: list[str], lead: int) -> int:
    """:func:`main` within its handlers; ``lead``: how many ``-v`` come
    before the command's name."""
    if lead < len(args_list) and args_list[lead] == "bench":
        forwarded, verbose = _bench_arguments(args_list[lead + 1 :])
        verbose = lead > 0 or verbose
        command: Callable[[], int] = functools.partial(bench, forwarded)
    else:
        parser = build_parser()
        try:
            args, unknown = parser.parse_known_args(args_list)
            if unknown:  # the subcommand's usage, not the top-level one (argparse's parse_args shows that)
                getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
            if args.command is None:
                parser.error("the following arguments are required: COMMAND")
            sources = getattr(args, "tool_sources", ())
            if sources and all(getattr(args, source.dest) == source.default for source in sources):
                options = [source.option_strings[0] for source in sources]
                listed = f"{', '.join(options[:-1])} or {options[-1]}"
                args.command_parser.error(f"one of the arguments {listed} is required")
        except SystemExit as exit:
            return exit.code if isinstance(exit.code, int) else 2
        verbose = getattr(args, "verbose", False)
        command = functools.partial(_run, args)
    if sys.stdout is None:  # (started with it closed: >&-)
        raise OutputError(OUTPUT_CLOSED)
    with library_logging(verbose=verbose):
        return command()


def _bench_command(args: argparse.Namespace) -> int:
    # (main forwards bench before parsing; a form it does not see still runs it)
    return bench([])


def _run(args: argparse.Namespace) -> int:
    from .loading import CliError, loader_path_scope
    from .recover import recover_command
    from .replay import replay_command
    from .resume import resume_command
    from .run import run_command
    from .schemas import schemas_command

    handlers = {
        "run": run_command,
        "resume": resume_command,
        "recover": recover_command,
        "schemas": schemas_command,
        "replay": replay_command,
        "bench": _bench_command,
    }
    try:
        with loader_path_scope():  # what --tools put on sys.path lasts as long as the command
            return handlers[args.command](args)
    except CliError as err:
        _error(args.command, str(err))
        return 1
    except (OutputError, BrokenPipeError):
        raise  # (main's, as for bench)
    except Exception as err:  # noqa: BLE001 - never a traceback for the user
        if os.environ.get("DSH_ACTORS_DEBUG"):
            raise
        text = " ".join(str(err).split()) or type(err).__name__
        _error(args.command, f"internal error: {type(err).__name__}: {text} (DSH_ACTORS_DEBUG=1 shows the traceback)")
        return 1
