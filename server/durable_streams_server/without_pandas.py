"""pyarrow in the server process without pandas, settled once at start-up (``cli.main``).

The server never converts to or from pandas, and its install (the ``server`` extra) does not
list it. Installed beside pandas all the same (the Spark connector's extra, a notebook's
environment, the tests'), pyarrow imports pandas the first time anything converts Python
values (``pa.array``, ``pa.table``) only to ask whether they are pandas objects: pandas and
what it imports in turn, about 0.6 s of CPU holding the GIL (three quarters of a server's
import time here; the event loop stalls for it if the first conversion comes while serving)
and 30-40 MiB of resident memory, for an answer that is always no.

So ``settle_pyarrow_without_pandas`` makes pyarrow's probe fail once, before anything
converts: while a finder refusing ``pandas`` is first on ``sys.meta_path``, one conversion
runs; pyarrow records pandas as absent (the same state as an install without pandas) and
does not probe again; the finder is then removed, so nothing else in the process is refused
anything. pyarrow's calls that need pandas rather than probe for it (``to_pandas``) still
import it when made: pyarrow imports again for those.

Nothing is done if pandas is already imported or pyarrow has already probed: then there is
nothing left to save.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

import pyarrow as pa


class _RefusePandas(importlib.abc.MetaPathFinder):
    """Refuses ``pandas`` and its submodules as if it were not installed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def settle_pyarrow_without_pandas() -> bool:
    """Make pyarrow's probe for pandas answer absent (see the module docstring); whether
    pandas is left out of this process (False: it was imported before)."""
    if "pandas" in sys.modules:
        return False
    finder = _RefusePandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])  # the first conversion: pyarrow probes for pandas here, once
    finally:
        sys.meta_path.remove(finder)
    return "pandas" not in sys.modules
