"""The PTC worker runs from the three files its README says to copy."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import executors.ptc
from dsh_actors import ToolBatchInput, ToolCall, ToolOutput, ToolRuntime, define_tool
from executors.ptc import PtcExecutor

# executors/ptc/README.md: "The worker needs only the standard library: copy
# worker.py, protocol.py and audit.py of executors/ptc/ into the sandbox."
SANDBOX_FILES = ("worker.py", "protocol.py", "audit.py")


def test_the_ptc_worker_runs_from_a_folder_of_its_three_files_on_the_standard_library(tmp_path: Path) -> None:
    package = Path(executors.ptc.__file__).parent
    for name in SANDBOX_FILES:
        shutil.copy(package / name, tmp_path / name)
    echo = define_tool(
        name="echo",
        description="Echo.",
        parameters={"message": {"type": "string", "required": True}},
        output=ToolOutput(schema={"type": "string"}),
        execute=lambda args, ctx: args["message"],
    )
    # -I -S: no site-packages (so no orjson, no project), as in a bare sandbox image.
    command = [sys.executable, "-I", "-S", str(tmp_path / "worker.py")]
    program = "import sys\nprint('orjson' in sys.modules)\nreturn await tools.echo(message='hi')"
    with ToolRuntime() as rt:
        rt.tools.register(echo)
        rt.tools.set_executor(PtcExecutor(timeout_ms=10000, worker_command=command))
        batch = ToolBatchInput(calls=[ToolCall(id="c1", name="run_code", arguments={"code": program})])
        outcome = rt.tools.execute(batch).results[0].result
    assert not outcome.is_error, outcome.error
    assert outcome.value == {"result": "hi", "output": "False\n"}
