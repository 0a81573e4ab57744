"""NF outputs compared as sets of records whatever the uids: one context numbers its instances
1, 2, 3...; worker K of N numbers them (i - 1) * N + K + 1 (docs/nf.md, "NFs on several
workers"), so the same flows carry other uids.  Each uid is renamed by what it stands for:
every record that names it (uid, flow, flow_id members; a stream file named after it, by its
content), so two runs compare equal exactly when there is a one-to-one map between their uids
under which their records are the same sets."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

UID_KEYS = ("uid", "flow", "flow_id")
_NAMED = re.compile(r"^(?P<dir>.*/)?(?P<uid>\d+)(?P<rest>[-.].*)$")


def _uid_of(rec: dict[str, Any]) -> int | None:
    for k in UID_KEYS:
        v = rec.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _blank(rec: dict[str, Any], files: dict[str, str]) -> dict[str, Any]:
    rec = {k: v for k, v in rec.items() if k != "worker"}
    for k in UID_KEYS:
        if isinstance(rec.get(k), int) and not isinstance(rec.get(k), bool):
            rec[k] = "U"
    f = rec.get("file")
    if isinstance(f, str) and _NAMED.match(f):
        m = _NAMED.match(f)
        assert m
        rec["file"] = (m["dir"] or "") + "U" + m["rest"] + "#" + files.get(f, "missing")
    return rec


def canonical_outputs(out: Path) -> dict[str, Any]:
    """Every file under out: line outputs (.jsonl, eve.json) as sorted lists of records with
    their uids renamed by what they stand for and "worker" dropped; files named after a uid
    (streams/17-c2s.bin) under the new name; other files as bytes."""
    line_files: dict[str, list[dict[str, Any]]] = {}
    blobs: dict[str, bytes] = {}
    for p in sorted(out.rglob("*")):
        if not p.is_file():
            continue
        rel = str(p.relative_to(out))
        if p.suffix == ".jsonl" or p.name == "eve.json":
            line_files[rel] = [json.loads(x) for x in p.read_text().splitlines()]
        else:
            blobs[rel] = p.read_bytes()
    digests = {k: hashlib.sha256(v).hexdigest()[:16] for k, v in blobs.items()}
    # what each uid stands for: its records (uids blanked) and the files named after it
    sig: dict[int, list[str]] = {}
    for rel, recs in line_files.items():
        for r in recs:
            u = _uid_of(r)
            if u is not None:
                sig.setdefault(u, []).append(
                    rel + " " + json.dumps(_blank(r, digests), sort_keys=True)
                )
    for rel in blobs:
        m = _NAMED.match(rel)
        if m:
            sig.setdefault(int(m["uid"]), []).append(
                (m["dir"] or "") + "U" + m["rest"] + "#" + digests[rel]
            )
    rank = {u: i + 1 for i, u in enumerate(sorted(sig, key=lambda u: sorted(sig[u])))}

    def rename(r: dict[str, Any]) -> str:
        r = {k: v for k, v in r.items() if k != "worker"}
        for k in UID_KEYS:
            v = r.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and v in rank:
                r[k] = rank[v]
        f = r.get("file")
        if isinstance(f, str):
            m = _NAMED.match(f)
            if m and int(m["uid"]) in rank:
                r["file"] = f"{m['dir'] or ''}{rank[int(m['uid'])]}{m['rest']}"
        return json.dumps(r, sort_keys=True)

    got: dict[str, Any] = {rel: sorted(rename(r) for r in recs) for rel, recs in line_files.items()}
    for rel, data in blobs.items():
        m = _NAMED.match(rel)
        if m and int(m["uid"]) in rank:
            rel = f"{m['dir'] or ''}{rank[int(m['uid'])]}{m['rest']}"
        got[rel] = data
    return got
