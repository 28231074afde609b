"""Loads the compiled extension on first use, with an error that says how to build it."""

import importlib

_module = None


def ext():
    global _module
    if _module is None:
        try:
            import torch  # noqa: F401  (the extension links against torch's libraries)

            _module = importlib.import_module("moe_a2a._C")
        except ImportError as e:
            raise ImportError(
                "moe_a2a's compiled extension is not built. Run `python3 -m pip install --no-build-isolation -e .` "
                f"in the repository on a machine with torch and a GPU toolkit ({e})"
            ) from e
    return _module
