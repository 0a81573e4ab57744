"""Payload transforms the C runtime provides to specs (`{transform: NAME, args: {...}}`).

A transform replaces the sdu by what it makes of its arguments (decrypted bytes, say), or by
an empty sdu when it fails; failures are counted per layer under the reasons listed here.
Each transform keeps per-instance state (a key cache) in the instance of the layer running it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformSpec:
    name: str
    params: tuple[tuple[str, str, str], ...]  # (name, "bytes" | "num", meaning)
    doc: str
    state_type: str  # C type of the per-instance state (zero-initialised)
    ctx_type: str  # C type of the per-worker context
    ctx_new: str
    ctx_free: str
    call: str  # C function
    out_max: int  # output buffer size
    # status code -> error reason: a standard rg_stats reason or a name for a user reason
    failures: tuple[tuple[str, str], ...]
    header: str
    pkg_config: str  # the C library it links


QUIC_INITIAL = TransformSpec(
    name="quic_initial",
    params=(
        ("packet", "bytes", "the packet from its first byte to the end of its Length field"),
        ("pn_offset", "num", "offset of the packet number in `packet`"),
        ("cid", "bytes", "the client's first Destination Connection ID (the keys derive from it)"),
        ("version", "num", "the packet's QUIC version (1 or 0x6b3343cf)"),
        ("server", "num", "non-zero for packets the server sent"),
    ),
    doc="remove QUIC Initial header and packet protection (RFC 9001 5, RFC 9369): the sdu "
    "becomes the packet's plaintext frames",
    state_type="rg_quic_initial_state",
    ctx_type="rg_quic_crypto",
    ctx_new="rg_quic_crypto_new()",
    ctx_free="rg_quic_crypto_free",
    call="rg_quic_initial_open",
    out_max=65536,
    failures=(
        ("RG_QUIC_TRUNCATED", "RG_REASON_TRUNCATED"),
        ("RG_QUIC_VERSION", "RG_REASON_UNSUPPORTED"),
        ("RG_QUIC_NOT_INITIAL", "RG_REASON_MALFORMED"),
        ("RG_QUIC_AUTH", "decrypt_failed"),
        ("RG_QUIC_CRYPTO", "RG_REASON_OTHER"),
    ),
    header="rg/rg_quic.h",
    pkg_config="libcrypto",
)

TRANSFORMS: dict[str, TransformSpec] = {t.name: t for t in (QUIC_INITIAL,)}


def user_reasons() -> list[str]:
    """Names of the user error reasons of all transforms, in a fixed order."""
    out: list[str] = []
    for t in TRANSFORMS.values():
        for _code, r in t.failures:
            if not r.startswith("RG_REASON_") and r not in out:
                out.append(r)
    return out
