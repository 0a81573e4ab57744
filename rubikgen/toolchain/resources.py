"""Where rubikgen's data lives: templates, the C runtime, the stock NFs, specs and schemas.

Two layouts. In a source checkout (the editable install developers use) they are the top-level
directories of the repository, next to the package. An installed package (wheel, sdist, pipx,
pre-commit's environment) carries copies of the same directories under `rubikgen/_data/`,
put there by the build hook in setup.py. The installed copy wins when it is present: a
checkout never has one (the hook only writes into setuptools' build directory).

The C runtime of an installed package is compiled into a per-user cache directory
(`runtime_build_dir`), never into the package, which may be read-only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from rubikgen import __version__

PACKAGE = Path(__file__).resolve().parent.parent
PACKAGED = PACKAGE / "_data"
CHECKOUT = PACKAGE.parent

#: The top-level directories shipped as package data (setup.py copies them).
DATA_DIRS = ("specs", "schema", "templates", "runtime-c", "handlers/nf")


def installed() -> bool:
    """True when running from an installed package (its data under rubikgen/_data)."""
    return (PACKAGED / "runtime-c" / "Makefile").is_file()


def data_root() -> Path:
    return PACKAGED if installed() else CHECKOUT


def templates_dir() -> Path:
    return data_root() / "templates"


def runtime_dir() -> Path:
    return data_root() / "runtime-c"


def nf_dir() -> Path:
    return data_root() / "handlers" / "nf"


def stock_specs_dir() -> Path:
    """The stock library: specs/protocols and specs/stacks (what `stock:` names resolve in)."""
    return data_root() / "specs"


def schema_dir() -> Path:
    return data_root() / "schema"


def cache_home() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"


def _runtime_sources() -> list[Path]:
    rt, nf = runtime_dir(), nf_dir()
    files = [rt / "Makefile", *rt.glob("include/**/*.h"), *rt.glob("src/*.c")]
    files += [*rt.glob("main/*.c"), *rt.glob("main/*.h")]
    files += [*nf.glob("*.c"), *nf.glob("*.h")]
    return sorted(p for p in files if p.is_file())


def runtime_key(cc: str | None = None) -> str:
    """A hash of what the runtime libraries depend on: the compiler make uses ($CC, resolved
    on PATH), the extra CFLAGS make sees and every runtime and NF source."""
    cc = cc if cc is not None else os.environ.get("CC") or "cc"
    h = hashlib.sha256()
    first = cc.split()[0] if cc.split() else cc
    for part in (cc, shutil.which(first) or "", os.environ.get("CFLAGS", "")):
        h.update(part.encode() + b"\0")
    base = data_root()
    for p in _runtime_sources():
        h.update(str(p.relative_to(base)).encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def runtime_build_dir() -> Path:
    """Where the runtime libraries are built: runtime-c/build in a checkout; for an installed
    package `$XDG_CACHE_HOME/rubikgen/<version>-<key>` (default ~/.cache), so that a new
    version, compiler or flag set gets its own build and the package is never written to."""
    if not installed():
        return runtime_dir() / "build"
    return cache_home() / "rubikgen" / f"{__version__}-{runtime_key()[:16]}"
