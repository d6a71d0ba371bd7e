"""The ``dsh-actors`` command line (see ``README.md`` beside this file).

``dsh-actors run BATCH.json --tools MODULE`` executes a batch of tool calls
(ours, OpenAI ``tool_calls`` or Anthropic ``tool_use`` shapes) and prints
each result with its tool's card; ``dsh-actors resume`` finishes a batch
``run`` suspended on a deferred approval; ``dsh-actors schemas`` prints the
model-facing schemas in a provider's format; ``dsh-actors replay FILE``
renders a session log; ``dsh-actors bench`` runs the benchmarks.
``python -m dsh_actors.cli`` is the same command. :func:`main` takes the
argument list and returns the exit status, so it runs in-process too.
"""

from __future__ import annotations

from .main import main

__all__ = ["main"]
