"""docs/testing.md's example runs as written (its asserts are the test)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def test_the_example_in_docs_testing_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, f"{DOC} has no python example"
    exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "docs_testing_example"})
