"""Python bindings of generated stacks: a stack compiled into an extension module (Cython),
driven frame by frame from Python, its handler calls, closes and gaps yielded as Events.

    from rubikgen.bindings import Stack
    stack = Stack.build("specs/stacks/tcp_ip.yaml")
    for ev in stack.feed_pcap("trace.pcap"):
        print(ev.layer, ev.name, ev.key, ev.args)

Python runs only here: `rubikgen build`'s binaries do not link Python.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import Any

from rubikgen.bindings.events import Event, FlowKey

__all__ = ["Event", "FlowKey", "Stack", "Verdict"]


class Verdict(IntEnum):
    """What happens to the packet being processed (rg_api.h enum rg_verdict); a callback
    given to Stack.on_event may return one for a handler call. The strongest wins."""

    PASS = 0
    BYPASS_FLOW = 1  # this packet passes; the instance's later ones pass uninspected
    DROP = 2
    DROP_FLOW = 3  # this packet and the instance's later ones are dropped


class Stack:
    """One stack context (flow table, reassembly, timers) of a compiled stack."""

    def __init__(
        self, module: Any, *, seed: int = 1, no_timeouts: bool = False, community_id_seed: int = 0
    ) -> None:
        """community_id_seed: the seed of the events' FlowKey.community_id (0..65535, the
        binary's --community-id-seed)."""
        if not isinstance(community_id_seed, int) or not 0 <= community_id_seed <= 0xFFFF:
            raise ValueError(f"community_id_seed {community_id_seed!r} is not 0..65535")
        self._module = module
        self._engine = module.Engine(
            seed=seed, no_timeouts=no_timeouts, community_id_seed=community_id_seed
        )

    @classmethod
    def build(
        cls,
        spec: str | os.PathLike[str],
        build_dir: str | os.PathLike[str] | None = None,
        *,
        handlers: str | os.PathLike[str] | None = None,
        seed: int = 1,
        no_timeouts: bool = False,
        community_id_seed: int = 0,
    ) -> Stack:
        """Compiles the stack (when stale; build_dir default build/NAME, as `rubikgen
        build`), loads its extension and returns a fresh context. `handlers`: a C file of
        handlers, as `rubikgen build --handlers`."""
        from rubikgen.bindings.extension import build_extension, load
        from rubikgen.front import specpath

        path = specpath.resolve_arg(str(spec))
        so, mod = build_extension(
            path, build_dir, handlers=Path(handlers) if handlers is not None else None
        )
        return cls(
            load(so, mod), seed=seed, no_timeouts=no_timeouts, community_id_seed=community_id_seed
        )

    @property
    def name(self) -> str:
        return str(self._engine.name)

    @property
    def layers(self) -> list[str]:
        return list(self._engine.layers)

    @property
    def handlers(self) -> dict[str, tuple[str, ...]]:
        """Handler name -> its argument names."""
        return dict(self._engine.handlers)

    def feed(self, frame: bytes, ts_ns: int = 0, link: str = "ether") -> list[Event]:
        """Process one frame of the given link type ("ether", "raw", "null", "loop", "sll",
        "sll2", "ppp"); returns its events (none when callbacks are attached: they got them)."""
        return list(self._engine.feed(frame, ts_ns, link))

    def feed_pcap(self, path: str | os.PathLike[str], flush: bool = True) -> Iterator[Event]:
        """The events of every frame of a capture (pcap or pcapng), frame by frame; then,
        with flush, the closes of the instances still live at its end."""
        return iter(self._engine.feed_pcap(os.fspath(path), flush))

    def flush(self) -> list[Event]:
        """End every live instance ("flushed"), as at the end of a capture."""
        return list(self._engine.flush())

    def on_event(self, fn: Callable[[Event], int | None]) -> None:
        """Call fn with every event as it happens (inside the stack's processing: the byte
        arguments are memoryviews of the stack's buffers, valid during the call only; copy
        with bytes(v) to keep them). An exception fn raises is raised by feed/feed_pcap.
        For a handler call made in a packet, fn may return a Verdict: it is given as an
        observer's verdict (rg_verdict_give), so DROP_FLOW and BYPASS_FLOW mark the call's
        instance; `verdict` then tells the frame's."""
        self._engine.add_callback(fn)

    def remove_callback(self, fn: Callable[[Event], int | None]) -> None:
        self._engine.remove_callback(fn)

    @property
    def verdict(self) -> Verdict:
        """The verdict of the last frame fed (PASS for a frame no entry layer took)."""
        return Verdict(self._engine.verdict)

    @property
    def frames(self) -> int:
        return int(self._engine.frames)

    @property
    def skipped(self) -> int:
        """Frames no entry layer took (link type without an entry, link header cut)."""
        return int(self._engine.skipped)
