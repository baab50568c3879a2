"""JSON text -> Python values, read exactly as the TypeScript codec (src/protocol/json.ts) reads it.

The standard ``json`` module alone disagrees with the contract's other codec in ways a router-side
check and the worker must never disagree on: it accepts ``NaN``/``Infinity``, lets a repeated key
win silently, nests as deep as the recursion limit allows and refuses integers past 4300 digits
with a ValueError. Here:

- a repeated key in any object is refused, naming its path (``command.type``), reported when its
  object closes, as the TypeScript parser does;
- nesting deeper than ``MAX_DEPTH`` containers is refused;
- ``NaN``, ``Infinity`` and ``-Infinity`` are refused;
- an integer literal too long to be an int64 stays a ``HugeInt`` (exact for the error message,
  never converted).
"""
from __future__ import annotations

import json
import re
from typing import Any, List, Optional, Tuple, Union

MAX_DEPTH = 64
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)
_TOKENS = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+)', re.S)


class JsonError(ValueError):
    """Not JSON (``path`` empty) or a repeated key (``path`` names it)."""

    def __init__(self, message: str, path: Optional[List[Union[str, int]]] = None):
        super().__init__(message)
        self.path = path or []


class HugeInt(str):
    """An integer literal of more digits than any int64 has: kept as its text."""


class _Duplicate(Exception):
    pass


def _pairs(pairs: List[Tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


def _parse_int(s: str) -> Any:
    if len(s) <= 19:  # at most 19 digits, whatever the sign
        return int(s)
    return HugeInt(s) if len(s.lstrip("-")) > 19 else int(s)


def _constant(name: str) -> Any:
    raise JsonError(f"unexpected {name}")


def _check_depth(text: str) -> None:
    depth = 0
    for m in _BRACKETS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise JsonError("nesting too deep")
        elif c in "]}":
            depth -= 1


def loads(text: str) -> Any:
    """Parses JSON text; raises JsonError (``path`` set for a repeated key)."""
    _check_depth(text)
    try:
        return json.loads(text, object_pairs_hook=_pairs, parse_int=_parse_int, parse_constant=_constant)
    except _Duplicate:
        raise JsonError("duplicate key", duplicate_path(text)) from None
    except JsonError:
        raise
    except (ValueError, RecursionError) as e:
        raise JsonError(f"{type(e).__name__}: {e}") from None


def duplicate_path(text: str) -> List[Union[str, int]]:
    """The path of the first repeated key, in the order objects close (the error path only: the
    text is known to reach a duplicate before any syntax error)."""
    # frames: [kind, keys seen (object) or index (array), current key, duplicate found]
    stack: list = []
    expect_key = False
    for m in _TOKENS.finditer(text):
        tok = m.group(1)
        if tok == "{":
            stack.append(["{", set(), None, None])
            expect_key = True
        elif tok == "[":
            stack.append(["[", 0, None, None])
            expect_key = False
        elif tok in "}]":
            frame = stack.pop()
            if frame[3] is not None:
                return [f[2] if f[0] == "{" else f[1] for f in stack] + [frame[3]]
            expect_key = False
        elif tok == ",":
            top = stack[-1] if stack else None
            if top is not None and top[0] == "[":
                top[1] += 1
            expect_key = top is not None and top[0] == "{"
        elif tok == ":":
            expect_key = False
        elif expect_key and stack and stack[-1][0] == "{":
            key = json.loads(tok)
            top = stack[-1]
            if key in top[1] and top[3] is None:
                top[3] = key
            top[1].add(key)
            top[2] = key
            expect_key = False
    return []


def field_path(path: List[Union[str, int]]) -> str:
    """``["command", "block_hashes", 3]`` -> ``command.block_hashes[3]`` (errors.ts fieldPath)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
