"""The ``sparsegpu`` command line: info, argument errors, exit codes."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from sparsegpu import cli


def test_info_prints_versions_and_backends(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "numpy" in out and "scipy" in out
    assert "Backends" in out


def test_info_json_lists_every_backend(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {b["name"] for b in data["backends"]}
    assert "scipy" in names
    for backend in data["backends"]:
        assert backend["available"] == (backend["reason"] is None)
    if not data["gpus"]:
        assert data["gpu_unavailable_reason"]


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_unknown_command_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_module_entry_point_runs():
    result = subprocess.run(
        [sys.executable, "-m", "sparsegpu", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["versions"]["sparsegpu"]


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_help_shows_every_default(command):
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command_parser = sub.choices[command]
    formatter = command_parser.formatter_class(prog=command)
    for action in command_parser._actions:
        if action.default in (None, False, [], argparse.SUPPRESS) or not action.help:
            continue
        assert "default" in formatter._get_help_string(action), action.dest
