"""A complete agent loop: a scripted model (no network) reads, searches and writes through
dsh-actors. ``python -m examples.agent_loop [--provider openai|anthropic]``"""

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import examples.tools
import policies
from dsh_actors import Agent, LogStep, Session, ToolBatchInput, ToolRuntime
from dsh_actors.providers import anthropic, openai
from policies.approval import RuleService, allow

WIRES = {"openai": openai, "anthropic": anthropic}
PLAN = [("read_file", {"path": "notes.txt"}), ("search_text", {"pattern": "TODO"}),
        ("write_file", {"path": "todo.md", "content": "- tests\n- docs\n"})]  # fmt: skip


def scripted_model(provider: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Stands in for client.chat.completions.create(...) / client.messages.create(...)."""
    step = sum(m["role"] == "assistant" for m in messages)
    name, args = PLAN[step] if step < len(PLAN) else (None, None)
    if provider == "anthropic":
        use = {"type": "tool_use", "id": f"toolu_{step}", "name": name, "input": args}
        return {"role": "assistant", "content": [use if name else {"type": "text", "text": "Done: see todo.md."}]}
    call = {"id": f"call_{step}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    message = (
        {"role": "assistant", "content": None, "tool_calls": [call]}
        if name
        else {"role": "assistant", "content": "Done: see todo.md."}
    )
    return {"choices": [{"message": message, "finish_reason": "tool_calls" if name else "stop"}]}


def main(provider: str = "openai", root: Path | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if provider not in WIRES:
        raise ValueError(f"unknown provider {provider!r}: choose one of {', '.join(WIRES)}")
    wire = WIRES[provider]
    root = Path(root or tempfile.mkdtemp())
    (root / "notes.txt").write_text("TODO: tests\nTODO: docs\n")
    with ToolRuntime() as rt:
        for tool in examples.tools.build_tools(root):  # a 5 s budget each, for policies.timeout
            rt.tools.register(dataclasses.replace(tool, timeout_ms=tool.timeout_ms or 5000))
        examples.tools.install_policies(rt, root)  # a write outside scratch/ asks for approval
        rt.use(
            policies.approval,
            service=RuleService([allow("write_file", when=lambda a: a["path"].endswith(".md"))], default="deny"),
        )
        rt.use(policies.timeout)
        agent = Agent("main", session=Session())
        messages = [{"role": "user", "content": "Collect the TODOs of notes.txt in todo.md."}]
        for step in range(1, 10):
            reply = scripted_model(provider, messages, wire.tools(rt, agent))  # tools: what it is offered
            messages.append(reply["choices"][0]["message"] if provider == "openai" else reply)
            calls = wire.calls(reply)
            if not calls:
                if reply.get("stop_reason") == "pause_turn":
                    continue  # Anthropic paused its server tools' turn: send the message back as it is
                break  # the final answer
            batch = rt.tools.execute(ToolBatchInput(calls=calls, agent=agent, log=LogStep(turn=1, step=step)))
            results = wire.results(batch)
            messages.extend(results)
            if results.concluded:
                break  # a tool ended the turn
    assert agent.session is not None  # (it has the one made above)
    events = agent.session.events()  # the durable log: tool/batch, tool/call, tool/start, tool/result
    print(*map(json.dumps, messages), sep="\n")
    print(*map(log_line, events), sep="\n")
    return messages, events


def log_line(e: dict[str, Any]) -> str:
    if e["type"] == "tool/batch":
        return f"{e['type']:12} step {e['step']}: {', '.join(c['call_id'] for c in e['calls'])}"
    outcome = ("error" if e["is_error"] else "ok") if e["type"] == "tool/result" else ""
    return f"{e['type']:12} {e['call_id']:8} {e.get('name') or outcome}".rstrip()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        prog="python -m examples.agent_loop", description="Run the scripted agent loop and print its messages and log."
    )
    parser.add_argument("--provider", choices=tuple(WIRES), default="openai", help="the wire format")
    main(parser.parse_args().provider)
