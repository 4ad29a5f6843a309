"""Make arbitrary agent text safe to send to a TextWorld (Inform 7 / Glulx) interpreter.

Measured here: a NUL byte in a command segfaults the interpreter, which runs inside the Python process;
``restart``, ``quit``, ``save`` and ``undo`` leave the game waiting for a yes/no answer (or rewind it), so
every later command is answered "Please answer yes or no". Such commands never reach the game; they get a
feedback observation instead. A line that starts with a backslash is an escape of the dumb-frotz front end, not
game input: ``\\ineva it`` (sampled by the tiny SLM in GRPO rollouts, 2026-11-28) made it print "unknown command" forever, 5 GB
of log in minutes, and the episode never returned; backslashes become spaces. Everything else reaches the game,
which answers in its own words.

Example:
    >>> sanitize_command("  Take   the KEY\\x00 ")
    ('take the key', None)
    >>> sanitize_command("restart")[1]
    "[r2v] 'restart' is an interpreter meta-command and is disabled in this environment."
    >>> sanitize_command("café ☕")
    ('cafe', None)
    >>> sanitize_command("\\\\ineva it")
    ('ineva it', None)
"""

from __future__ import annotations

import unicodedata

from r2v_envs.errors import InvalidActionError

MAX_COMMAND_CHARS = 190  # Jericho truncates (and warns) at 198 bytes
# Commands that talk to the interpreter rather than the game world.
META_COMMANDS = frozenset({
    "quit", "q", "restart", "restore", "save", "undo", "script", "unscript", "transcript", "noscript",
})


def sanitize_command(action: object) -> tuple[str, str | None]:
    """Return ``(command, rejection)``: the command to send, or a feedback message if it must not be sent.

    Non-text actions are a programming error and raise :class:`InvalidActionError`.
    """
    if not isinstance(action, str):
        raise InvalidActionError(f"TextWorld actions are str, got {type(action).__name__}")
    # fold accents and compatibility forms to ASCII; the interpreter's parser only knows ZSCII letters
    text = unicodedata.normalize("NFKD", action).encode("ascii", "ignore").decode("ascii")
    # NUL, newlines, escapes -> space; a backslash too (the front end's escape character, see the module doc)
    text = "".join(ch if ch.isprintable() and ch != "\\" else " " for ch in text)
    command = " ".join(text.lower().split())
    if len(command) > MAX_COMMAND_CHARS:
        # long text is never a real command; cutting it keeps the interpreter's line buffer safe
        command = command[:MAX_COMMAND_CHARS]
    first = command.split(" ", 1)[0] if command else ""
    if first in META_COMMANDS:
        return command, (f"[r2v] {first!r} is an interpreter meta-command and is disabled in this environment.")
    return command, None
