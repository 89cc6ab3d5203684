"""How a file that cannot be decoded or parsed is named in a one-line message."""

from __future__ import annotations

import json


def not_utf8(exc: UnicodeDecodeError) -> str:
    """``not UTF-8 text (byte 0xff at offset 24)``: the first byte that is not, and where."""
    return f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"


def malformed_json(exc: json.JSONDecodeError) -> str:
    """``malformed JSON at line 1, column 12: Unterminated string starting at``: where first,
    since the parser's own message may end in "at"."""
    return f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
