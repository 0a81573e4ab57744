"""The link kinds are one table: the C runtime's RG_LINK_KIND_TABLE (rg_api.h: the enum that
indexes rg_stack_desc.entry, and the names the driver's summary prints) is the order in which
the back-end fills that array (LINK_KINDS) and the names a stack's `entry:` accepts."""

import re
from typing import get_args

from support import REPO_ROOT

from rubikgen.ir.lower import LINK_KINDS
from rubikgen.models.stack import LinkType

REPO = REPO_ROOT


def test_link_kinds_are_one_table() -> None:
    text = (REPO / "runtime-c" / "include" / "rg" / "rg_api.h").read_text()
    got = re.findall(r'X\((RG_LINK_\w+), (\d+), "(\w+)"\)', text)
    assert [int(v) for _c, v, _n in got] == list(range(len(got)))
    assert tuple(name for _c, _v, name in got) == LINK_KINDS
    assert set(get_args(LinkType)) == set(LINK_KINDS)
