#!/usr/bin/env python3
"""CI runs README's test command, exactly: .ci/run is a bash script (its shebang, comments)
that changes to the repository root, where README's commands are run, and then runs the second
command of README's "The two commands" block, character for character, and nothing else.
Usage: test_ci_command.py SOURCE_ROOT"""

import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
    readme = f.read()
block = re.search(r"^## The two commands\s*\n+```sh\n(.*?)^```", readme, re.M | re.S)
if not block:
    sys.exit("README.md has no '## The two commands' block with a ```sh fence")
commands = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
commands = [c for c in commands if c]
if len(commands) != 2:
    sys.exit(f"README's two-command block has {len(commands)} commands: {commands}")
main_command, test_command = commands

TO_ROOT = 'cd "$(dirname "$0")/.." || exit 1'
with open(os.path.join(root, ".ci", "run"), encoding="utf-8") as f:
    lines = [line.strip() for line in f if line.strip()]
if not lines or lines[0] != "#!/usr/bin/env bash":
    sys.exit(f".ci/run must start with '#!/usr/bin/env bash', starts with {lines[:1]}")
run = [line for line in lines[1:] if not line.startswith("#")]
if run != [TO_ROOT, test_command]:
    sys.exit(f".ci/run runs {run}; expected [{TO_ROOT!r}, README's test command {test_command!r}]")
print(f".ci/run runs README's test command: {test_command} (main command: {main_command})")
