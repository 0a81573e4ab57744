# cython: language_level=3, boundscheck=False, wraparound=False
"""One generated stack as a Python extension (compiled per stack by rubikgen.bindings).

The stack's context is driven from here: frames in (one at a time, or every frame of a
capture read by the C runtime), observer callbacks out. Each callback turns its C record into
a Python Event; the events of a frame are returned after the frame (their byte arguments
copied into bytes), or handed at once to the attached Python callbacks (byte arguments as
memoryviews over the stack's buffers, released when the callback returns: no copy).
"""

from libc.stdint cimport int16_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memset
from cpython.buffer cimport PyBUF_READ
from cpython.memoryview cimport PyMemoryView_FromMemory

from rubikgen.bindings.events import Event, FlowKey


cdef extern from "rg/rg_api.h":
    ctypedef struct rg_bytes:
        const uint8_t *ptr
        size_t len
    ctypedef struct rg_val:
        uint8_t kind
        uint64_t num
        rg_bytes bytes
    ctypedef struct rg_keypart:
        const char *name
        uint8_t kind
        uint8_t common
        uint16_t off
        uint16_t size
    ctypedef struct rg_recfield:
        const char *name
        uint32_t nnames
        const char *const *names
        const char *letters
    ctypedef struct rg_layer_desc:
        const char *name
        const char *protocol
        uint16_t nrec
        const rg_recfield *rec
        uint8_t has_instance
        uint8_t bidir
        uint16_t key_len
        uint16_t nparts
        const rg_keypart *parts
        uint16_t nstates
        const char *const *states
    ctypedef struct rg_handler_desc:
        const char *name
        uint16_t layer
        const char *events
        uint16_t nargs
        const char *const *arg_names
        const uint8_t *arg_kinds
    ctypedef struct rg_flow_info:
        uint64_t uid
        uint16_t layer
        uint16_t state
        uint32_t late
        uint64_t rec[4]
        const uint8_t *key_a
        const uint8_t *key_p
    ctypedef struct rg_verdict_slot:
        uint8_t v
    ctypedef struct rg_call:
        uint16_t handler
        uint16_t layer
        uint8_t dir
        const rg_flow_info *flow
        uint64_t ts_ns
        uint64_t pkt_no
        const rg_val *args
        uint8_t end
        rg_verdict_slot *verdict
    void rg_verdict_give(rg_verdict_slot *slot, const rg_flow_info *flow, int v)
    ctypedef struct rg_obs:
        void *self
        void (*on_call)(void *self, const rg_call *c) noexcept
        void (*on_open)(void *self, const rg_flow_info *f, uint64_t ts_ns) noexcept
        void (*on_packet)(void *self, const rg_flow_info *f, int dir, uint32_t len, uint64_t ts_ns) noexcept
        void (*on_close)(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns) noexcept
        void (*on_gap)(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len, uint32_t at, uint64_t ts_ns) noexcept
    ctypedef struct rg_ctx_cfg:
        uint32_t inst_cap
        uint64_t seed
        const rg_obs *obs
        int no_timeouts
        const uint32_t *layer_cap
    ctypedef struct rg_stack_desc:
        const char *name
        const char *spec_hash
        uint16_t nlayers
        const rg_layer_desc *layers
        uint16_t nhandlers
        const rg_handler_desc *handlers
        int16_t entry[6]
        void *(*ctx_new)(const rg_ctx_cfg *cfg)
        void (*ctx_free)(void *ctx)
        int (*process)(void *ctx, unsigned entry_layer, const uint8_t *data, uint32_t caplen, uint64_t ts_ns)
        size_t (*expire)(void *ctx, uint64_t now_ns)
        void (*flush)(void *ctx)
        int (*verdict)(const void *ctx)
    enum:
        RG_VAL_NUM
        RG_VAL_BYTES
        RG_LINK_ETHERNET
        RG_LINK_NULL
        RG_LINK_RAW_IPV4
        RG_LINK_RAW_IPV6
        RG_LINK_SLL
        RG_LINK_SLL2
        RG_LINK_PPP

cdef extern from "rg/rg_pcap.h":
    ctypedef enum rg_entry:
        RG_ENTRY_UNKNOWN
        RG_ENTRY_ETHER
        RG_ENTRY_IPV4
        RG_ENTRY_IPV6
        RG_ENTRY_IP
    ctypedef struct rg_linkinfo:
        int dlt
        rg_entry entry
        uint32_t net_off
        const char *name
    ctypedef struct rg_netpos:
        rg_entry proto
        uint32_t off
    ctypedef struct rg_frame:
        const uint8_t *data
        uint32_t caplen
        uint32_t len
        uint64_t ts_ns
        int dlt
    ctypedef struct rg_pcap:
        pass
    int rg_link_info(int dlt, rg_linkinfo *li)
    int rg_link_locate(const rg_linkinfo *li, const uint8_t *p, uint32_t caplen, rg_netpos *np)
    rg_pcap *rg_pcap_open(const char *path, char *err, size_t errlen)
    int rg_pcap_next(rg_pcap *c, rg_frame *f)
    const char *rg_pcap_error(const rg_pcap *c)
    void rg_pcap_close(rg_pcap *c)

cdef extern from "rg/rg_community_id.h":
    int rg_community_id_flow(char *out, uint16_t seed, const rg_layer_desc *layer,
                             const uint8_t *key, const uint8_t *saddr, const uint8_t *daddr,
                             size_t alen, int has_ports, uint16_t sport, uint16_t dport)
    int rg_community_id_icmp(char *out, uint16_t seed, const uint8_t *saddr,
                             const uint8_t *daddr, size_t alen, uint8_t type, uint8_t code)
    int rg_ip_proto_of(const char *protocol)

cdef extern from "rg_py_shim.h":
    const rg_stack_desc *rg_py_stack()

# pcap link types (LINKTYPE_* / DLT_*) with a fixed entry kind; others: raw IP by version
cdef dict _DLT_KIND = {1: RG_LINK_ETHERNET, 0: RG_LINK_NULL, 108: RG_LINK_NULL,
                       113: RG_LINK_SLL, 276: RG_LINK_SLL2, 9: RG_LINK_PPP,
                       50: RG_LINK_PPP}
# feed(link=...) names: DLT values
LINKS = {"ether": 1, "ethernet": 1, "raw": 101, "null": 0, "loop": 108, "sll": 113,
         "sll2": 276, "ppp": 9}
CLOSE_REASONS = ("accept", "evicted", "expired", "flushed")
RECORD_REASONS = {1: "evicted", 2: "timeout", 3: "flushed"}
NS_PER_S = 1000000000


cdef str _s(const char *p):
    return None if p == NULL else p.decode("utf-8", "replace")


cdef class Engine:
    """A stack context with its observer. Not thread-safe: one Engine per thread."""

    cdef const rg_stack_desc *desc
    cdef void *ctx
    cdef rg_obs obs
    cdef list pending       # events of the frame being processed (no callbacks attached)
    cdef list callbacks     # Python callables: get each event at once
    cdef object stop_error  # an exception a callback raised, re-raised after the frame
    cdef list layer_names, handler_names, arg_names, states, parts, recs
    cdef uint64_t next_expire
    cdef bint expire_on, no_timeouts
    cdef dict link_entry    # dlt -> (fixed entry layer or -1, v4, v6, linkinfo tuple)
    cdef public uint64_t frames, skipped
    cdef public int verdict  # the last frame's verdict (rg_verdict; 0 = pass)
    cdef uint16_t cid_seed   # the Community ID's seed (--community-id-seed)
    cdef dict icmp_first     # uid -> (type, code) of an ICMP conversation's first packet
    cdef list icmp_args      # per handler: (type, code) argument indexes of a first-packet one

    def __cinit__(self, uint64_t seed=1, uint32_t inst_cap=0, bint no_timeouts=False,
                  uint16_t community_id_seed=0):
        cdef rg_ctx_cfg cfg
        self.desc = rg_py_stack()
        self.pending = []
        self.callbacks = []
        self.link_entry = {}
        self.no_timeouts = no_timeouts
        self.next_expire = <uint64_t>-1 if no_timeouts else 0
        d = self.desc
        self.layer_names = [_s(d.layers[i].name) for i in range(d.nlayers)]
        self.handler_names = [_s(d.handlers[i].name) for i in range(d.nhandlers)]
        self.arg_names = [
            tuple(_s(d.handlers[i].arg_names[j]) for j in range(d.handlers[i].nargs))
            for i in range(d.nhandlers)
        ]
        self.states = [
            tuple(_s(d.layers[i].states[j]) for j in range(d.layers[i].nstates))
            for i in range(d.nlayers)
        ]
        # record fields (spec record:): name and value names, per layer
        self.recs = [
            tuple((_s(r.name), tuple(_s(r.names[k]) for k in range(r.nnames)),
                   _s(r.letters) if r.letters != NULL else None)
                  for r in d.layers[i].rec[:min(d.layers[i].nrec, 4)])
            for i in range(d.nlayers)
        ]
        # handlers telling of an ICMP conversation's first packet, as the stock NFs find them
        # (handlers/nf/rg_nf_icmp.c): numeric icmp_type and icmp_code, not hooked on icmp_error
        self.cid_seed = community_id_seed
        self.icmp_first = {}
        self.icmp_args = []
        for i in range(d.nhandlers):
            names = self.arg_names[i]
            hooked = d.handlers[i].events != NULL and "icmp_error" in _s(d.handlers[i].events).split()
            num = [j for j in range(d.handlers[i].nargs) if d.handlers[i].arg_kinds[j] == RG_VAL_NUM]
            t = [j for j in num if names[j] == "icmp_type"]
            c = [j for j in num if names[j] == "icmp_code"]
            self.icmp_args.append((t[0], c[0]) if t and c and not hooked else None)
        self.parts = [
            tuple((p.kind, p.common, p.off, p.size)
                  for p in d.layers[i].parts[:d.layers[i].nparts])
            for i in range(d.nlayers)
        ]
        memset(&self.obs, 0, sizeof(rg_obs))
        self.obs.self = <void *>self
        self.obs.on_call = _on_call
        self.obs.on_close = _on_close
        self.obs.on_gap = _on_gap
        memset(&cfg, 0, sizeof(rg_ctx_cfg))
        cfg.seed = seed
        cfg.inst_cap = inst_cap
        cfg.obs = &self.obs
        cfg.no_timeouts = no_timeouts
        self.ctx = d.ctx_new(&cfg)
        if self.ctx == NULL:
            raise MemoryError("the stack context could not be created")

    def __dealloc__(self):
        if self.ctx != NULL:
            self.desc.ctx_free(self.ctx)  # without flushing: nobody listens any more
            self.ctx = NULL

    @property
    def name(self):
        return _s(self.desc.name)

    @property
    def spec_hash(self):
        return _s(self.desc.spec_hash)

    @property
    def layers(self):
        return list(self.layer_names)

    @property
    def handlers(self):
        return {n: a for n, a in zip(self.handler_names, self.arg_names)}

    def add_callback(self, fn):
        self.callbacks.append(fn)

    def remove_callback(self, fn):
        self.callbacks.remove(fn)

    cdef object key_of(self, const rg_flow_info *f):
        """Endpoints of an instance, read from its keys as the stock NFs read them
        (handlers/nf/rg_nf.h, rg_nf_endpoints_of)."""
        cdef const uint8_t *ka = f.key_a
        cdef const uint8_t *kp = f.key_p
        cdef const uint8_t *da = NULL
        cdef char cid[32]
        parts = self.parts[f.layer]
        bidir = self.desc.layers[f.layer].bidir
        src = dst = sport = dport = None
        addr = None
        for kind, common, off, size in parts:
            if common:
                continue
            if kind == RG_VAL_BYTES and size in (4, 16):
                if addr is None:
                    addr = (off, size)
                elif not bidir and dst is None:
                    dst = _addr(ka[off:off + size])
                    da = ka + <size_t>off
            elif kind == RG_VAL_NUM and size == 2 and sport is None and bidir:
                sport = ka[off] << 8 | ka[off + 1]
                dport = kp[off] << 8 | kp[off + 1]
        community = None
        if addr is not None:
            off, size = addr
            src = _addr(ka[off:off + size])
            if bidir:
                dst = _addr(kp[off:off + size])
                da = kp + <size_t>off
            # the Community ID as the stock NFs write it (rg_community_id.h); an ICMP
            # conversation's from its first packet's type and code
            proto = rg_ip_proto_of(self.desc.layers[f.layer].protocol)
            first = self.icmp_first.get(f.uid)
            if proto in (1, 58):
                if da != NULL and first is not None and rg_community_id_icmp(
                    cid, self.cid_seed, ka + <size_t>off, da, size, first[0], first[1]
                ) == 0:
                    community = cid.decode("ascii")
            elif da != NULL and rg_community_id_flow(
                cid, self.cid_seed, &self.desc.layers[f.layer], ka, ka + <size_t>off, da, size,
                sport is not None, sport or 0, dport or 0,
            ) == 0:
                community = cid.decode("ascii")
        return FlowKey(src, dst, sport, dport, community)

    cdef int emit(self, ev):
        """The strongest verdict the callbacks returned (an int 0..3; None: 0)."""
        cdef int best = 0
        if not self.callbacks:
            self.pending.append(ev)
            return 0
        try:
            for fn in self.callbacks:
                v = fn(ev)
                if v is None:
                    continue
                if not isinstance(v, int) or not 0 <= v <= 3:
                    raise ValueError(f"a callback returned {v!r}: a verdict is 0..3 or None")
                if v > best:
                    best = v
        except BaseException as e:  # raised to the caller of feed, after the frame
            if self.stop_error is None:
                self.stop_error = e
        return best

    cdef object drain(self):
        out = self.pending
        self.pending = []
        if self.stop_error is not None:
            e = self.stop_error
            self.stop_error = None
            raise e
        return out

    cdef int entry_of(self, int dlt, const uint8_t *data, uint32_t caplen, uint32_t *off):
        """The entry layer of a frame (-1: none) and where its input starts."""
        cdef rg_linkinfo li
        cdef rg_netpos np
        if dlt in _DLT_KIND:
            off[0] = 0
            return self.desc.entry[<int>_DLT_KIND[dlt]]
        if rg_link_info(dlt, &li) != 0:
            return -1
        if rg_link_locate(&li, data, caplen, &np) != 0 or np.off > caplen:
            return -1
        off[0] = np.off
        if np.proto == RG_ENTRY_IPV4 and (li.entry == RG_ENTRY_IP or li.entry == RG_ENTRY_IPV4):
            return self.desc.entry[RG_LINK_RAW_IPV4]
        if np.proto == RG_ENTRY_IPV6 and (li.entry == RG_ENTRY_IP or li.entry == RG_ENTRY_IPV6):
            return self.desc.entry[RG_LINK_RAW_IPV6]
        return -1

    cdef process(self, int dlt, const uint8_t *data, uint32_t caplen, uint64_t ts_ns):
        """One frame, as the capture driver feeds it: idle expiry on packet time once per
        second of it, then the stack from the entry layer of the frame's link type."""
        cdef uint32_t off = 0
        cdef int layer
        self.frames += 1
        if ts_ns >= self.next_expire:
            if self.expire_on:
                self.desc.expire(self.ctx, ts_ns)
            self.expire_on = True
            self.next_expire = ts_ns + NS_PER_S
        self.verdict = 0  # a frame no entry layer takes passes
        layer = self.entry_of(dlt, data, caplen, &off)
        if layer < 0:
            self.skipped += 1
            return
        self.desc.process(self.ctx, <unsigned>layer, data + off, caplen - off, ts_ns)
        if self.desc.verdict != NULL:
            self.verdict = self.desc.verdict(self.ctx)

    def feed(self, const uint8_t[::1] frame not None, uint64_t ts_ns=0, link="ether"):
        """Process one frame; returns its events (empty when callbacks take them)."""
        if link not in LINKS:
            raise ValueError(f"unknown link {link!r}: one of {', '.join(LINKS)}")
        cdef int dlt = LINKS[link]
        if frame.shape[0] == 0:
            self.frames += 1
            self.skipped += 1
            return []
        self.process(dlt, &frame[0], <uint32_t>frame.shape[0], ts_ns)
        return self.drain()

    def feed_pcap(self, path, bint flush=True):
        """Yield the events of every frame of a pcap or pcapng file, then (flush) the
        closes of the instances still live at its end."""
        cap = _Capture(str(path))
        try:
            while cap.next_frame(self):
                yield from self.drain()
        finally:
            cap.close()
        if flush:
            yield from self.flush()

    def flush(self):
        """End every live instance (reason "flushed"); returns the events that produces."""
        self.desc.flush(self.ctx)
        return self.drain()

    def expire(self, uint64_t now_ns):
        """End the instances idle at packet time now_ns; returns the events."""
        self.desc.expire(self.ctx, now_ns)
        return self.drain()


cdef class _Capture:
    """A capture file read by the C runtime (pcap, pcapng)."""

    cdef rg_pcap *cap
    cdef str path

    def __cinit__(self, str path):
        cdef char err[256]
        err[0] = 0
        self.path = path
        self.cap = rg_pcap_open(path.encode(), err, sizeof(err))
        if self.cap == NULL:
            raise OSError(f"{path}: {err.decode('utf-8', 'replace')}")

    cdef bint next_frame(self, Engine e) except -1:
        """Process the next frame with e; False at the end of the file."""
        cdef rg_frame f
        cdef int rc = rg_pcap_next(self.cap, &f)
        if rc == 0:
            return False
        if rc < 0:
            raise OSError(f"{self.path}: {_s(rg_pcap_error(self.cap))}")
        e.process(f.dlt, f.data, f.caplen, f.ts_ns)
        return True

    def close(self):
        if self.cap != NULL:
            rg_pcap_close(self.cap)
            self.cap = NULL

    def __dealloc__(self):
        self.close()


cdef object _addr(bytes b):
    import ipaddress
    return str(ipaddress.ip_address(b))


cdef object _bytes_arg(Engine e, const rg_val *v):
    if e.callbacks:  # a view of the stack's buffer, valid during the callbacks only
        if v.bytes.len == 0:
            return memoryview(b"")
        return PyMemoryView_FromMemory(<char *>v.bytes.ptr, v.bytes.len, PyBUF_READ)
    return v.bytes.ptr[:v.bytes.len] if v.bytes.len else b""


cdef void _on_call(void *self, const rg_call *c) noexcept:
    cdef Engine e = <Engine>self
    try:
        names = e.arg_names[c.handler]
        args = {}
        views = []
        for i in range(len(names)):
            if c.args[i].kind == RG_VAL_BYTES:
                v = _bytes_arg(e, &c.args[i])
                if isinstance(v, memoryview):
                    views.append(v)
                args[names[i]] = v
            else:
                args[names[i]] = c.args[i].num
        flow = c.flow
        icmp = e.icmp_args[c.handler]
        if icmp is not None and flow != NULL and not c.end and flow.uid not in e.icmp_first:
            e.icmp_first[flow.uid] = (c.args[icmp[0]].num & 0xff, c.args[icmp[1]].num & 0xff)
        ev = Event(
            "call", e.layer_names[c.layer], e.handler_names[c.handler],
            flow.uid if flow != NULL else None,
            e.key_of(flow) if flow != NULL else None,
            "s2c" if c.dir else "c2s", c.ts_ns, c.pkt_no, args,
            CLOSE_REASONS[c.end - 1] if c.end else None,
        )
        verdict = e.emit(ev)
        if verdict:  # an observer's verdict (rg_api.h): the same path as a handler's
            rg_verdict_give(c.verdict, c.flow, verdict)
        for v in views:
            try:
                v.release()
            except BufferError:  # a callback kept a slice of it: let it go with the slice
                pass
    except BaseException as exc:
        if e.stop_error is None:
            e.stop_error = exc


cdef void _on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns) noexcept:
    cdef Engine e = <Engine>self
    try:
        states = e.states[f.layer]
        args = {"complete": bool(complete),
                "state": states[f.state] if f.state < len(states) else None,
                "late_packets": f.late}
        # the records' vocabulary (handlers/nf rg_nf_end_fields): an accept state's reason
        # comes from the layer's record field `reason`
        args["reason"] = RECORD_REASONS.get(reason, "accept")
        for k, (name, names, letters) in enumerate(e.recs[f.layer]):
            v = f.rec[k]
            text = names[v] if v < len(names) else v
            if letters is not None:  # 4-bit letter codes, the first in the low bits
                text = ""
                while v & 15:
                    if (v & 15) <= len(letters):
                        text += letters[(v & 15) - 1]
                    v >>= 4
            if name == "reason":
                if reason == 0:
                    args["reason"] = text
            else:
                args[name] = text
        ev = Event(
            "close", e.layer_names[f.layer], "close", f.uid, e.key_of(f), None, ts_ns, None,
            args,
            CLOSE_REASONS[reason] if 0 <= reason < 4 else None,
        )
        e.icmp_first.pop(f.uid, None)
        e.emit(ev)
    except BaseException as exc:
        if e.stop_error is None:
            e.stop_error = exc


cdef void _on_gap(void *self, const rg_flow_info *f, int dir, uint32_t seq, uint32_t len,
                  uint32_t at, uint64_t ts_ns) noexcept:
    cdef Engine e = <Engine>self
    try:
        ev = Event(
            "gap", e.layer_names[f.layer], "gap", f.uid, e.key_of(f), "s2c" if dir else "c2s",
            ts_ns, None, {"seq": seq, "len": len, "at": at}, None,
        )
        e.emit(ev)
    except BaseException as exc:
        if e.stop_error is None:
            e.stop_error = exc
