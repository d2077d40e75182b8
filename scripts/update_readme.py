"""Re-run every `$ plan ...` example in README.md and replace the output below it, so the README stays true.

    python scripts/update_readme.py          # rewrites README.md in place
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```\n\$ (plan [^\n]*)\n.*?```", re.S)


def run(command: str) -> str:
    args = shlex.split(command)[1:]
    out = subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True,
                         env={"COLUMNS": "160", "PATH": "/usr/bin:/bin"})
    return (out.stdout + out.stderr).rstrip()


def main() -> int:
    text = README.read_text()
    new = BLOCK.sub(lambda m: f"```\n$ {m.group(1)}\n{run(m.group(1))}\n```", text)
    README.write_text(new)
    print(f"updated {len(BLOCK.findall(text))} examples in {README.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
