"""The command parser as a table; the help registry renders and its examples parse."""

from __future__ import annotations

import pytest

from evalbot.github.commands import (
    REGISTRY,
    Command,
    ConflictingCommands,
    MissingCommand,
    UnexpectedArgument,
    UnknownCommand,
    Verb,
    parse,
)
from evalbot.github.texts import help_comment

RERUN, CANCEL, HELP = Command(Verb.RERUN), Command(Verb.CANCEL), Command(Verb.HELP)

CASES = [
    ("/evalbot rerun", RERUN),
    ("/evalbot cancel", CANCEL),
    ("/evalbot help", HELP),
    ("  /evalbot   rerun  ", RERUN),
    ("/EvalBot ReRun", RERUN),
    ("Looks good.\n/evalbot rerun\nthanks", RERUN),
    ("/evalbot rerun\r\n", RERUN),
    ("/evalbot rerun\n/evalbot rerun", RERUN),
    ("no command here", None),
    ("", None),
    ("please run /evalbot rerun", None),  # not at the start of a line
    ("/evalbotrerun", None),
    ("/evalbot-rerun", None),
    ("> /evalbot rerun", None),  # quoted reply
    ("  > /evalbot cancel\nok", None),
    ("`/evalbot rerun`", None),  # inline code
    ("```\n/evalbot rerun\n```", None),  # fenced
    ("~~~md\n/evalbot cancel\n~~~", None),
    ("```\n/evalbot rerun", None),  # an unclosed fence runs to the end
    ("```\ncode\n```\n/evalbot help", HELP),
    ("<!-- /evalbot rerun -->", None),  # an HTML comment
    ("<!--\n/evalbot rerun\n-->", None),
    ("<!-- note -->\n/evalbot help", HELP),
    ("draft\n<!-- unclosed\n\n/evalbot rerun", None),  # runs to the end, as GitHub renders it
    ("    /evalbot rerun", None),  # an indented code block
    ("\t/evalbot rerun", None),
    ("   /evalbot rerun", RERUN),  # three spaces are still text
    ("> you wrote\n/evalbot rerun", None),  # a lazy continuation of the quote
    ("> you wrote\n\n/evalbot rerun", RERUN),  # a blank line ends the quote
    ("`x` /evalbot rerun", None),  # not at the start of the rendered line
    ("/evalbot", MissingCommand()),
    ("/evalbot rerunn", UnknownCommand("rerunn", "rerun")),
    ("/evalbot retry", UnknownCommand("retry", "rerun")),
    ("/evalbot merge", UnknownCommand("merge", None)),
    ("/evalbot rerun now", UnexpectedArgument(Verb.RERUN, "now")),
    ("/evalbot rerun\n/evalbot cancel", ConflictingCommands((Verb.RERUN, Verb.CANCEL))),
    ("/evalbot help\n/evalbot bogus", UnknownCommand("bogus", None)),
]


@pytest.mark.parametrize(("body", "expected"), CASES)
def test_parse_table(body: str, expected: object) -> None:
    assert parse(body) == expected


@pytest.mark.parametrize("error", [e for _b, e in CASES if e is not None
                                   and not isinstance(e, Command)])
def test_every_error_is_one_helpful_sentence(error: object) -> None:
    text = error.sentence()  # type: ignore[attr-defined]
    assert "\n" not in text and text.endswith((".", "?")) and "`" in text


def test_registry_covers_every_verb_and_examples_parse() -> None:
    assert {h.verb for h in REGISTRY} == set(Verb)
    for entry in REGISTRY:
        assert entry.description and entry.who and entry.usage
        for example in entry.examples:
            assert parse(example) == Command(entry.verb)


def test_help_comment_lists_every_command() -> None:
    text = help_comment("evalbot-approved")
    for entry in REGISTRY:
        assert f"`{entry.usage}`" in text
    assert "evalbot-approved" in text and "<!-- evalbot" not in text
