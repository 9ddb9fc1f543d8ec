"""`Relay`: which attempt's pieces the caller of a streamed call hears.

A call may take several attempts: a retry after a stream dropped mid-reply, a failover, a
hedge racing a stalled stream. Each attempt's provider tells its pieces as it reads them;
the relay numbers them and passes on one attempt's at a time, so the caller never reads
two answers run together. The first attempt to bring a piece is heard; a later one's
pieces are held while the heard one lives. When the heard attempt fails, the caller gets
a `Restart` and the held pieces of the next; when the call returns a result from another
attempt than the heard one (a hedge that won), a `Restart` and that attempt's pieces. A
result whose text never streamed (a whole reply) arrives as one piece.
"""

from __future__ import annotations

from typing import Literal

from swarm.messages import ChatResult
from swarm.model import Delta, DeltaSink, PieceSink, Restart

__all__ = ["Relay"]


class Relay:
    """The pieces of one call's attempts, passed on to `sink` one attempt at a time."""

    __slots__ = ("_alive", "_heard", "_held", "_results", "_sink", "closed")

    def __init__(self, sink: DeltaSink) -> None:
        self._sink = sink
        self._heard = 0
        """The attempt whose pieces the caller holds (0: none yet)."""
        self._alive = False
        """Is the heard attempt still running (a later attempt's pieces wait for it)?"""
        self._held: dict[int, list[Delta]] = {}
        self._results: dict[int, ChatResult] = {}
        self.closed = False

    def attempt(self, n: int) -> PieceSink:
        """The sink attempt `n`'s provider tells its pieces to."""

        def tell(kind: Literal["text", "thinking"], text: str) -> None:
            self._piece(Delta(kind, text, n))

        return tell

    def succeeded(self, n: int, result: ChatResult) -> None:
        """Attempt `n` returned `result` (it may still lose a race)."""
        self._results[n] = result

    def failed(self, n: int) -> None:
        """Attempt `n` failed or was cancelled: its pieces are void."""
        self._held.pop(n, None)
        if n != self._heard or self.closed:
            return
        self._alive = False
        if self._held:
            following = min(self._held)
            self._switch(following)
            for piece in self._held.pop(following):
                self._sink(piece)

    def close(self, result: ChatResult) -> None:
        """The call returns `result`: the caller ends up holding its text, and only its."""
        if self.closed:
            return
        n = next((k for k, r in self._results.items() if r is result), self._heard or 1)
        if n != self._heard:
            pieces = self._held.pop(n, [])
            self._switch(n)
            for piece in pieces:
                self._sink(piece)
            if not pieces and result.text:  # a whole reply: its text in one piece
                self._sink(Delta("text", result.text, n))
        self.closed = True
        self._held.clear()

    def _piece(self, piece: Delta) -> None:
        if self.closed:
            return
        n = piece.attempt
        if n != self._heard:
            if self._alive:
                self._held.setdefault(n, []).append(piece)
                return
            self._switch(n)
        self._sink(piece)

    def _switch(self, n: int) -> None:
        if self._heard:
            self._sink(Restart(n))
        self._heard, self._alive = n, True
