"""The eBPF/XDP target: the stateless path of a stack (link, network, tunnel outer headers,
L4 headers, selector keys) and the stateless part of a rule set, rendered as one XDP program
for `clang -target bpf` (docs/xdp.md). Reads the IR only, like the C target."""

from .program import XdpProgram, generate_xdp
from .xcontext import Unlowerable

__all__ = ["Unlowerable", "XdpProgram", "generate_xdp"]
