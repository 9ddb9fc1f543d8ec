"""Telling when an agent goes round in circles.

A model that repeats itself does not get better by being asked again. Like OpenHands'
stuck detector, `StuckWatch` looks at the tail of the run: the same reply (the same calls
with the same arguments, or near-identical text) several times in a row, or the same call
failing the same way several times in a row even when the words around it change. At
`after - 1` repeats the agent is warned (and moved to its fallback model, once); at
`after` it is stopped as `stuck`. A run that only alternates between two replies (A B A B
A B, or A B B A B B: each repeat breaks the other's streak) is stuck too, once its last
`2 * after` replies hold no third, and so is one that went round the same 3 to 6 replies
`after` times over. So is one whose last `3 * after` replies called no tool
that worked: a 1.5B model went round three texts in other words each time ("please
provide the file", "here is the final version", "I see you updated it"), with a failing
edit between them, for 22 replies, each close to none of its neighbours.
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from swarm.messages import Message

__all__ = ["StuckWatch", "Verdict"]

Verdict = Literal["ok", "warn", "stuck"]

_NEAR = 0.92
"""Texts this similar (difflib's ratio) are the same reply said again."""
_COMPARED_CHARS = 2000
_LONGEST_CYCLE = 6
"""The longest round of replies told apart from work: a 1.5B model went round five calls
(rename a name, edit a file, rename it back, edit another, rename again) 7 times."""


def _canonical(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), sort_keys=True)
    except ValueError:
        return arguments.strip()


def _norm(text: str | None) -> str:
    return " ".join((text or "").split()).lower()[:_COMPARED_CHARS]


@dataclass
class StuckWatch:
    """Counts repeats of the latest reply and of the latest failing call."""

    after: int = 3
    """Repeats that stop the agent (a warning comes one repeat earlier)."""
    repeats: int = 0
    """How many times in a row the latest reply has been sent."""
    failures: int = 0
    """How many replies in a row made the same call that failed the same way."""
    repeated: str = ""
    """The reply (or failing call) that is being repeated, for the report."""
    _last_calls: tuple[tuple[str, str], ...] = ()
    _last_text: str = ""
    _recent: deque[tuple[tuple[tuple[str, str], ...], str]] = field(
        default_factory=lambda: deque(maxlen=6), repr=False
    )
    _last_failure: tuple[str, str, str] | None = None
    idle: int = 0
    """How many replies in a row called no tool that worked."""
    _seen: bool = field(default=False, repr=False)
    _previous: Message | None = field(default=None, repr=False)
    """The reply before the one being seen (what an alternation alternates with)."""
    _messages: deque[Message] = field(
        default_factory=lambda: deque(maxlen=_LONGEST_CYCLE), repr=False
    )
    """The latest replies, to name a cycle's."""

    def see_reply(self, message: Message) -> Verdict:
        """The model's latest reply; returns what to do about repeats so far."""
        calls = tuple((c.name, _canonical(c.arguments)) for c in message.tool_calls)
        text = _norm(message.content)
        same = self._seen and calls == self._last_calls and self._similar(text)
        self._seen, self._last_calls, self._last_text = True, calls, text
        self.repeats = self.repeats + 1 if same else 1
        if same:
            self.repeated = _describe(message)
        recent = self._recent
        if recent.maxlen != _LONGEST_CYCLE * self.after:
            recent = self._recent = deque(recent, maxlen=_LONGEST_CYCLE * self.after)
        recent.append((calls, text))
        previous, self._previous = self._previous, message
        self._messages.append(message)
        pairs = 2 * self.after
        if (
            len(recent) >= pairs
            and len(set(itertools.islice(recent, len(recent) - pairs, None))) <= 2
        ):
            pair = [_describe(m) for m in (previous, message) if m is not None]
            self.repeated = "alternating between two replies: " + " / ".join(dict.fromkeys(pair))
            return "stuck"
        if period := self._cycle():
            cycle = [
                _describe(m)
                for m in itertools.islice(self._messages, len(self._messages) - period, None)
            ]
            self.repeated = f"going round the same {period} replies: " + " / ".join(cycle)
            return "stuck"
        return self._verdict(max(self.repeats, self.failures))

    def _cycle(self) -> int:
        """The period of the cycle the last replies went round `after` times (3 to
        `_LONGEST_CYCLE` replies long), 0 when they did not."""
        recent = self._recent
        for period in range(3, _LONGEST_CYCLE + 1):
            span = period * self.after
            if len(recent) < span:
                break
            start = len(recent) - span
            if all(recent[i] == recent[i + period] for i in range(start, len(recent) - period)):
                return period
        return 0

    def see_failures(self, message: Message, failed: Sequence[tuple[str, str, str]]) -> Verdict:
        """The latest reply, and those of its calls that failed, as (name, arguments,
        error text)."""
        worked = len(message.tool_calls) > len(failed)
        self.idle = 0 if worked else self.idle + 1
        if self.idle >= 3 * self.after:
            self.repeated = f"{self.idle} replies in a row with no tool call that worked; the "
            self.repeated += f"last: {_describe(message)}"
            return "stuck"
        if not failed:
            self.failures, self._last_failure = 0, None
            return "ok"
        first = failed[0]
        key = (first[0], _canonical(first[1]), first[2][:200])
        if key == self._last_failure:
            self.failures += 1
            self.repeated = f"{first[0]}({first[1][:300]}) -> {first[2][:150]}"
        else:
            self.failures, self._last_failure = 1, key
        return self._verdict(max(self.repeats, self.failures))

    def _similar(self, text: str) -> bool:
        if text == self._last_text:
            return True
        if not text or not self._last_text:
            return False
        matcher = difflib.SequenceMatcher(None, text, self._last_text, autojunk=False)
        return matcher.quick_ratio() >= _NEAR and matcher.ratio() >= _NEAR

    def _verdict(self, count: int) -> Verdict:
        if count >= self.after:
            return "stuck"
        if count == self.after - 1:
            return "warn"
        return "ok"


def _describe(message: Message) -> str:
    calls = "; ".join(f"{c.name}({c.arguments[:200]})" for c in message.tool_calls)
    text = " ".join((message.content or "").split())[:300]
    return " | ".join(part for part in (text, calls) if part)[:500] or "(an empty reply)"
