"""Every command the README and docs/ show can be pasted on a fresh machine: it goes through
``./run`` (which installs uv and the locked dependencies itself, so nothing but Python and
git has to be on PATH), and names a ``run`` command, a ``draftgate`` command and options that
exist. tests/docs/test_readme.py runs the README's runnable blocks; this checks the rest too
(servers that run until stopped, commands that need a value printed earlier), without
running them."""

from __future__ import annotations

import importlib.util
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from service.cli import app
from tests.docs.reader import ROOT
from tests.docs.test_readme import marked_blocks

# Not docs/decisions/: its records say what was decided and why; they quote commands, they do
# not teach them.
DOCS = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
FENCE = re.compile(
    r"^(?P<indent>[ ]*)```(?P<lang>\w*)\n(?P<body>.*?)\n(?P=indent)```$", re.S | re.M
)
SHELL_LANGUAGES = {"", "sh", "bash", "shell", "console"}
# A command a fresh machine does not have: uv is in .tools/bin, the rest in .venv/bin.
NOT_ON_PATH = re.compile(r"(?:^|[;&|(]|\$\()\s*(?:\w+=\S*\s+)*(uvx?|draftgate|python|pytest)\s")
PLACEHOLDER = re.compile(r"<[^<>\n]+>")
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")


def command_lines(doc: Path) -> Iterator[str]:
    """The shell lines of a document: fenced shell blocks, indented code blocks and inline
    code that starts with ./run or uv; heredoc bodies left out, continued lines joined."""
    text = doc.read_text(encoding="utf-8")
    lines: list[str] = []
    for match in FENCE.finditer(text):
        if match["lang"] in SHELL_LANGUAGES:
            lines += [line.strip() for line in match["body"].splitlines()]
    outside = FENCE.sub("", text)
    lines += [line.strip() for line in outside.splitlines() if re.match(r" {4,}\./run ", line)]
    lines += re.findall(r"`((?:\./run|uvx?) [^`]+)`", outside)
    ending: str | None = None
    joined = ""
    for line in lines:
        if ending is not None:
            ending = None if line == ending else ending
            continue
        if heredoc := HEREDOC.search(line):
            ending = heredoc[1]
        joined += line
        if joined.endswith("\\"):
            joined = joined[:-1].rstrip() + " "
            continue
        yield joined
        joined = ""


def all_lines() -> list[tuple[str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), line) for doc in DOCS for line in command_lines(doc)]


def run_invocations(line: str) -> Iterator[list[str]]:
    """Each ``./run …`` in a line, as its words up to the next shell operator."""
    lexer = shlex.shlex(PLACEHOLDER.sub("VALUE", line), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    for at, word in enumerate(words):
        if word == "./run":
            rest = []
            for following in words[at + 1 :]:
                if following and set(following) <= set("();<>|&"):
                    break
                rest.append(following)
            yield rest


def run_commands() -> set[str]:
    """The commands ``./run`` has: the labels of its case statement."""
    labels = re.findall(r"^ {4}([\w|]+)\)", (ROOT / "run").read_text(), re.M)
    return {name for label in labels for name in label.split("|")}


def draftgate_command(words: list[str]) -> tuple[Any, list[str]]:
    """The draftgate (sub)command the words name, and the words after its name."""
    command: Any = typer.main.get_command(app)
    words = list(words)
    while hasattr(command, "get_command") and words[:1] != ["…"]:  # `draftgate …` in prose
        assert words, "a group, not a command"
        name = words.pop(0)
        found = command.get_command(command.context_class(command), name)
        assert found is not None, f"no draftgate command {name!r}"
        command = found
    return command, words


def options_of(command: Any) -> set[str]:
    return {"--help"} | {o for p in command.params for o in [*p.opts, *p.secondary_opts]}


def test_every_section_of_the_readme_has_runnable_blocks():
    blocks = marked_blocks()
    assert [b.kind for b in blocks].count("start") == 1
    assert blocks[0].kind == "start", "the stack starts before anything runs against it"
    assert {b.section for b in blocks} == {
        "## Quickstart",
        "## Try it",
        "## For approvers",
        "## Operating it",
    }


def test_no_command_needs_what_a_fresh_machine_lacks():
    """Not `uv …` (uv is in .tools/bin, not on PATH), nor draftgate, python or pytest of the
    virtual environment: `./run draftgate …` and `./run python …` instead (python3 -c with
    the standard library only is fine: every machine with Python has it)."""
    assert [f"{doc}: {line}" for doc, line in all_lines() if NOT_ON_PATH.search(line)] == []


def test_the_commands_shown_are_found():
    lines = all_lines()
    assert len(lines) > 60, "the docs' commands were found"
    assert sum(1 for _, line in lines if "./run draftgate" in line) > 40


def problem_of(words: list[str]) -> str | None:
    """What is wrong with one ``./run …`` invocation, or None."""
    if not words or words[0] not in run_commands():
        return "no such ./run command"
    name, arguments = words[0], words[1:]
    if name in ("draftgate", "dev"):
        try:
            command, rest = draftgate_command(arguments if name == "draftgate" else ["dev"])
        except AssertionError as missing:
            return str(missing).splitlines()[0]
        rest = rest if name == "draftgate" else arguments
        unknown = {word.split("=")[0] for word in rest if word.startswith("--")}
        unknown -= options_of(command)
        return f"no such option {sorted(unknown)}" if unknown else None
    if name == "python" and arguments[:1] == ["-m"]:
        found = importlib.util.find_spec(arguments[1]) is not None
        return None if found else f"no module {arguments[1]}"
    if name == "python" and arguments and arguments[0].endswith(".py"):
        found = (ROOT / arguments[0]).exists() or "VALUE" in arguments[0]  # a <placeholder>
        return None if found else f"no file {arguments[0]}"
    return None


def test_every_run_command_shown_exists_with_its_options():
    problems = [
        f"{doc}: {line}: {problem}"
        for doc, line in all_lines()
        for words in run_invocations(line)
        if (problem := problem_of(words))
    ]
    assert problems == []


def test_the_checks_above_catch_what_they_look_for():
    """A renamed command, a dropped option and a bare uv are each found."""
    with pytest.raises(AssertionError, match="no draftgate command 'evnets'"):
        draftgate_command(["audit", "evnets"])
    command, rest = draftgate_command(["approve", "dft_x", "--key", "k.pem"])
    assert rest == ["dft_x", "--key", "k.pem"]
    assert "--yes" in options_of(command)
    assert "--execute-now" not in options_of(command)
    assert NOT_ON_PATH.search("uv run draftgate drafts list")
    assert NOT_ON_PATH.search('export T=$(python -c "print(1)")')
    assert NOT_ON_PATH.search("DRAFTGATE_X=1 draftgate serve api")
    assert not NOT_ON_PATH.search("./run draftgate drafts list")
    assert not NOT_ON_PATH.search('export T=$(python3 -c "print(1)")')
    assert list(run_invocations("./run draftgate trace <trace id> > t.txt")) == [
        ["draftgate", "trace", "VALUE"]
    ]
    assert (
        problem_of(["draftgate", "audit", "export", "--outt", "x"]) == "no such option ['--outt']"
    )
    assert problem_of(["draftgate", "audit", "evnets"]) == "no draftgate command 'evnets'"
    assert problem_of(["python", "-m", "reliability.dirll"]) == "no module reliability.dirll"
    assert problem_of(["pyhton", "x"]) == "no such ./run command"
    assert problem_of(["dev", "--reset", "--ready-timeout", "5"]) is None


def lines_of(text: str, tmp_path: Path) -> list[str]:
    doc = tmp_path / "doc.md"
    doc.write_text(text)
    return list(command_lines(doc))


def test_heredocs_are_skipped_and_continued_lines_joined(tmp_path):
    text = "```sh\n./run python - <<'PY'\nimport x\nPY\n./run draftgate a \\\n  --b c\n```\n"
    assert lines_of(text, tmp_path) == ["./run python - <<'PY'", "./run draftgate a --b c"]
