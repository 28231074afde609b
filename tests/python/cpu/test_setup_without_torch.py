"""setup.py run by a Python that cannot import torch stops with a message that names that Python and the command that
works, not a bare ModuleNotFoundError.

Session 45 typed README's first line on the device image as a newcomer would: its bare `pip` is the system Python's,
while `python3` (the one holding torch) is a virtual environment's, and the build died with "No module named 'torch'"
from setup.py's line 10, naming neither.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
# A None entry in sys.modules makes `import torch` raise ImportError, as in a Python without torch.
SCRIPT = (
    "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['setup.py', '--version']; runpy.run_path('setup.py')"
)


def test_setup_without_torch_names_the_python_and_the_command():
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run
    assert "Traceback" not in run.stderr, run.stderr
    assert sys.executable in run.stderr, run.stderr
    assert "python3 -m pip install --no-build-isolation -e ." in run.stderr, run.stderr
