"""The benchmarks' CPU tests import the benchmark modules by plain name, as the scripts do, and this
checkout's pure-python package ahead of any installed moe_a2a (as tests/python/cpu/conftest.py
does), so that they check this tree's sol / reference."""

import os
import sys

_BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _BENCH)
sys.path.insert(0, os.path.join(os.path.dirname(_BENCH), "python"))
