"""Text from models and data is inert on a terminal: `inert` takes out the control and escape sequences a
model's answer, a claim, an abstract or a server's error can carry, before it is printed or written to a
file meant for people.

A terminal obeys what it prints: CSI sequences (`ESC [ 31 m`, colours, cursor moves, erasing the screen), OSC
sequences (`ESC ] 8 ;; URL`, a hyperlink whose text hides where it goes; `ESC ] 52`, a write to the
clipboard; window titles), DCS/APC/PM/SOS strings, their one-byte C1 forms (U+009B, U+009D, ...), and the
other C0/C1 controls (a carriage return or backspace rewrites what was printed before it). Whole sequences
are removed (their parameters mean nothing to a reader), and so is any other control character, except a
newline and a tab, and `\\r\\n` in files (a CRLF file keeps its line ends). JSON files keep the text as data:
the JSON writers escape every control character (`\\u001b`), which no terminal obeys.
"""

from __future__ import annotations

import re

# ESC or its C1 one-byte form, then: a string (OSC ] / DCS P / SOS X / PM ^ / APC _) up to its terminator (BEL
# or ST, ESC \ or U+009C) or the end of its line (what follows an unterminated one stays); a CSI sequence;
# or any other escape (one character).
_SEQUENCE = re.compile(
    r"(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but tab and newline, DEL, C1
_CONTROL_FILE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n)")  # ... and \r only before \n


def inert(text: str, file: bool = False) -> str:
    """`text` without escape sequences and control characters (tab and newline kept; `file`: \\r\\n too)."""
    if text.isprintable():  # the common case: nothing to take out (fast)
        return text
    return (_CONTROL_FILE if file else _CONTROL).sub("", _SEQUENCE.sub("", text))


# Raw DEL and C1 characters, which `json.dumps(ensure_ascii=False)` writes as they are (it escapes C0 only):
# escaped here, so that a JSON file holds no raw control character a terminal could obey.
_C1 = re.compile(r"[\x7f-\x9f]")


def json_inert(text: str) -> str:
    """A JSON text with its raw DEL and C1 characters escaped (\\u009b); the data it holds is unchanged."""
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
