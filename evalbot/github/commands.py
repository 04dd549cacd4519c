"""PR comment commands: a closed set, a parser returning a command or a typed error, help.

Only lines of plain text that start with `/evalbot` count: fenced and indented code (4 spaces
or a tab), inline code, HTML comments and `>` quotes (with their lazy continuation lines, as
GitHub renders them) are removed first, so quoting someone's command never runs it again. A
sentence that echoes the user's text quotes it with `neutral.code_span`, which it cannot break
out of.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from enum import Enum

from evalbot.report.neutral import code_span

PREFIX = "/evalbot"


class Verb(Enum):
    RERUN = "rerun"
    CANCEL = "cancel"
    HELP = "help"
    HOLD = "hold"
    UNHOLD = "unhold"
    WAIVE = "waive"
    MEASURE_MORE = "measure-more"


TAKES_TEXT = frozenset({Verb.WAIVE})  # the rest of the line is the verb's free-text argument
MAINTAINERS = "users with write access"


@dataclass(frozen=True)
class Command:
    verb: Verb
    # A command is identified by its verb; the free text (a waiver's reason) rides along.
    argument: str = field(default="", compare=False)


@dataclass(frozen=True)
class CommandHelp:
    verb: Verb
    usage: str
    description: str
    who: str
    examples: tuple[str, ...]


REGISTRY: tuple[CommandHelp, ...] = (
    CommandHelp(Verb.RERUN, f"{PREFIX} rerun",
                "Evaluate the PR's head again (a new attempt when the head is unchanged).",
                "users with write access; the PR author for a head not evaluated yet",
                (f"{PREFIX} rerun",)),
    CommandHelp(Verb.CANCEL, f"{PREFIX} cancel", "Cancel the PR's queued or running evaluation.",
                "users with write access, and the PR author", (f"{PREFIX} cancel",)),
    CommandHelp(Verb.HELP, f"{PREFIX} help", "Show this list of commands.",
                "users with write access, and the PR author", (f"{PREFIX} help",)),
    CommandHelp(Verb.HOLD, f"{PREFIX} hold",
                "Hold the PR: no evaluation (queued ones are cancelled) until `unhold`.",
                MAINTAINERS, (f"{PREFIX} hold",)),
    CommandHelp(Verb.UNHOLD, f"{PREFIX} unhold", "Lift a hold and queue the PR's head.",
                MAINTAINERS, (f"{PREFIX} unhold",)),
    CommandHelp(Verb.WAIVE, f"{PREFIX} waive <reason>",
                "Accept this head despite a failed gate (regression or correctness); the "
                "verdict stays as measured and the waiver is shown and kept with its reason.",
                MAINTAINERS, (f"{PREFIX} waive the 4k regression is the price of the 64k fix",)),
    CommandHelp(Verb.MEASURE_MORE, f"{PREFIX} measure-more",
                "Measure the same SHAs again with a larger pair budget and pool the samples "
                "with the earlier run.", MAINTAINERS, (f"{PREFIX} measure-more",)),
)


@dataclass(frozen=True)
class MissingCommand:
    def sentence(self) -> str:
        return f"`{PREFIX}` needs a command: one of {_verbs()}."


@dataclass(frozen=True)
class UnknownCommand:
    word: str
    suggestion: str | None

    def sentence(self) -> str:
        hint = f" Did you mean `{PREFIX} {self.suggestion}`?" if self.suggestion else ""
        return f"{code_span(self.word)} is not an evalbot command (commands: {_verbs()}).{hint}"


@dataclass(frozen=True)
class UnexpectedArgument:
    verb: Verb
    argument: str

    def sentence(self) -> str:
        return f"`{PREFIX} {self.verb.value}` takes no arguments; remove {code_span(self.argument)}."


@dataclass(frozen=True)
class MissingArgument:
    verb: Verb

    def sentence(self) -> str:
        return f"`{PREFIX} {self.verb.value}` needs a reason, e.g. `{PREFIX} {self.verb.value} " \
               "the regression is expected`."


@dataclass(frozen=True)
class ConflictingCommands:
    verbs: tuple[Verb, ...]

    def sentence(self) -> str:
        names = " and ".join(f"`{v.value}`" for v in self.verbs)
        return f"One command per comment, please: this one asks for {names}."


ParseError = (MissingCommand | UnknownCommand | UnexpectedArgument | MissingArgument
              | ConflictingCommands)

_INLINE = re.compile(r"`[^`\n]*`")
_LINE = re.compile(rf"^ {{0,3}}{re.escape(PREFIX)}(?![\w-])(?P<rest>.*)$", re.I)  # 4: code
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def parse(body: str) -> Command | ParseError | None:
    """None when the comment holds no command line (the usual case: ordinary discussion)."""
    found: list[Command | ParseError] = []
    for line in _visible_lines(body):
        m = _LINE.match(line)
        if m:
            found.append(_parse_line(_INLINE.sub("", m.group("rest")).split()))
    if not found:
        return None
    errors = [f for f in found if not isinstance(f, Command)]
    if errors:
        return errors[0]
    commands = [c for c in found if isinstance(c, Command)]
    verbs = tuple(dict.fromkeys(c.verb for c in commands))
    return commands[0] if len(verbs) == 1 else ConflictingCommands(verbs)


def _parse_line(words: list[str]) -> Command | ParseError:
    if not words:
        return MissingCommand()
    word = words[0].lower()
    try:
        verb = Verb(word)
    except ValueError:
        close = difflib.get_close_matches(word, [v.value for v in Verb], n=1, cutoff=0.6)
        return UnknownCommand(words[0], close[0] if close else None)
    if verb in TAKES_TEXT:
        text = " ".join(words[1:])
        return Command(verb, text) if text else MissingArgument(verb)
    if len(words) > 1:
        return UnexpectedArgument(verb, words[1])
    return Command(verb)


def _visible_lines(body: str) -> list[str]:
    """Lines of plain text: outside code fences (an unclosed fence runs to the end, as GitHub
    renders it), HTML comments (likewise) and quotes, a quote running to the next blank line."""
    lines, fence, quote = [], "", False
    for line in _uncommented(body.replace("\r\n", "\n")).split("\n"):
        stripped = line.lstrip()
        if fence:
            fence = "" if stripped.startswith(fence) else fence
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif stripped.startswith(">") or (quote and stripped):  # a lazy continuation
            quote = True
        else:
            quote = False
            lines.append(line)
    return lines


def _uncommented(body: str) -> str:
    """The body without HTML comments; an unclosed one hides the rest. A line a comment began
    holds no command ("<!-- x --> /evalbot rerun" is an HTML block on GitHub)."""
    body = _COMMENT.sub("\x00", body)
    body = body.split("<!--", 1)[0]
    return "\n".join("" if "\x00" in line.split(PREFIX, 1)[0] else line.replace("\x00", "")
                      for line in body.split("\n"))


def _verbs() -> str:
    return ", ".join(f"`{v.value}`" for v in Verb)
