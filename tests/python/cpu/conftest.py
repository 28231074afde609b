"""CPU-only tests of the pure-Python modules: import them from the source tree, so they
run without building or installing the extension."""

import sys
from pathlib import Path

_PYTHON_SRC = Path(__file__).resolve().parents[3] / "python"
if str(_PYTHON_SRC) not in sys.path:
    sys.path.insert(0, str(_PYTHON_SRC))
