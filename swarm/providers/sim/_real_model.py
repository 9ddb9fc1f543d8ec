"""The simulator's real-model mode: a script's perfect replies, written as an open model writes.

`RealModel` (`[providers.sim.real_model]`) sets how often a reply goes wrong the ways small
open-weight models do behind a server whose tool parser missed them; `real_model_script`
wraps any script (the demo's included) with it:

- a call written as text instead of the API's `tool_calls`, in one of the formats open
  models use (Hermes `<tool_call>`, fenced or bare JSON, Llama 3 `<|python_tag|>`,
  Mistral `[TOOL_CALLS]`, `<function=name>`);
- a call to a tool that does not exist;
- the previous reply sent again, word for word;
- a call cut off mid-JSON (`finish_reason: length`);
- chatter around an answer (a plan in prose, unfenced);
- a call in JSON whose string values keep their own quotes unescaped (code), and a call
  after a tool result the model wrote itself (`<tool_response>`);
- a `write_file` call shown as the file itself in a fence under its path, no call made.

It is stateless like the scripts it wraps: every draw is seeded by the seed, the agent
and its turn, and the turns that went wrong (a call to an unknown tool, a repeat, a
reply without a call) are taken out of the conversation before the inner script reads it,
so the inner script goes on from where the last good turn left it.
"""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Sequence

from swarm.config._faults import TEXT_FORMATS, RealModel
from swarm.messages import ChatRequest, Message, ToolCall
from swarm.providers._tool_text import calls_from_text, read_result_text
from swarm.providers.sim._reply import Reply, Script

__all__ = ["TEXT_FORMATS", "RealModel", "real_model_script"]


def real_model_script(inner: Script, mode: RealModel, seed: int = 0) -> Script:
    """`inner`, its replies spoilt as `mode` says."""

    async def script(request: ChatRequest) -> Reply:
        reply = inner(_good_turns(_read_back(request)))
        if inspect.isawaitable(reply):
            reply = await reply
        assert isinstance(reply, Reply)
        return _spoil(reply, request, mode, _rng(seed, request))

    return script


def _rng(seed: int, request: ChatRequest) -> random.Random:
    """The draws of one reply: the same agent at the same turn, the same draws (a retry with
    a larger cap, or another agent, draws anew, as a sampled model would). The words of the
    conversation are left out: they carry the run's own paths and timings, and a seeded run
    must draw the same wherever it runs."""
    agent = request.metadata.get("agent", "")
    return random.Random(f"{seed}|{agent}|{len(request.messages)}|{request.max_tokens}")


def _spoil(reply: Reply, request: ChatRequest, mode: RealModel, rng: random.Random) -> Reply:
    draw = rng.random()
    calls = list(reply.tool_calls)
    previous = _last_assistant(request.messages)
    if calls:
        edge = mode.wrong_names
        if draw < edge:
            wrong = _wrong_name(calls[0].name, rng)
            return Reply(text=reply.text, tool_calls=[calls[0].model_copy(update={"name": wrong})])
        edge += mode.repeats
        if draw < edge and previous is not None:
            return Reply(text=previous.content, tool_calls=list(previous.tool_calls))
        edge += mode.truncated
        if draw < edge:
            written = _write(calls[:1], rng.choice(mode.formats))
            return Reply(text=written[: max(12, len(written) * 2 // 3)], cut=True)
        edge += mode.no_call
        if draw < edge:
            return Reply(text=f"I will now use {calls[0].name} to go on with the task.")
        writes = all(c.name == "write_file" for c in calls)
        if writes and rng.random() < mode.whole_files:
            return Reply(text="\n\n".join(_whole_file(c, rng) for c in calls))
        if rng.random() < mode.text_calls:
            fmt = rng.choice(mode.formats)
            written = _write(calls, fmt)
            if fmt in ("fenced", "bare") and rng.random() < mode.raw_quotes:
                written = written.replace('\\"', '"')
            if rng.random() < mode.invented_results:
                written = f"<tool_response>\nDone: all tests pass.\n</tool_response>\n{written}"
            prose = (reply.text or "").strip()
            return Reply(
                text=f"{prose}\n\n{written}".strip(), reasoning_tokens=reply.reasoning_tokens
            )
        return reply
    if reply.text and mode.chatter and rng.random() < mode.chatter:
        return Reply(text=_chatter(reply.text), reasoning_tokens=reply.reasoning_tokens)
    return reply


def _wrong_name(name: str, rng: random.Random) -> str:
    return rng.choice([f"{name}_tool", name.replace("_", ""), "execute", "bash", "edit"])


def _write(calls: Sequence[ToolCall], fmt: str) -> str:
    """`calls` as a model writes them in the text format `fmt`."""
    objs = [{"name": c.name, "arguments": json.loads(c.arguments or "{}")} for c in calls]
    if fmt == "hermes":
        return "\n".join(f"<tool_call>\n{json.dumps(o)}\n</tool_call>" for o in objs)
    if fmt == "fenced":
        body = json.dumps(objs[0] if len(objs) == 1 else objs, indent=2)
        return f"```json\n{body}\n```"
    if fmt == "bare":
        return json.dumps(objs[0] if len(objs) == 1 else objs)
    if fmt == "llama3":
        return "<|python_tag|>" + "; ".join(
            json.dumps({"name": o["name"], "parameters": o["arguments"]}) for o in objs
        )
    if fmt == "mistral":
        return "[TOOL_CALLS]" + json.dumps(objs)
    if fmt == "pythonic":
        written = (
            f"{o['name']}({', '.join(f'{k}={v!r}' for k, v in o['arguments'].items())})"
            for o in objs
        )
        return "```python\n" + "\n".join(written) + "\n```"
    return "\n".join(f"<function={o['name']}>{json.dumps(o['arguments'])}</function>" for o in objs)


def _whole_file(write: ToolCall, rng: random.Random) -> str:
    """A `write_file` call as the file it writes, shown in a fence under its path."""
    arguments = json.loads(write.arguments or "{}")
    path, content = str(arguments.get("path", "")), str(arguments.get("content", ""))
    label = rng.choice([f"Here is the updated `{path}`:", f"### {path}", f"**{path}**"])
    language = "python" if path.endswith(".py") else ""
    return f"{label}\n\n```{language}\n{content.rstrip()}\n```"


def _chatter(text: str) -> str:
    """An answer as a chatty model gives it: prose around the JSON, the fence dropped."""
    body = text
    if "```" in text:
        start = text.find("```")
        inner = text[start:].split("\n", 1)[-1]
        body = text[:start] + inner.split("```", 1)[0]
    return (
        f"Sure! Here is what I came up with.\n\n{body.strip()}\n\nLet me know if you need changes."
    )


def _read_back(request: ChatRequest) -> ChatRequest:
    """`request` with the turns sent back as written (`Message.written`: a call in text,
    its results as user turns) read as calls and results again, as a model reads its own
    words. Results of calls the text does not show (a file written out in a fence) are
    paired with calls made up for them, with the result's tool name."""
    offered = {t.name: tuple(t.parameters.get("properties", {})) for t in request.tools}
    out: list[Message] = []
    pending: list[ToolCall] = []
    turn = -1  # where the last assistant turn is in `out`
    for i, m in enumerate(request.messages):
        result = read_result_text(m.content or "") if m.role == "user" else None
        if result is not None and turn >= 0:
            tool, content = result
            call = next((c for c in pending if c.name == tool), None)
            if call is None:  # its call is not in the text: make one up
                call = ToolCall.model_construct(id=f"read-back-{i}", name=tool, arguments="{}")
                calls = [*out[turn].tool_calls, call]
                out[turn] = out[turn].model_copy(update={"tool_calls": calls})
            else:
                pending.remove(call)
            out.append(Message.tool(call, content))
            continue
        pending = []
        if m.role == "assistant":
            turn = len(out)
            if not m.tool_calls and m.content and offered:
                found = calls_from_text(m.content, offered)
                if found.calls:
                    pending = list(found.calls)
                    m = Message.assistant(found.text or None, list(found.calls))
        out.append(m)
    return request.model_copy(update={"messages": out})


def _last_assistant(messages: Sequence[Message]) -> Message | None:
    return next((m for m in reversed(messages) if m.role == "assistant"), None)


def _good_turns(request: ChatRequest) -> ChatRequest:
    """`request` without the turns that went wrong (and what answered them): a call to a
    tool not offered, a repeat of the turn before, a turn that called nothing."""
    offered = {t.name for t in request.tools}
    kept: list[Message] = []
    skipping = False
    last_kept: Message | None = None
    for m in request.messages:
        if m.role == "assistant":
            bad = (
                not m.tool_calls
                or any(c.name not in offered for c in m.tool_calls)
                or (
                    last_kept is not None
                    and m.content == last_kept.content
                    and m.tool_calls == last_kept.tool_calls
                )
            )
            skipping = bad and bool(offered)
            if not skipping:
                kept.append(m)
                last_kept = m
        elif not skipping:
            kept.append(m)
    if len(kept) == len(request.messages):
        return request
    return request.model_copy(update={"messages": kept})
