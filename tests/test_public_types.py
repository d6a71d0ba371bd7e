"""The public values' annotations, as a typed application reads them (the
package ships ``py.typed``): ``mypy --strict`` accepts a program that uses
``Agent.session`` as the ``Session`` it is, a batch's or an execution's
``tool_set`` as the ``ResolvedToolSet`` it is, and the results a
``ToolBatchExecutionError`` carries as the model's results. A lower module
that named one of them by a narrower shape (to keep its annotations out of
an import cycle) would fail this test; docs/ARCHITECTURE.md ("No cycles
through annotations") lists the annotation edges that keep the concrete
types instead. The examples (what a new user copies) pass the same check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

APPLICATION = """
from dsh_actors import (
    Agent,
    ResolvedToolSet,
    Session,
    ToolBatchExecutionError,
    ToolBatchInput,
    ToolBatchResult,
    ToolCall,
    ToolCallResult,
    ToolExecution,
)


def one_call_batch() -> ToolBatchInput:
    return ToolBatchInput(calls=[ToolCall(id="c1", name="add", arguments={"a": 1})])  # a list, as the README writes it


def pending(agent: Agent) -> list[str]:
    session: Session | None = agent.session
    assert session is not None
    session.events()
    return session.pending_calls()


def batch_tools(batch: ToolBatchInput) -> ResolvedToolSet | None:
    tool_set = batch.tool_set
    if tool_set is not None:
        tool_set.view(None)
        tool_set.dispose()
    return tool_set


def execution_tools(execution: ToolExecution) -> ResolvedToolSet | None:
    return execution.tool_set


def outcomes(err: ToolBatchExecutionError) -> tuple[list[ToolCallResult], ToolBatchResult | None, bool]:
    results = list(err.results)
    return results, err.partial, results[0].result.is_error
"""


@pytest.mark.slow  # (about 15 s with no cache: mypy analyses the package first)
def test_a_typed_application_reads_the_public_values_as_their_concrete_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra (./dev setup installs it)")
    application = tmp_path / "application.py"
    application.write_text(APPLICATION)
    _assert_type_clean(application)


@pytest.mark.slow  # (about 20 s with no cache, 1 s with it)
def test_the_examples_are_type_clean() -> None:
    pytest.importorskip("mypy", reason="mypy is in the dev extra (./dev setup installs it)")
    _assert_type_clean(ROOT / "examples")


def _assert_type_clean(path: Path) -> None:
    # The repository's configuration (strict) and the cache `./dev mypy`
    # keeps, so the package is analysed again only when it changed.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache"), str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
