"""How a spec names another spec file: relative paths, the spec search path, `stock:` names.

A reference (a layer's `protocol:`, a parameter's `protocol:`) is resolved in this order:

* `stock:NAME` names a file of the stock library shipped with rubikgen (`specs/` of the
  checkout or of the installed package): `stock:protocols/tcp.yaml` or `stock:stacks/gtp.yaml`
  as a path under `specs/`, and a bare `stock:tcp.yaml` in the directory for the kind of file
  expected (`protocols/` for a layer's protocol).
* An absolute path is used as it is.
* A relative path is tried relative to the referring file first (as always), then relative to
  each directory of the search path: the `--spec-path DIR` options given on the command line,
  then the directories of the environment variable RUBIKGEN_SPEC_PATH (separated by ':').

A reference that resolves nowhere reports where it looked (`Resolved.looked`).

A reference must not leave the repository root (`roots`): a spec in an untrusted pull request
could otherwise make `rubikgen validate` read, and print a line of, any file of the machine
(`protocol: ../../../../root/.bashrc`). The file found for a relative or absolute reference
(symbolic links followed) must be inside the referring file's repository root, a directory
of the spec search path or the stock library; otherwise the reference is refused
(`Resolved.outside`) and the file is never opened. The repository root of a file is the
nearest enclosing directory holding `.git`; a file in no git repository has as root the top
of the validated tree it is in (a directory named to `rubikgen validate`, `trees`); a file in
neither (a stack built from a scratch folder) is not confined.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from rubikgen.toolchain import resources

STOCK = "stock:"
ENV = "RUBIKGEN_SPEC_PATH"
PROTOCOLS = ("protocols",)
STACK_ARGS = ("stacks", "protocols")  # a command-line stack argument: stacks first

_configured: list[str] = []  # --spec-path directories of this process (set by the CLI)
_trees: list[str] = []  # directories named to `rubikgen validate` (roots outside git)


def configure(dirs: Sequence[str]) -> None:
    """Sets the --spec-path directories (made absolute: relative to the working directory)."""
    _configured[:] = [os.path.abspath(d) for d in dirs]


def configure_trees(dirs: Sequence[str]) -> None:
    """Sets the tops of the validated trees (the roots of files in no git repository)."""
    _trees[:] = [os.path.realpath(d) for d in dirs]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def repo_root(directory: str) -> str | None:
    """The nearest directory from `directory` up that holds `.git` (a folder or, in a
    worktree or submodule, a file)."""
    d = os.path.realpath(directory)
    while True:
        if os.path.exists(os.path.join(d, ".git")):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def roots(base_dir: str) -> list[str] | None:
    """Where references from a file in base_dir may lead: its repository root (or validated
    tree), the spec search path and the stock library; None when the file is in neither a
    repository nor a validated tree (not confined)."""
    real = os.path.realpath(base_dir)
    top = repo_root(real)
    own = [top] if top is not None else [t for t in _trees if _inside(real, t)]
    if not own:
        return None
    extra = [os.path.realpath(d) for d in search_path()]
    return [*own, *extra, os.path.realpath(resources.stock_specs_dir())]


def search_path() -> list[str]:
    """--spec-path directories, then those of $RUBIKGEN_SPEC_PATH (empty entries ignored)."""
    env = [os.path.abspath(d) for d in os.environ.get(ENV, "").split(os.pathsep) if d]
    return [*_configured, *env]


@dataclass(frozen=True)
class Resolved:
    path: str | None  # the absolute path of the file found, None when nothing matched
    looked: tuple[str, ...]  # absolute candidates, in the order tried
    stock: bool = False
    outside: str | None = None  # a file found, but outside the roots: never to be opened

    @property
    def first(self) -> str:
        """The candidate diagnostics talk about (the relative or stock location)."""
        return self.looked[0] if self.looked else ""


def _stock_candidates(name: str, kinds: Sequence[str], top: bool) -> list[str]:
    """specs/NAME (when top) then specs/KIND/NAME for each kind."""
    root = os.path.abspath(resources.stock_specs_dir())
    cands = [os.path.join(root, name)] if top else []
    cands += [os.path.join(root, k, name) for k in kinds]
    # never outside the stock library ('stock:../x')
    cands = [os.path.normpath(c) for c in cands]
    return [c for c in cands if c == root or c.startswith(root + os.sep)]


def resolve(ref: str, base_dir: str, kinds: Sequence[str] = PROTOCOLS) -> Resolved:
    """The file `ref` names, from a file in `base_dir`."""
    if ref.startswith(STOCK):
        name = ref[len(STOCK) :]
        cands = _stock_candidates(name, kinds, top="/" in name)
        found = next((c for c in cands if os.path.isfile(c)), None)
        return Resolved(found, tuple(cands), stock=True)
    if os.path.isabs(ref):
        cands = [os.path.normpath(ref)]
    else:
        cands = [os.path.abspath(os.path.join(base_dir, ref))]
        cands += [os.path.abspath(os.path.join(d, ref)) for d in search_path()]
        cands = list(dict.fromkeys(cands))
    found = next((c for c in cands if os.path.isfile(c)), None)
    allowed = roots(base_dir)
    if found is not None and allowed is not None:
        real = os.path.realpath(found)
        if not any(_inside(real, r) for r in allowed):
            return Resolved(None, tuple(cands), outside=found)
    return Resolved(found, tuple(cands))


def problem(res: Resolved, kind: str) -> str:
    """What is wrong with a reference that resolved to no file (`kind`: "protocol file"...)."""
    if res.outside is not None:
        return "leaves the repository root"
    f = res.first
    return f"is a directory, not a {kind}" if os.path.isdir(f) else "not found"


def locate(ref: str, base_dir: str, kinds: Sequence[str] = PROTOCOLS) -> str:
    """The absolute path `ref` resolves to, or where it was first looked for (to report)."""
    res = resolve(ref, base_dir, kinds)
    return res.path or res.first


def resolve_arg(arg: str, kinds: Sequence[str] = STACK_ARGS) -> str:
    """A command-line file argument: `stock:` names become paths (a directory for `stock:` or
    `stock:protocols`); anything else is returned unchanged."""
    if not arg.startswith(STOCK):
        return arg
    name = arg[len(STOCK) :]
    cands = _stock_candidates(name, kinds, top=True)
    found = next((c for c in cands if os.path.isfile(c) or os.path.isdir(c)), None)
    return found or arg  # reported as it was given


def stock_names(kind: str = "protocols") -> list[str]:
    d = resources.stock_specs_dir() / kind
    return sorted(p.name for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def hint(ref: str, res: Resolved, relative_to: str, kind: str = "protocols") -> str:
    """The hint of a reference that resolved nowhere: where it looked and what exists (`kind`:
    the stock library's folder the reference names a file of)."""
    looked = ", ".join(_shown(c) for c in res.looked) or "nowhere"
    if res.outside is not None:
        return (
            "references may lead only into the repository root (the nearest directory with "
            ".git, or the validated folder), the spec search path (--spec-path DIR) and the "
            "stock library (stock:NAME); the file is not read"
        )
    if res.stock:
        name = os.path.basename(ref[len(STOCK) :])
        names = stock_names(kind)
        near = difflib.get_close_matches(name, names, n=1)
        dym = f"did you mean 'stock:{near[0]}'? " if near else ""
        known = "" if near else f"; stock {kind}: {', '.join(names)}"
        return f"{dym}looked in: {looked}{known}"
    if os.path.isabs(ref):
        return f"looked in: {looked}"
    more = "" if search_path() else f" (add directories with --spec-path DIR or ${ENV})"
    return (
        f"relative paths are tried relative to {relative_to}, then in the spec search path"
        f"{more}; 'stock:NAME' names the stock library; looked in: {looked}"
    )


def display(path: str, relative_to: str) -> str:
    """How generated code names a spec file: `stock:protocols/tcp.yaml` for the stock library
    (its installed location means nothing to a reader), else relative to relative_to."""
    root = os.path.abspath(resources.stock_specs_dir())
    ap = os.path.abspath(path)
    if ap.startswith(root + os.sep) and not os.path.abspath(relative_to).startswith(root):
        return STOCK + os.path.relpath(ap, root)
    return os.path.relpath(ap, relative_to)


def _shown(p: str) -> str:
    rel = os.path.relpath(p)
    return rel if not rel.startswith("..") else p
