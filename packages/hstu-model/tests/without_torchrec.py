"""Runs Python code where `import torchrec` and `import fbgemm_gpu` fail, as on a machine that
has neither: `python without_torchrec.py -c CODE` or `python without_torchrec.py SCRIPT ARGS...`.
"""

from __future__ import annotations

import importlib.abc
import runpy
import sys

BLOCKED = ("torchrec", "fbgemm_gpu")


class BlockedImports(importlib.abc.MetaPathFinder):
    """Refuses BLOCKED and their submodules before any other finder can find them."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not installed here", name=name)
        return None


def main() -> None:
    sys.meta_path.insert(0, BlockedImports())
    if sys.argv[1] == "-c":
        code = sys.argv[2]
        sys.argv = ["-c", *sys.argv[3:]]
        exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = sys.argv[1:]
        runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
