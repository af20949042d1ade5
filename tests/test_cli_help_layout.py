"""--help reads in an 80- and a 120-column terminal (the console scripts, through run_app).

typer's rich tables sized the option column by the longest flag pair, so `COLUMNS=80 sailor run
--help` broke every help into 20-character lines starting at column 57 (at 120 columns: 42
characters from column 76) and cut long flags (``--kill-worker-at-s…``); a group's command
list ended its lines with "...".
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ENTRIES = {
    "sailor": "from sailor_runtime.cli import entry; entry()",
    "sailor-planner": "from sailor_planner.cli import main; main()",
    "sailor-sim": "from sailor_sim.cli.app import main; main()",
    "sailor-profiler": "from sailor_profiler.cli import run; run()",
}
HELP_INDENT = 34
"""Where click's help column starts at the latest (its first column is at most 30 wide)."""


def help_text(cli: str, columns: int, *command: str) -> str:
    r = subprocess.run(
        [sys.executable, "-c", ENTRIES[cli], *command, "--help"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm-256color"},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize(
    "cli, command, columns, flag",
    [
        ("sailor", ["run"], 80, "--kill-worker-at-step"),
        ("sailor", ["run"], 120, "--kill-worker-at-step"),
        ("sailor-planner", ["plan"], 80, "--allow-cross-region"),
        ("sailor-sim", ["simulate"], 80, "--sailor-plan"),
        ("sailor-profiler", ["compute"], 80, "--memory-limit-gb"),
    ],
)
def test_help_fits_the_terminal_with_its_text_in_one_wide_column(cli, command, columns, flag):
    text = help_text(cli, columns, *command)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= columns, text
    assert "…" not in text and flag in text, text  # no flag cut short
    indents = [len(line) - len(line.lstrip(" │")) for line in lines if line.strip(" │")]
    assert max(indents) <= HELP_INDENT, text  # the help column starts left, so it is wide


def test_a_groups_command_list_is_wrapped_not_cut():
    text = help_text("sailor", 80)
    commands = text.split("Commands:")[1]
    assert "..." not in commands, text
    assert "controller and worker" in " ".join(text.split())  # run's first sentence, whole
