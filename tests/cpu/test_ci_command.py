#!/usr/bin/env python3
"""CI runs the test command README.md gives: .ci/run reads it from README's "The two commands"
block (the line marked "# the tests") and runs it from the repository root. Checked by running
.ci/run on copies of the tree's README whose test line runs a marker command instead: the
marker runs (from the root), its exit status is .ci/run's, and a README without the line is a
clear error. Usage: test_ci_command.py SOURCE_ROOT"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

root = sys.argv[1] if len(sys.argv) > 1 else "."
with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
    readme = f.read()
block = re.search(r"^## The two commands\s*\n+```sh\n(.*?)^```", readme, re.M | re.S)
if not block:
    sys.exit("README.md has no '## The two commands' block with a ```sh fence")
marked = [line for line in block.group(1).splitlines() if "# the tests" in line]
if len(marked) != 1:
    sys.exit(f"README's two-command block marks {len(marked)} lines '# the tests': {marked}")
test_line = marked[0]
test_command = test_line.split("#", 1)[0].strip()


def run_ci(readme_text):
    """.ci/run in a copy of the tree's layout with README.md = readme_text, from elsewhere."""
    with tempfile.TemporaryDirectory() as tree:
        os.mkdir(os.path.join(tree, ".ci"))
        shutil.copy(os.path.join(root, ".ci", "run"), os.path.join(tree, ".ci", "run"))
        with open(os.path.join(tree, "README.md"), "w", encoding="utf-8") as f:
            f.write(readme_text)
        done = subprocess.run(["bash", os.path.join(tree, ".ci", "run")], cwd=tempfile.gettempdir(),
                              capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout, done.stderr, os.path.realpath(tree)


def with_test_command(command):
    return readme.replace(test_line, test_line.replace(test_command, command, 1), 1)


failures = []
rc, out, err, tree = run_ci(with_test_command("echo ci-marker; pwd"))
if rc != 0 or "ci-marker" not in out or tree not in out:
    failures.append(f"the marker command did not run from the root: rc {rc}, out {out!r}, err {err!r}")
rc, out, err, _ = run_ci(with_test_command("exit 7"))
if rc != 7:
    failures.append(f"the test command's exit status 7 came back as {rc}")
rc, out, err, _ = run_ci(readme.replace(test_line, test_command, 1))  # the mark removed
if rc != 2 or "# the tests" not in err:
    failures.append(f"a README without the marked line: rc {rc}, err {err!r} (expected 2, naming it)")
if failures:
    sys.exit("\n".join(failures))
print(f".ci/run runs README's test command: {test_command}")
