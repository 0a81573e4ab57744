"""Stack composition: extends, remove, subtrees and grafts (rubikgen/front/compose.py).

Checks that the composed stack is what the keys say, that every diagnostic points into the file
that wrote the element it is about (the extending stack or its base), and that the generated C
names both files in its spec comments.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO_ROOT

from rubikgen.front.workspace import Workspace
from rubikgen.models import Stack

ROOT = REPO_ROOT
STACKS = ROOT / "specs" / "stacks"
TUNNELS = STACKS / "tcp_ip_tunnels.yaml"


def check(path: Path) -> tuple[Workspace, list[tuple[str, str, int, int, str]]]:
    ws = Workspace()
    ws.check(str(path))
    diags = [
        (d.severity, Path(d.file).name, d.line, d.col, d.message) for d in ws.all_diagnostics()
    ]
    return ws, diags


def line_of(path: Path, text: str) -> int:
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(f"{text!r} not in {path}")


def write(tmp: Path, name: str, text: str) -> Path:
    (tmp / name).write_text(text)
    return tmp / name


def ext(tmp: Path, body: str) -> Path:
    """A stack extending the stock tcp_ip (by a path relative to it)."""
    rel = Path("..") / Path(*(".." for _ in tmp.parts[1:])) / STACKS.relative_to("/")
    return write(tmp, "ext.yaml", f"stack: ext\nextends: {rel / 'tcp_ip.yaml'}\n{body}")


def test_tunnels_stack_composes_tcp_ip() -> None:
    ws, diags = check(TUNNELS)
    assert [d for d in diags if d[0] != "note"] == []
    doc = ws.docs[str(TUNNELS)]
    st = doc.model
    assert isinstance(st, Stack) and st.extends is None and st.graft == []
    base = ws.docs[str(STACKS / "tcp_ip.yaml")].model
    assert isinstance(base, Stack)
    # every base layer, edge, handler and entry is there, then the tunnel layers and the copy
    assert list(st.layers)[: len(base.layers)] == list(base.layers)
    assert st.entry == base.entry
    assert st.edges[: len(base.edges)] == base.edges
    group = base.subtrees["ethernet"].layers
    for n in group:
        assert st.layers[f"inner_{n}"].protocol == base.layers[n].protocol
    assert st.layers["inner_tcp"].args == {"ip": "inner_ip"}
    assert st.handlers["inner_tcp6_data"].layer == "inner_tcp6"
    inner = [(e.from_, e.to) for e in st.edges if e.from_.startswith("inner_eth")]
    base_eth = [(e.from_, e.to) for e in base.edges if e.from_ == "eth"]
    assert inner == [(f"inner_{a}", f"inner_{b}") for a, b in base_eth]
    # positions: a copied layer is where the base wrote the original, an added one here
    smap = doc.smap
    assert smap.key_pos(("layers", "inner_ip")).line == line_of(STACKS / "tcp_ip.yaml", "  ip: ")
    sm, _ = smap.locate(("layers", "vxlan"))
    assert Path(sm.file).name == "tcp_ip_tunnels.yaml"
    assert doc.sources == [str(TUNNELS), str(STACKS / "tcp_ip.yaml")]


def test_remove_and_override(tmp_path: Path) -> None:
    f = ext(
        tmp_path,
        "remove:\n  layers: [arp]\n  edges: [{from: sll, to: vlan}]\n  handlers: [udp6_data]\n"
        "  entry: [sll2]\n"
        "layers:\n  udp: {protocol: "
        + str(STACKS.parent / "protocols" / "udp.yaml")
        + ", args: {ip: ip}, doc: mine}\n"
        "edges:\n  - {from: loopback, to: ip, when: 'header.family == 99'}\n",
    )
    ws, diags = check(f)
    st = ws.docs[str(f)].model
    assert isinstance(st, Stack)
    assert "arp" not in st.layers and all("arp" not in (e.from_, e.to) for e in st.edges)
    assert "arp" not in st.subtrees["ethernet"].layers
    assert ("sll", "vlan") not in [(e.from_, e.to) for e in st.edges]
    assert "udp6_data" not in st.handlers and "udp_data" in st.handlers
    assert isinstance(st.entry, dict) and "sll2" not in st.entry and "ethernet" in st.entry
    assert st.layers["udp"].doc == "mine"
    assert st.edges[-1].from_ == "loopback" and st.edges[-1].when == "header.family == 99"
    # sll2 has no entry any more: unreachable, reported where tcp_ip.yaml defines it
    assert [d[:3] for d in diags if d[0] == "warning"] == [
        ("warning", "tcp_ip.yaml", line_of(STACKS / "tcp_ip.yaml", "  sll2: "))
    ]
    note = [d for d in ws.all_diagnostics() if d.severity == "warning"][0].notes
    assert note and "ext.yaml" in note[0]


def test_errors_point_at_the_file_that_caused_them(tmp_path: Path) -> None:
    f = ext(
        tmp_path,
        "remove:\n  layers: [ip, nosuch]\n  handlers: [tcp_dat]\n"
        "graft:\n  - {subtree: etherent, prefix: in_}\n",
    )
    _, diags = check(f)
    errors = sorted(d[1:4] + (d[4].split("'")[1],) for d in diags if d[0] == "error")
    # in ext.yaml: the names it removes or grafts that do not exist
    assert ("ext.yaml", 4, 16, "nosuch") in errors
    assert ("ext.yaml", 5, 14, "tcp_dat") in errors
    assert ("ext.yaml", 7, 15, "etherent") in errors
    f2 = ext(tmp_path, "remove:\n  layers: [ip]\n")
    _, diags = check(f2)
    errors = [d for d in diags if d[0] == "error"]
    # tcp_ip.yaml's tcp binds 'ip', which ext.yaml removed: reported at the binding
    tcp_line = line_of(STACKS / "tcp_ip.yaml", "  tcp:  ")
    assert ("tcp_ip.yaml", tcp_line) in [(d[1], d[2]) for d in errors], diags
    assert all("ip" in d[4] for d in errors)


def test_graft_clash_cycle_and_missing_keys(tmp_path: Path) -> None:
    f = ext(tmp_path, "graft:\n  - {subtree: ethernet, prefix: ''}\n")
    _, diags = check(f)
    assert [(d[0], d[1], d[2]) for d in diags] == [("error", "ext.yaml", 4)]
    f = ext(
        tmp_path,
        "subtrees:\n  x: {layers: [tcp]}\ngraft:\n  - {subtree: x, prefix: u}\n"
        "  - {subtree: x, prefix: u}\n",
    )
    _, diags = check(f)
    assert [(d[0], d[2], d[4]) for d in diags] == [
        ("error", 7, "the copy of subtree 'x' would redefine utcp, utcp_data")
    ]
    a = write(tmp_path, "a.yaml", "stack: a\nextends: b.yaml\n")
    write(tmp_path, "b.yaml", "stack: b\nextends: a.yaml\n")
    _, diags = check(a)
    assert ("error", "b.yaml", 2, 10) in [d[:4] for d in diags]
    assert any("cycle" in d[4] for d in diags)
    c = write(tmp_path, "c.yaml", "stack: c\nlayers: {}\n")
    _, diags = check(c)
    assert {d[4] for d in diags} == {
        "missing required key 'entry'",
        "a stack needs at least one layer",
    }


def test_generated_c_points_at_both_files() -> None:
    from rubikgen.pipeline import generate

    gen = generate(str(TUNNELS))
    text = gen.files["tcp_ip_tunnels_gen.c"]
    base_line = line_of(STACKS / "tcp_ip.yaml", "from: eth, to: ip,")
    assert f"tcp_ip.yaml:{base_line} edge eth -> ip" in text
    vx = line_of(TUNNELS, "{from: vxlan, to: inner_eth}")
    assert f"tcp_ip_tunnels.yaml:{vx} edge vxlan -> inner_eth" in text
    h = line_of(STACKS / "tcp_ip.yaml", "  tcp_data:")
    assert f"tcp_ip.yaml:{h} handler inner_tcp_data" in text


def test_graph_shows_the_composed_tree() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rubikgen", "graph", str(TUNNELS)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for edge in ('"vxlan" -> "inner_eth"', '"inner_ip" -> "inner_tcp"', '"udp" -> "vxlan"'):
        assert edge in out
    # the grafted copy is one cluster holding exactly the copied layers
    cluster = out.split('subgraph "cluster_graft0" {', 1)[1].split("  }", 1)[0]
    assert "graft: subtree ethernet, prefix inner_" in cluster
    names = set(re.findall(r'^\s+"(\w+)" \[label=', cluster, re.M))
    assert names == {
        f"inner_{n}"
        for n in ("eth", "vlan", "arp", "ip", "ipv6", "tcp", "udp", "tcp6", "udp6", "icmp",
                  "icmp6", "icmp_ip", "icmp6_ip", "icmp_tcp", "icmp_udp", "icmp6_tcp", "icmp6_udp")
    }  # fmt: skip


@pytest.mark.parametrize("key", ["extends", "graft", "remove", "subtrees"])
def test_schema_covers_the_new_keys(key: str) -> None:
    import json

    schema = json.loads((ROOT / "schema" / "stack.schema.json").read_text())
    assert key in schema["properties"]


def test_missing_base_and_build_inputs(tmp_path: Path) -> None:
    from rubikgen.toolchain.build import spec_files

    f = write(tmp_path, "m.yaml", "stack: m\nextends: nosuch.yaml\n")
    _, diags = check(f)
    assert [(d[0], d[1], d[2], d[3]) for d in diags] == [("error", "m.yaml", 2, 10)]
    assert "not found" in diags[0][4]
    # a change to the base stack makes an extending stack's build stale
    files = {p.resolve() for p in spec_files(TUNNELS)}
    assert (STACKS / "tcp_ip.yaml").resolve() in files
    assert (STACKS.parent / "protocols" / "vxlan.yaml").resolve() in files


def test_subtree_layers_are_checked_without_graft(tmp_path: Path) -> None:
    protos = STACKS.parent / "protocols"
    f = write(
        tmp_path,
        "p.yaml",
        f"stack: p\nentry: eth\nlayers:\n  eth: {{protocol: {protos / 'eth.yaml'}}}\n"
        "subtrees:\n  g: {layers: [eth, ehh]}\n",
    )
    _, diags = check(f)
    assert [(d[0], d[2], d[3], d[4]) for d in diags] == [
        ("error", 6, 21, "subtree 'g' names unknown layer 'ehh'")
    ]
