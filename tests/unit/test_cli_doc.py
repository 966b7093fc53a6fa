"""docs/cli.md documents every command and option of ``ratchet``, no more; its examples run."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from ratchet.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def commands(
    group: click.Group, path: tuple[str, ...] = ("ratchet",)
) -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


def options(command: click.Command) -> set[str]:
    """Every option name of ``command`` (long and short), without --help."""
    return {
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    }


def sections() -> dict[str, str]:
    """The text of each ``## `ratchet ...` `` section, and the intro under the key ``ratchet``."""
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## `(ratchet[^`]*)`\s*$", text, flags=re.MULTILINE)
    found = {"ratchet": parts[0]}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        assert heading not in found, f"{heading} is documented twice"
        found[heading] = body
    return found


def documented_options(section: str) -> set[str]:
    """The options named in the first column of the section's option table."""
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `-"):
            first = line.split("|")[1]
            names.update(re.findall(r"`(-[-\w]+)`", first))
    return names


def test_every_command_has_a_section_and_no_section_is_stale() -> None:
    documented = set(sections()) - {"ratchet"}
    assert documented == {path for path, _ in commands(main)}


@pytest.mark.parametrize(("path", "command"), list(commands(main)))
def test_the_options_of_each_command_are_documented(path: str, command: click.Command) -> None:
    assert documented_options(sections()[path]) == options(command), path


def test_the_options_of_ratchet_itself_are_documented() -> None:
    assert documented_options(sections()["ratchet"]) == options(main)


def test_the_introductory_examples_run(tmp_path: Path) -> None:
    intro = sections()["ratchet"]
    block = re.findall(r"```console\n(.*?)```", intro, re.DOTALL)[-1]
    lines = [line[2:] for line in block.splitlines() if line.startswith("$ ratchet ")]
    assert len(lines) == 3
    for line in lines:
        args = shlex.split(line)[1:]
        done = subprocess.run(
            [sys.executable, "-m", "ratchet.cli", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert done.returncode == 0, (line, done.stderr)
        assert done.stdout.strip(), line


def test_the_db_upgrade_example_prints_what_the_page_shows(tmp_path: Path) -> None:
    section = sections()["ratchet db upgrade"]
    command, shown = re.findall(r"```console\n\$ (.*?)\n(.*?)\n```", section, re.DOTALL)[0]
    done = subprocess.run(
        [sys.executable, "-m", "ratchet.cli", *shlex.split(command)[1:]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert (done.returncode, done.stdout.strip()) == (0, shown.strip())
