"""Why a JSON record value is not JSON we read: nesting too deep, bad UTF-8, malformed text,
numbers msgspec refuses, each turned into a quarantine reason that names the byte or the path.

These are the JSON parser's (``eos.compute.formats.json``) checks on the bytes, before or after
msgspec decodes them; the value rules every format shares are ``eos.compute.formats.values``'.
"""

from __future__ import annotations

import re

from eos.compute.formats import REASON_CHARS

# Deeper documents are quarantined. msgspec recurses per nesting level and gives up at a depth that
# depends on the caller's Python stack; a fixed, lower limit keeps the outcome the same everywhere.
MAX_DEPTH = 500
_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_BYTE = re.compile(r"\(byte (\d+)\)")
_LONE_SURROGATE = re.compile(  # msgspec reports these as truncated input
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_AT_PATH = re.compile(r"^(.*) - at `(.*)`$")
_HUGE_EXPONENT = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?[eE][+-]?0*[0-9]{19,}")


def _depth(raw: bytes) -> int:
    """How deeply arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def too_deep(raw: bytes) -> bool:
    return (len(raw) > MAX_DEPTH and raw.count(b"[") + raw.count(b"{") > MAX_DEPTH
            and _depth(raw) > MAX_DEPTH)


def utf8_error(raw: bytes) -> int | None:
    if raw.isascii():
        return None
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start
    return None


def malformed(raw: bytes, error: Exception) -> str:
    message = str(error).removeprefix("JSON is malformed: ")
    if not raw.strip():
        message = "the record value is empty"
    elif message == "Input data was truncated" and _LONE_SURROGATE.search(raw):
        message = "a \\u escape is half of a UTF-16 surrogate pair"
    at = _BYTE.search(message)
    if at:
        start = int(at.group(1))
        for constant in (b"NaN", b"Infinity"):
            if raw.startswith(constant, start):
                sign = "-" if constant == b"Infinity" and raw[start - 1:start] == b"-" else ""
                message = (f"{sign}{constant.decode()} is not a JSON number "
                           f"(byte {start - len(sign)})")
    return f"malformed JSON: {message}"[:REASON_CHARS]


def unsupported_exponent(raw: bytes) -> str:
    """The reason for a number whose exponent ``Decimal`` refuses (beyond +-10^18)."""
    huge = _HUGE_EXPONENT.search(raw)
    number = huge.group().decode()[:40] if huge else "a number"
    return f"unsupported JSON number {number}: its exponent is out of range"


def decoder_rejection(message: str, labels: dict[str, str]) -> str:
    """The reason for a record only the typed decoder refuses (a duplicate declared key with a
    value of the wrong type): its message, naming the field when it is at a declared path
    (``labels``: ``$.a.b`` -> the field's label)."""
    at = _AT_PATH.search(message)
    if at and at.group(2) in labels:
        return f"field {labels[at.group(2)]}: {at.group(1)}"[:REASON_CHARS]
    return f"rejected by the decoder: {message}"[:REASON_CHARS]
