"""Shared by every test folder (tests/README.md lists them).

tests/ goes first on sys.path so that the shared helpers import as `support.*` from any folder
(pytest's default import mode also does this for a rootdir conftest; said here, not relied on).
"""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
