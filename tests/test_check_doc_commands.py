"""tools/check_doc_commands.py: the docs' shell lines, found and run as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from .scripts import load_script

tool = load_script(Path("tools") / "check_doc_commands.py")

MARKDOWN = """# A page

```bash
sparsegpu info                  # versions
sparsegpu probe                 # GPU only: needs a device
pip install -e ".[test]"
mpiexec -n 4 python solve.py    # not run: solve.py is yours
sparsegpu bench west0067 \\
    --repeat 2                  # continued
echo "# not a comment" # network
```

```python
print("not a shell block")
```

```console
$ sparsegpu info
Versions ...
```
"""

RST = """Page
====

.. code-block:: bash

   # a comment line
   sparsegpu fetch HB/bcsstk13     # network: the collection

.. code-block:: python

   x = 1

Text.
"""


def test_commands_and_why_some_are_skipped(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(MARKDOWN)
    found = [(c.line, c.text.split("#")[0].strip(), c.skip) for c in tool.markdown_commands(page)]
    assert found == [
        (4, "sparsegpu info", None),
        (5, "sparsegpu probe", "needs a GPU"),
        (6, 'pip install -e ".[test]"', "installs: needs the network (CI's own steps install)"),
        (7, "mpiexec -n 4 python solve.py", "solve.py is yours"),
        (8, "sparsegpu bench west0067 --repeat 2", None),
        (10, 'echo "', "needs the network"),
        (18, "sparsegpu info", None),
    ]


def test_rst_code_blocks(tmp_path):
    page = tmp_path / "page.rst"
    page.write_text(RST)
    (command,) = tool.rst_commands(page)
    assert command.line == 7 and command.skip == "needs the network"


def test_every_documented_command_is_found():
    commands = [c for path in tool.documents([]) for c in tool.commands_of(path)]
    texts = [c.text for c in commands]
    assert any(t.startswith("sparsegpu bench bcsstk13.mtx.gz") for t in texts)
    assert any("asv run --python=same --quick" in t for t in texts)


@pytest.mark.parametrize(("line", "failed"), [("true", False), ("exit 3", True)])
def test_a_failing_command_is_reported(tmp_path, capsys, line, failed):
    page = tmp_path / "page.md"
    page.write_text(f"```bash\n{line}\n```\n")
    commands = tool.markdown_commands(page)
    for command in commands:  # named relative to the repository in the report
        command.path = tool.ROOT / "README.md"
    assert bool(tool.run(commands, Path(tool.sys.executable).parents[1], 60)) == failed
    assert ("FAIL" in capsys.readouterr().out) == failed
