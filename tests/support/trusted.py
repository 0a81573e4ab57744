"""A directory the control socket trusts (docs/operating.md, the control socket's security
model): `ctl attach` and `ctl rules reload` load shared objects only from a `--nf-path` /
`--rules-path` directory whose every parent belongs to root or the user and is writable by
nobody else, which no directory under /tmp (mode 1777) is. The tests' .so files go here."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from support.captures import REPO


@contextmanager
def trusted_dir(tag: str) -> Iterator[Path]:
    """A fresh directory under REPO/build/trusted (mode 0755), removed afterwards."""
    root = REPO / "build" / "trusted"
    root.mkdir(parents=True, exist_ok=True)
    for d in (REPO / "build", root):
        os.chmod(d, 0o755)  # a umask of 002 would leave them group-writable: refused
    d = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=root))
    os.chmod(d, 0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
