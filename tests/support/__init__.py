"""Helpers shared by the test folders (captures built here, the tshark oracle, runners).

Test modules import from here, never from one another (install/test_test_layout.py checks it);
tests/conftest.py puts tests/ on sys.path so that `support` is importable from every folder.
"""

from pathlib import Path

# the repository root, whatever folder a test lives in
REPO_ROOT = Path(__file__).resolve().parents[2]
