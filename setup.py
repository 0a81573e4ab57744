"""Build hook: ship the repository's data directories inside the package.

Developers keep the layout of the repository (specs/, schema/, templates/, runtime-c/ and
handlers/nf/ at the top level). When setuptools builds a wheel (from the checkout or from the
sdist, whose MANIFEST.in carries the same directories), `build_py` copies them into
`rubikgen/_data/` of the build directory, keeping their relative layout, so an installed
rubikgen finds them next to its modules (rubikgen/toolchain/resources.py). Editable installs copy
nothing: they read the checkout itself.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# directory -> the files of it that an installed rubikgen needs (no build output, no tests)
DATA = {
    "specs": ("**/*.yaml", "**/*.yml", "**/*.toml"),
    "schema": ("*.json",),
    "templates": ("*.j2",),
    "runtime-c": ("Makefile", "README.md", "include/**/*.h", "src/*.c", "main/*.c", "main/*.h"),
    "handlers/nf": ("*.c", "*.h"),
}


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "rubikgen" / "_data"
        if dest.exists():
            shutil.rmtree(dest)  # nothing stale from an earlier build
        for top, patterns in DATA.items():
            src = ROOT / top
            files = sorted({p for pat in patterns for p in src.glob(pat) if p.is_file()})
            if not files:
                raise SystemExit(f"setup.py: no package data found in {src}")
            for f in files:
                out = dest / top / f.relative_to(src)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, out)


setup(cmdclass={"build_py": BuildPyWithData})
