"""Types Ctrl-C into a command at a named moment: the first import of one module.

Why: a Ctrl-C test that waits a fraction of the command's measured duration races the clock, and
on a machine of another speed lands elsewhere (or after the end). Put on ``PYTHONPATH`` with
``RLPIPE_TEST_INTERRUPT_ON=<module>``, this sends SIGINT to the process group, as a terminal does
on Ctrl-C, when the interpreter first looks for that module, and appends the module's name to
``RLPIPE_TEST_INTERRUPT_LOG`` so the test knows the moment came. Python then raises
``KeyboardInterrupt`` inside that import, which is the moment the test names.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _CtrlCOnImport:
    def __init__(self, module: str, log: str) -> None:
        self.module, self.log = module, log

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name == self.module:
            sys.meta_path.remove(self)
            with open(self.log, "a", encoding="utf-8") as out:
                out.write(name + "\n")
            os.killpg(os.getpgrp(), signal.SIGINT)
        return None  # the real finders import it (or not: the interrupt comes first)


_module, _log = os.environ.get("RLPIPE_TEST_INTERRUPT_ON"), os.environ.get("RLPIPE_TEST_INTERRUPT_LOG")
if _module and _log:
    sys.meta_path.insert(0, _CtrlCOnImport(_module, _log))
