"""The providers' wire formats: one module per format, three functions each.

``openai`` (Chat Completions), ``openai_responses`` (Responses API) and
``anthropic`` (Messages) each have:

* ``calls(response) -> tuple[ToolCall, ...]``: the tool calls of a model
  response, ready for ``ToolBatchInput(calls=...)``;
* ``results(batch_result) -> Results``: what goes into the next request,
  in model order (Chat: ``role: "tool"`` messages; Responses:
  ``function_call_output`` items; Anthropic: one user message of
  ``tool_result`` blocks), errors marked, images as the provider's image
  parts, additional contexts after the results;
* ``tools(rt, agent=None, tool_set=None) -> list[dict]``: the ``tools``
  request parameter, built on ``rt.tools.model_tools(agent, tool_set)``
  (so under PTC it is exactly ``run_code``).

No module imports a provider SDK. They read SDK objects (anything with
``model_dump()``) or plain dicts, and write plain dicts that the SDKs'
request parameters accept. A response in a shape they cannot read raises
:class:`ProviderFormatError` naming the field; a call the model got wrong in
a way the pipeline can answer (arguments that are not JSON, an unknown
tool) is left to the pipeline, which fails that call alone.

A loop::

    from dsh_actors.providers import openai

    tools = openai.tools(rt, agent)
    while True:
        completion = client.chat.completions.create(model=..., messages=messages, tools=tools)
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        calls = openai.calls(message)
        if not calls:
            break                                   # a final answer
        batch = rt.tools.execute(ToolBatchInput(calls=calls, agent=agent, log=LogStep(turn, step)))
        replies = openai.results(batch)
        messages.extend(replies)
        if replies.concluded:
            break                                   # a tool ended the turn
"""

from __future__ import annotations

from . import anthropic, openai, openai_responses
from ._common import IMAGE_TYPES, ProviderFormatError, Results

__all__ = ["IMAGE_TYPES", "ProviderFormatError", "Results", "anthropic", "openai", "openai_responses"]
