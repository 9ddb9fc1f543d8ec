"""Parsing Python source from any thread: `ast.parse` behind one lock.

CPython 3.11's AST constructor keeps its recursion depth in state the threads share, so
two `ast.parse` calls at once (two agents' `edit_file` in worker threads, a hook on the
event loop) can fail with `SystemError: AST constructor recursion depth mismatch`
(python/cpython#106905). A resumed demo lost a subtask to it: the coder's edit failed, and
three fix rounds could not undo it. Every parse in swarm goes through `parse`; a parse is
short (a source file, a reply's code block), so the lock costs little.
"""

from __future__ import annotations

import ast
import threading

__all__ = ["parse", "parse_expression"]

_lock = threading.Lock()


def parse(source: str | bytes) -> ast.Module:
    """`ast.parse(source)`, one at a time in this process."""
    with _lock:
        return ast.parse(source)


def parse_expression(source: str) -> ast.expr:
    """The expression `source` is (`ast.parse(source, mode="eval").body`), one at a time."""
    with _lock:
        return ast.parse(source, mode="eval").body
