/* rg_seq.h - reassembly sequences.
 *
 * A sequence reassembles one byte stream (one direction of a TCP connection,
 * one IP datagram from fragments, ...) addressed by 32-bit serial numbers
 * (wraparound-safe: every comparison is relative to the assembled offset).
 *
 * State is a small struct (rg_seq, 40 bytes) meant to live inline in an
 * instance payload; an all-zero rg_seq is a valid empty sequence.  Per-layer
 * settings (caps, overlap policy, buffering) live in an rg_seq_cfg that the
 * caller passes to every call (normally a static const in generated code).
 *
 * Model
 *   next      the assembled offset: every byte before it has been delivered
 *             (or skipped).  Unless cfg.zero_based, the first insert sets it.
 *   blocks    sorted, disjoint, non-adjacent [start, end) ranges of buffered
 *             bytes after next (merged on insert).  Each block owns its bytes
 *             (one allocation per block, grown geometrically when segments
 *             extend it), so memory follows the bytes held, never the offset:
 *             a one-byte segment far ahead of next costs one byte plus a
 *             bounded overhead (its block slot and the allocator's header).
 *             Assemble hands the block at next over as the view (no copy);
 *             only gap skipping, which joins several blocks, copies them into
 *             one buffer.  The view's buffer is freed by the next call.
 *   end       optional end marker, set by a segment whose logical length
 *             (takeup) exceeds its data length: phantom bytes such as a FIN
 *             occupy [seq + len, seq + takeup).  Data past the end marker is
 *             dropped.  A data-less phantom at next before any other byte
 *             (a SYN) just advances next.
 *   floor     gap recovery: a window left edge past next (the receiver
 *             acknowledged bytes the capture lost) lets assemble skip every
 *             hole before it; rg_seq_flush skips every hole at the end of an
 *             instance's life.
 *
 * Insert (rg_seq_insert) never keeps the caller's pointer unless
 * RG_SEQ_BORROW is passed; flags and byte counts are added into an
 * rg_seq_res the caller zeroes per packet.
 *   - bytes before next: already delivered -> counted as duplicates (the new
 *     bytes of a segment that starts before next are kept);
 *   - bytes overlapping buffered blocks: duplicates; cfg.policy decides
 *     whose copy survives, per buffered block the segment overlaps, from how
 *     the two lie (target-based policies, table below); differing content
 *     sets RG_SEQ_EV_CONFLICT and res.ovl_* (where, how many bytes, how many
 *     of them the new copy won);
 *   - a segment whose data bytes were all seen: RG_SEQ_EV_REXMIT; some but
 *     not all: RG_SEQ_EV_OVERLAP;
 *   - window [left, right): bytes at or past right are dropped
 *     (RG_SEQ_EV_OUT_OF_WINDOW); left past next arms gap skipping, unless
 *     left is beyond every byte seen (a bogus acknowledgment);
 *   - byte cap: bytes at or past next + cfg.max_bytes are dropped, block cap:
 *     a segment that would need block number max_blocks + 1 is dropped
 *     (both RG_SEQ_EV_BUFFER_FULL).  With cfg.recover (a stream whose holes
 *     may be capture loss: TCP) a segment past the byte cap, up to 1 GiB
 *     (RG_SEQ_MAX_SPAN) after next, is taken instead: the bytes before
 *     seq + len - max_bytes are given up (gap skipping is armed up to there,
 *     what is buffered before it is delivered and the holes skipped), so the
 *     cap is a window that follows the data and next never lags more than
 *     max_bytes behind the newest byte held: every 32-bit number stays within
 *     2 GiB of next, however far the stream goes (a stream past 4 GiB whose
 *     capture kept a few segments per GiB).  The cap then counts from the
 *     floor until assemble reaches it (buffered bytes may pass max_bytes
 *     between the insert and that assemble).
 * Assemble (rg_seq_assemble) returns the contiguous bytes at next (pointer
 * valid until the next call on this sequence) and advances next; when next
 * reaches the end marker it also consumes the phantom bytes.  With gap
 * skipping armed it skips every hole before the floor at once: the view is
 * the buffered bytes up to the floor (and the contiguous run after it), the
 * holes cut out, and res.gaps lists the holes ([start, end) sequence
 * numbers).  With
 * cfg.buffer_data == 0 only offsets are tracked and the returned view is
 * empty (never NULL); res.adv_bytes says how far next moved.
 *
 * Retention (cfg.retain, with buffer_data): the bytes assemble delivers are
 * kept (copied, also those of the zero-copy paths) until the window's left
 * edge passes them, at most max_bytes of them (the oldest go first; a
 * memcap refusal or a failed allocation gives up the copy, never data), so
 * that a segment repeating delivered, unacknowledged bytes is compared:
 * different content raises RG_SEQ_EV_CONFLICT with res.ovl_* as for
 * buffered bytes (ovl_new is always 0: delivered bytes are never replaced,
 * whatever the policy).  Bytes after a hole skipped by gap recovery start a
 * new retained run.  Acknowledged bytes are not retained: a repeat of them
 * is a duplicate, not compared.  The inline fast paths step aside for a
 * retaining sequence (each insert and assemble runs out of line).
 *
 * Fast paths for generated code
 *   rg_seq_fast()      "fast forward": when the sequence is empty and the
 *                      segment is exactly at next (and passes the window and
 *                      caps), advance next and return the caller's bytes
 *                      with no copy and no allocation.  Same observable
 *                      result as insert + assemble.
 *   RG_SEQ_BORROW      insert flag: an aligned segment into an empty
 *                      sequence is referenced, not copied; the caller must
 *                      call rg_seq_assemble or rg_seq_settle before the
 *                      packet buffer goes away.
 * No asserts, no aborts: every input is handled. */
#ifndef RG_SEQ_H
#define RG_SEQ_H

#include "rg_common.h"
#include "rg_stats.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Overlap policies (cfg.policy): which copy of a byte both a buffered block
 * ("old") and a new segment ("new") carry survives, decided per old block
 * from where new starts and ends relative to it (Suricata's stream engine
 * rules; "new" = the new copy wins the overlapped bytes):
 *
 *   new starts / ends vs old    first last linux bsd windows solaris
 *   same   / before             old   new  old   old old     old
 *   same   / same               old   new  old   old old     new
 *   same   / after              old   new  new   old old     new
 *   before / before (inside)    old   new  new   new new     old
 *   before / same               old   new  new   new new     new
 *   before / after              old   new  new   new new     new
 *   after  / before (inside)    old   new  old   old old     old
 *   after  / same               old   new  old   old old     old
 *   after  / after              old   new  old   old old     new
 *
 * Bytes already delivered (before next) are never replaced.  "old" is the
 * buffered block, i.e. the merged run of the segments held, not each
 * original segment.  Message units: only last keeps the new copy. */
enum rg_seq_policy {
    RG_SEQ_FIRST = 0,
    RG_SEQ_LAST = 1,
    RG_SEQ_LINUX = 2,
    RG_SEQ_BSD = 3,
    RG_SEQ_WINDOWS = 4,
    RG_SEQ_SOLARIS = 5,
};

#define RG_SEQ_DEFAULT_MAX_BYTES  (1u << 20)
#define RG_SEQ_DEFAULT_MAX_BLOCKS 256u
#define RG_SEQ_MAX_SPAN           (1u << 30) /* hard limit on any cap */

typedef struct rg_seq_cfg {
    uint32_t max_bytes;  /* byte cap: span from next; 0 = default (1 MiB) */
    uint32_t max_blocks; /* buffered block cap; 0 = default (256), max 65535 */
    uint8_t policy;      /* enum rg_seq_policy */
    uint8_t buffer_data; /* 0: track offsets only */
    uint8_t zero_based;  /* 1: next starts at 0 instead of the first insert */
    uint8_t unit;        /* RG_SEQ_UNIT_BYTE, or RG_SEQ_UNIT_MSG: see "message units" */
    uint16_t layer;      /* the layer's index: its memory is counted in stats->layer[layer].mem */
    uint8_t recover;     /* gap recovery past the byte cap: see "Byte cap" above */
    uint8_t retain;      /* keep delivered bytes until acknowledged: see "Retention" above */
} rg_seq_cfg;

/* What a sequence number counts (rg_seq_cfg.unit). */
enum rg_seq_unit { RG_SEQ_UNIT_BYTE = 0, RG_SEQ_UNIT_MSG = 1 };

/* Event flags (rg_seq_res.flags). */
enum {
    RG_SEQ_EV_REXMIT = 1u << 0,        /* every data byte was seen before */
    RG_SEQ_EV_OVERLAP = 1u << 1,       /* some data bytes were seen before */
    RG_SEQ_EV_OUT_OF_WINDOW = 1u << 2, /* bytes dropped: right of the window or past the end */
    RG_SEQ_EV_BUFFER_FULL = 1u << 3,   /* bytes dropped: byte / block cap or memory */
    RG_SEQ_EV_CONFLICT = 1u << 4,      /* an overlap had different content */
    RG_SEQ_EV_END = 1u << 5,           /* this insert set the end marker */
    RG_SEQ_EV_END_MISMATCH = 1u << 6,  /* a different end marker was ignored */
    RG_SEQ_EV_GAP = 1u << 7,           /* assemble skipped a hole (ACK-driven) */
    RG_SEQ_EV_DONE = 1u << 8,          /* assemble reached the end marker */
    RG_SEQ_EV_MEMCAP = 1u << 9,        /* an allocation passed the context's memcap (res.mem_*) */
};

/* Per-packet results: flags are ORed and counters added by every call. */
typedef struct rg_seq_res {
    uint32_t flags;
    uint32_t new_bytes; /* data bytes accepted for the first time */
    uint32_t dup_bytes; /* data bytes seen before (delivered or buffered) */
    uint32_t dup_seq;   /* first duplicate byte (valid if dup_bytes) */
    uint32_t oow_bytes; /* dropped: window / end marker */
    uint32_t cap_bytes; /* dropped: caps / memory */
    uint32_t gap_bytes; /* skipped by assemble */
    uint32_t adv_bytes; /* data bytes delivered by assemble (also without buffering) */
    /* ---- gap recovery: the holes assemble skipped, in order (valid until the
     * next call on the sequence; added to by every assemble with the same res) */
    uint32_t ngaps;
    const struct rg_seq_blk *gaps;
    /* ---- overlaps with different content (RG_SEQ_EV_CONFLICT) */
    uint32_t ovl_seq;   /* start of the first differing overlap (valid if ovl_bytes) */
    uint32_t ovl_bytes; /* bytes of the overlaps that differ */
    uint32_t ovl_new;   /* ... of them, how many now hold the new copy */
    uint32_t ovl_old;   /* bytes of the held or kept copies compared with, equal or not */
    uint8_t ovl_policy; /* enum rg_seq_policy of the sequence that raised the conflict */
    /* ---- memcaps (RG_SEQ_EV_MEMCAP): bytes asked past the cap, the policy applied */
    uint32_t mem_asked;
    uint32_t mem_policy; /* enum rg_memcap_policy */
} rg_seq_res;

typedef struct rg_seq_blk {
    uint32_t start, end;
} rg_seq_blk;

struct rg_seq_msgs; /* message units: the buffered messages (rg_seq.c) */

struct rg_flow;
struct rg_stats;
#define RG_MEM_MAX_TABLES 64u

/* A context's memory accountant.  Heap accounting of reassembly buffers
 * (stores, block arrays, block data, views, messages): now, the peak since
 * the last reset, and allocations that failed (each one dropped new data,
 * counted as BUFFER_FULL, never data already held).  One per stack context
 * (see rg_seq_heap_bind), zero-initialised: no cap.
 *
 * Memcaps (issue 14): cap bounds the reassembly bytes, flow_cap the bytes of
 * the flow tables registered with it (rg_flow_cfg.acct: records touched and
 * key indexes).  An allocation that would pass a cap is a hit, and policy
 * (enum rg_memcap_policy) decides:
 *   ignore        the allocation proceeds (counted);
 *   evict-oldest  the least recently active instances of the registered
 *                 tables are evicted (close reason evicted) until it fits;
 *                 instances touched by the current packet (last touch at
 *                 *now) are never evicted; if nothing can go, it is refused;
 *   drop-flow,
 *   bypass        refused (the new data is dropped, BUFFER_FULL) and
 *                 RG_SEQ_EV_MEMCAP tells the caller, which applies the policy
 *                 to the instance (generated code: rg_seq_bypass its
 *                 sequences, and for drop-flow mark it dropped).
 * Every hit is counted in stats->layer[layer].mem and, for flow tables,
 * reported through on_hit; reassembly hits come back in rg_seq_res.
 * Transient buffers (an assemble's joined view, the gap list) are counted
 * but never refused: refusing them would lose bytes already held. */
/* The pool's size classes: retention buffers of 512 << k bytes, k < 8 (grown geometrically
 * from 512); other sizes are not pooled. */
#define RG_SEQ_POOL_MIN       512u
#define RG_SEQ_POOL_CLASSES   8
#define RG_SEQ_POOL_MAX_BYTES ((size_t)1 << 20)
typedef struct rg_seq_heap {
    size_t cur, peak;
    uint64_t fails;
    /* ---- memcaps (0 = none) */
    size_t cap;                 /* reassembly bytes */
    size_t flow_cap;            /* flow-table bytes */
    size_t flow_cur, flow_peak; /* flow-table bytes accounted */
    uint8_t policy;             /* enum rg_memcap_policy */
    uint8_t busy;               /* evicting: nested allocations (drains) are not refused */
    uint64_t hits, flow_hits;   /* cap hits */
    uint64_t act[RG_MEMCAP_POLICIES];
    uint64_t evicted;       /* instances evicted to make room */
    const uint64_t *now;    /* the flow clock (records touched at it are in use) */
    struct rg_stats *stats; /* per-layer counters (layer[i].mem); may be NULL */
    /* a flow table refused or evicted for a new instance (inst NULL: none was created) */
    void (*on_hit)(void *cb, unsigned layer, const void *inst, int policy, size_t asked);
    void *cb;
    uint32_t hit_asked, hit_pending; /* a reassembly hit since the last insert began */
    uint32_t ntables;
    struct rg_flow *tables[RG_MEM_MAX_TABLES];
    /* run-time overlap policies (rg_ctx_cfg.overlap_policy): per layer, enum rg_seq_policy + 1,
     * 0 = cfg.policy; NULL = none */
    const uint8_t *ovl_policy;
    uint32_t novl;
    /* pool: stores and retention buffers freed while this accountant was bound, kept for reuse
     * so that a flow's retention costs no malloc/free in steady state (rg_seq.c; free memory,
     * not counted in cur; at most RG_SEQ_POOL_MAX_BYTES; freed by rg_seq_heap_unbind) */
    void *pool_store;
    void *pool_ret[RG_SEQ_POOL_CLASSES]; /* buffers of RG_SEQ_POOL_MIN << k bytes */
    size_t pool_bytes;
} rg_seq_heap;

/* A buffered block: its range and, with cfg.buffer_data, its own bytes
 * (data[0] is the byte at start; cap bytes allocated). */
typedef struct rg_seq_run {
    uint32_t start, end;
    uint32_t cap;
    uint8_t *data;
} rg_seq_run;

/* Out-of-order storage, allocated on first need. */
typedef struct rg_seq_store {
    rg_seq_run *blk;
    struct rg_seq_msgs *msgs; /* RG_SEQ_UNIT_MSG only */
    rg_seq_heap *heap;        /* the accountant this store was created under */
    uint32_t blk_cap;
    uint32_t view_cap; /* bytes allocated in view */
    uint8_t *view;     /* the last assemble's bytes (freed by the next call) */
    /* gap recovery: the holes skipped by the assemble calls of one packet */
    uint32_t ngap;
    uint32_t gap_cap;
    rg_seq_blk *gap;
    uint16_t layer; /* counted in heap->stats->layer[layer].mem */
    /* retention (cfg.retain): delivered bytes [ret_seq, ret_seq + ret_len) */
    uint32_t ret_seq, ret_len, ret_cap;
    uint8_t *ret;
} rg_seq_store;

/* Internal flags (rg_seq.flags). */
#define RG_SEQF_INIT    0x01u /* next is set */
#define RG_SEQF_STARTED 0x02u /* some logical byte was seen */
#define RG_SEQF_END     0x04u /* end marker set */
#define RG_SEQF_FLOOR   0x08u /* gap skipping armed */
#define RG_SEQF_DONE    0x10u /* phantom bytes after the end consumed */
#define RG_SEQF_SHRINK  0x20u /* holds the last view's buffer: release it at the next insert */
#define RG_SEQF_BYPASS  0x40u /* memcap policy: offsets only from now on (rg_seq_bypass) */

typedef struct rg_seq {
    uint32_t next;  /* assembled offset */
    uint32_t end;   /* end marker: first sequence number after the data */
    uint32_t lend;  /* logical end: end + phantom bytes */
    uint32_t floor; /* gap skipping target */
    uint16_t flags;
    uint16_t nblk;       /* buffered blocks */
    uint32_t borrow_len; /* RG_SEQ_BORROW: referenced bytes at next */
    const uint8_t *borrow;
    rg_seq_store *st;
} rg_seq;

/* Optional window [left, right); (0, 0) means none. */
typedef struct rg_seq_win {
    uint32_t left, right;
    /* retention (cfg.retain): the receiver's acknowledgment, when it is not left (TCP keeps
     * left at or before the segment's own start) */
    uint32_t ack;
    uint32_t has_ack;
} rg_seq_win;

/* Insert flags. */
#define RG_SEQ_BORROW 1u

RG_INLINE void rg_seq_init(rg_seq *s)
{
    s->next = s->end = s->lend = s->floor = 0;
    s->flags = 0;
    s->nblk = 0;
    s->borrow_len = 0;
    s->borrow = NULL;
    s->st = NULL;
}

/* Out-of-line general paths of the inline calls below (also callable
 * directly: same results as the inline calls, only slower). */
uint32_t rg_seq__insert(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                        uint32_t len, uint32_t takeup, const rg_seq_win *win, unsigned iflags,
                        rg_seq_res *res);
rg_bytes rg_seq__assemble(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res);
int rg_seq__ready_upto(const rg_seq *s, uint32_t upto);
void rg_seq__release(rg_seq *s);

/* Release buffers; the sequence is empty (and uninitialised) afterwards. */
RG_INLINE void rg_seq_free(rg_seq *s)
{
    if (RG_UNLIKELY(s->st != NULL)) rg_seq__release(s);
    rg_seq_init(s);
}

/* Release buffers of a sequence whose record is discarded or zeroed again
 * before its next use (a one-packet instance's scratch record): as
 * rg_seq_free, but a sequence that never held a buffer is left as it is
 * instead of being reinitialised. */
RG_INLINE void rg_seq_discard(rg_seq *s)
{
    if (RG_UNLIKELY(s->st != NULL)) rg_seq__release(s);
}

/* Memcap policies bypass and drop-flow: free the bytes buffered (block data;
 * message units keep the messages held) and track offsets only from now on,
 * as with cfg.buffer_data == 0: the sequence still advances, ends and
 * reports holes (state machines keep working), but delivers no data. */
void rg_seq_bypass(rg_seq *s);
RG_INLINE int rg_seq_bypassed(const rg_seq *s)
{
    return (s->flags & RG_SEQF_BYPASS) != 0;
}

/* Set next explicitly (e.g. to an ISN + 1); drops anything buffered. */
void rg_seq_set_base(rg_seq *s, uint32_t next);

RG_INLINE uint32_t rg_seq_cfg_max_bytes(const rg_seq_cfg *cfg)
{
    uint32_t m = cfg->max_bytes ? cfg->max_bytes : RG_SEQ_DEFAULT_MAX_BYTES;
    return m > RG_SEQ_MAX_SPAN ? RG_SEQ_MAX_SPAN : m;
}

/* Insert a segment: data bytes [seq, seq + len) and logical length takeup
 * (>= len; takeup > len marks phantom bytes and sets the end marker; takeup <
 * len truncates the data to takeup).  win may be NULL.  Returns res->flags.
 *
 * Inline: the two per-packet common cases, which change at most next, the
 * flags and the borrowed region (no copy, no allocation); everything else
 * goes to rg_seq__insert.
 *   - no logical bytes (a pure ACK) into an initialised sequence with no
 *     window left edge past next: nothing happens (rg_seq__insert would only
 *     copy borrowed bytes early);
 *   - no logical bytes as the first insert (a SYN numbered past its own
 *     number), window left edge not past it: it sets next;
 *   - data exactly at next (or the first insert, which sets next) into an
 *     empty sequence without end marker, no phantom bytes, within the byte
 *     cap and the window, left edge not past next: the bytes are borrowed
 *     (RG_SEQ_BORROW), or without buffering just counted (no pointer is
 *     kept; assemble delivers the offsets);
 *   - the same with phantom bytes after the data (a FIN) into a started
 *     sequence, the window not trimming them: the end marker is set too. */
RG_INLINE uint32_t rg_seq_insert(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq,
                                 const uint8_t *data, uint32_t len, uint32_t takeup,
                                 const rg_seq_win *win, unsigned iflags, rg_seq_res *res)
{
    const uint32_t f = s->flags;
    if (RG_LIKELY(!(f & RG_SEQF_SHRINK) && !cfg->retain)) {
        const int nowin = !win || !(win->left | win->right);
        if (takeup == 0) {
            /* (a pending borrow may stay: assemble or settle must follow anyway) */
            if (f & RG_SEQF_INIT) {
                if (nowin || rg_sdiff(win->left, s->next) <= 0) return res ? res->flags : 0;
            } else {
                /* nothing buffered or borrowed before the first insert */
                const uint32_t first = cfg->zero_based ? s->next : seq;
                if (nowin || rg_sdiff(win->left, first) <= 0) {
                    s->next = first;
                    s->flags = (uint16_t)(f | RG_SEQF_INIT);
                    return res ? res->flags : 0;
                }
            }
        } else if (takeup == len && data != NULL &&
                   (s->nblk | (f & (RG_SEQF_END | RG_SEQF_BYPASS)) | s->borrow_len) == 0 &&
                   seq == (((f & RG_SEQF_INIT) || cfg->zero_based) ? s->next : seq) &&
                   ((iflags & RG_SEQ_BORROW) || !cfg->buffer_data) &&
                   len <= (cfg->buffer_data ? rg_seq_cfg_max_bytes(cfg) : RG_SEQ_MAX_SPAN) &&
                   (nowin || (rg_sdiff(win->left, seq) <= 0 &&
                              (int64_t)rg_sdiff(win->right, seq) >= (int64_t)len))) {
            s->next = seq; /* the first insert sets it, otherwise it is already seq */
            s->borrow = cfg->buffer_data ? data : rg_empty_byte;
            s->borrow_len = len;
            s->flags = (uint16_t)(f | RG_SEQF_INIT | RG_SEQF_STARTED);
            if (!res) return 0;
            res->new_bytes += len;
            return res->flags;
        } else if (takeup > len && takeup - len <= RG_SEQ_MAX_SPAN && (data != NULL || len == 0) &&
                   (f & (RG_SEQF_INIT | RG_SEQF_STARTED)) == (RG_SEQF_INIT | RG_SEQF_STARTED) &&
                   (s->nblk | (f & (RG_SEQF_END | RG_SEQF_FLOOR | RG_SEQF_BYPASS)) |
                    s->borrow_len) == 0 &&
                   seq == s->next &&
                   (len == 0 ||
                    (((iflags & RG_SEQ_BORROW) || !cfg->buffer_data) &&
                     len <= (cfg->buffer_data ? rg_seq_cfg_max_bytes(cfg) : RG_SEQ_MAX_SPAN))) &&
                   (nowin || (rg_sdiff(win->left, seq) <= 0 &&
                              (int64_t)rg_sdiff(win->right, seq) >= (int64_t)takeup))) {
            /* the data (if any) borrowed as above, then the end marker */
            if (len) {
                s->borrow = cfg->buffer_data ? data : rg_empty_byte;
                s->borrow_len = len;
            }
            s->end = seq + len;
            s->lend = seq + takeup;
            s->flags = (uint16_t)(f | RG_SEQF_END);
            if (!res) return RG_SEQ_EV_END;
            res->new_bytes += len;
            res->flags |= RG_SEQ_EV_END;
            return res->flags;
        }
    }
    return rg_seq__insert(s, cfg, seq, data, len, takeup, win, iflags, res);
}

/* Insert into a fresh sequence (all zero: never inserted into since rg_seq_init
 * or a zeroed record, e.g. an instance created by this packet): the common
 * case of rg_seq_insert with every test of the sequence's state left out.
 * When the segment has data, no phantom bytes, starts at the initial offset
 * (cfg.zero_based: 0; otherwise anywhere), fits the byte cap and the window
 * (left edge not past it) and is borrowed (RG_SEQ_BORROW, or no buffering),
 * it does exactly what rg_seq_insert does there (next, the borrowed bytes,
 * INIT | STARTED, res->new_bytes += len) and returns 1: no flag raised, no
 * other counter touched.  Otherwise it changes nothing and returns 0: call
 * rg_seq_insert.  Undefined on a sequence that is not fresh. */
RG_INLINE int rg_seq_insert_fresh(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq,
                                  const uint8_t *data, uint32_t len, uint32_t takeup,
                                  const rg_seq_win *win, unsigned iflags, rg_seq_res *res)
{
    if (RG_UNLIKELY(takeup != len || len == 0 || data == NULL || cfg->retain)) return 0;
    if (cfg->zero_based && seq != 0) return 0;
    if (cfg->buffer_data && (!(iflags & RG_SEQ_BORROW) || len > rg_seq_cfg_max_bytes(cfg)))
        return 0;
    if (!cfg->buffer_data && len > RG_SEQ_MAX_SPAN) return 0;
    if (win && (win->left | win->right) &&
        (rg_sdiff(win->left, seq) > 0 || (int64_t)rg_sdiff(win->right, seq) < (int64_t)len))
        return 0;
    s->next = seq;
    s->borrow = cfg->buffer_data ? data : rg_empty_byte;
    s->borrow_len = len;
    s->flags = RG_SEQF_INIT | RG_SEQF_STARTED;
    if (res) res->new_bytes += len;
    return 1;
}

/* Take the contiguous bytes at next (empty view if none), advance next.
 * Inline: no buffered blocks, no gap skipping armed (deliver the borrowed
 * bytes, if any; at the end marker, consume the phantom bytes). */
RG_INLINE rg_bytes rg_seq_assemble(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res)
{
    const uint32_t f = s->flags;
    if (RG_LIKELY(((f & (RG_SEQF_FLOOR | RG_SEQF_BYPASS)) | s->nblk | cfg->retain) == 0)) {
        const uint32_t n = s->borrow_len;
        rg_bytes out;
        out.ptr = (cfg->buffer_data && n) ? s->borrow : rg_empty_byte;
        out.len = cfg->buffer_data ? n : 0;
        s->next += n;
        s->borrow = NULL;
        s->borrow_len = 0;
        if (res) res->adv_bytes += n;
        if (RG_UNLIKELY(f & RG_SEQF_END) && !(f & RG_SEQF_DONE) && s->next == s->end) {
            s->next = s->lend;
            s->flags = (uint16_t)(f | RG_SEQF_DONE);
            if (res) res->flags |= RG_SEQ_EV_DONE;
        }
        return out;
    }
    return rg_seq__assemble(s, cfg, res);
}

/* Copy borrowed bytes into the sequence's own buffer (after an insert with
 * RG_SEQ_BORROW that was not followed by assemble).  Without buffering a
 * pending region holds no pointer into the packet: nothing to do. */
void rg_seq__unborrow(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res);
RG_INLINE void rg_seq_settle(rg_seq *s, const rg_seq_cfg *cfg)
{
    /* message units never borrow (rg_seq_minsert copies) */
    if (s->borrow && cfg->buffer_data && cfg->unit == RG_SEQ_UNIT_BYTE)
        rg_seq__unborrow(s, cfg, NULL);
}

/* ---- queries ---- */
RG_INLINE uint32_t rg_seq_next(const rg_seq *s)
{
    return s->next;
}
/* Nothing buffered. */
RG_INLINE int rg_seq_empty(const rg_seq *s)
{
    return s->nblk == 0 && s->borrow_len == 0;
}
RG_INLINE int rg_seq_has_end(const rg_seq *s)
{
    return (s->flags & RG_SEQF_END) != 0;
}
RG_INLINE uint32_t rg_seq_end(const rg_seq *s)
{
    return s->end;
}
/* Number of buffered blocks. */
RG_INLINE uint32_t rg_seq_blocks(const rg_seq *s)
{
    return s->nblk + (s->borrow_len ? 1u : 0u);
}
/* Bytes currently buffered (or tracked, without buffering). */
uint32_t rg_seq_buffered(const rg_seq *s);
/* Heap bytes this sequence holds (store, block array, block data, the last
 * view's buffer, messages): what it adds to the heap accounting. */
size_t rg_seq_heap_bytes(const rg_seq *s);

/* No hole between next and the end marker (or, without an end marker, no
 * hole between next and the last buffered byte). */
int rg_seq_ready(const rg_seq *s);
/* Every byte from the start of the sequence up to upto (exclusive; capped at
 * the end marker) was delivered or is buffered contiguously at next: the
 * "no hole" half of a virtual condition.  A hole that gap skipping will
 * skip (before the floor) counts as settled.  0 before the first insert. */
RG_INLINE int rg_seq_ready_upto(const rg_seq *s, uint32_t upto)
{
    const uint32_t f = s->flags;
    if (!(f & RG_SEQF_INIT)) return 0;
    if (RG_UNLIKELY(s->nblk != 0 || (f & RG_SEQF_FLOOR))) return rg_seq__ready_upto(s, upto);
    /* Phantom bytes (a FIN) are never present: the data ends at the marker. */
    if ((f & RG_SEQF_END) && rg_sdiff(upto, s->end) > 0) upto = s->end;
    return rg_sdiff(s->next + s->borrow_len, upto) >= 0;
}
/* The end marker is set and every byte up to it is present. */
RG_INLINE int rg_seq_complete(const rg_seq *s)
{
    return (s->flags & RG_SEQF_END) && rg_seq_ready(s);
}
/* Everything up to and including the phantom bytes has been assembled. */
RG_INLINE int rg_seq_done(const rg_seq *s)
{
    return (s->flags & RG_SEQF_DONE) != 0;
}
/* rg_seq_assemble would return data or skip a hole now. */
int rg_seq_pending(const rg_seq *s);

/* Gap recovery at the end of an instance's life (or whenever the caller
 * knows no byte before the last one seen will come): arm gap skipping up to
 * the highest sequence number seen (the end marker's phantom bytes
 * included), so that the next assemble delivers everything buffered with
 * the holes skipped.  Returns rg_seq_pending(s). */
int rg_seq_flush(rg_seq *s);

/* ---- fast forward ---- */

/* If the sequence is empty and the segment starts exactly at next, has no
 * phantom bytes, fits the caps and lies inside the window, deliver it
 * directly: *out = (data, len) (empty without buffering), next += len, and
 * return 1.  Otherwise change nothing and return 0 (use insert + assemble).
 * res (optional) gets adv_bytes/new_bytes as insert + assemble would. */
RG_INLINE int rg_seq_fast(rg_seq *s, const rg_seq_cfg *cfg, uint32_t seq, const uint8_t *data,
                          uint32_t len, uint32_t takeup, const rg_seq_win *win, rg_bytes *out,
                          rg_seq_res *res)
{
    uint16_t f = s->flags;
    if (RG_UNLIKELY(s->nblk | s->borrow_len | cfg->retain |
                    (f & (RG_SEQF_END | RG_SEQF_FLOOR | RG_SEQF_SHRINK | RG_SEQF_BYPASS))))
        return 0;
    if (RG_UNLIKELY(takeup != len || !data)) return 0;
    if (f & RG_SEQF_INIT) {
        if (seq != s->next) return 0;
    } else if (cfg->zero_based && seq != 0) {
        return 0;
    }
    if (RG_UNLIKELY(len > rg_seq_cfg_max_bytes(cfg))) return 0;
    if (win && (win->left | win->right)) {
        if (rg_sdiff(win->left, seq) > 0) return 0;             /* arms gap skipping */
        if (rg_sdiff(win->right, seq) < (int64_t)len) return 0; /* trims */
    }
    s->next = seq + len;
    s->flags = (uint16_t)(f | RG_SEQF_INIT | (len ? RG_SEQF_STARTED : 0));
    if (cfg->buffer_data) {
        out->ptr = data;
        out->len = len;
    } else {
        out->ptr = rg_empty_byte;
        out->len = 0;
    }
    if (res) {
        res->new_bytes += len;
        res->adv_bytes += len;
    }
    return 1;
}

/* ---- message units (cfg.unit == RG_SEQ_UNIT_MSG) ----
 * A sequence whose numbers count messages (SCTP TSNs, packet numbers), not
 * bytes: every insert is one unit carrying a message of any length (or no
 * unit at all).  The unit numbers are tracked exactly as the bytes of an
 * offsets-only byte sequence (duplicates, holes, the window and ACK-driven
 * gap skipping, all counted in units, never in bytes); the messages are
 * copied aside until assembled, so nothing is borrowed.
 *   rg_seq_minsert     unit `unit` with the message data[0, len) if take is
 *                      non-zero; take == 0 inserts nothing but still applies
 *                      the window's left edge (an acknowledgment).  With
 *                      RG_SEQ_EARLY in mflags a new unit's message needs no
 *                      order (SCTP's unordered chunks): the next massemble
 *                      returns it first, whatever the holes before its unit,
 *                      and the unit itself is recorded without content (a
 *                      duplicate of it is not delivered again).  A unit
 *                      seen before is a duplicate and is delivered once
 *                      (REXMIT; CONFLICT when a buffered copy differs,
 *                      cfg.policy choosing the copy kept).  Caps: max_blocks
 *                      buffered messages and max_bytes buffered message
 *                      bytes; a message past either is dropped whole
 *                      (BUFFER_FULL) and its unit stays a hole.
 *   rg_seq_massemble   the early messages since the last call, in arrival
 *                      order, then the messages of the contiguous units at
 *                      next (after skipping a hole when the window armed
 *                      it), whole and concatenated in unit order, as one view
 *                      valid until the next massemble or free; next moves
 *                      past them.
 *                      Empty (never NULL) without buffer_data.
 * The res byte counters count message bytes (new, dup, dropped, delivered);
 * gap_bytes counts the skipped units.  rg_seq_next, rg_seq_pending,
 * rg_seq_ready_upto, rg_seq_empty and rg_seq_free work in units; the byte
 * calls (rg_seq_insert, rg_seq_assemble, rg_seq_fast) must not be used. */
#define RG_SEQ_EARLY 1u /* rg_seq_minsert: deliver the message at the next massemble */
uint32_t rg_seq_minsert(rg_seq *s, const rg_seq_cfg *cfg, uint32_t unit, const uint8_t *data,
                        uint32_t len, uint32_t take, unsigned mflags, const rg_seq_win *win,
                        rg_seq_res *res);
rg_bytes rg_seq_massemble(rg_seq *s, const rg_seq_cfg *cfg, rg_seq_res *res);
/* Messages buffered (not yet assembled). */
uint32_t rg_seq_mcount(const rg_seq *s);

/* ---- statistics ---- */
/* Stores are created under the calling thread's bound accountant and
 * credit it back when freed, whoever frees them.  A stack context owns one
 * and binds it at each of its entry points (generated code), so contexts and
 * their worker threads share no counter; rg_seq_heap_bind returns the
 * previous binding, rg_seq_heap_unbind(h) drops the binding if it is h (a
 * context going away) and frees h's pool.  Only the bound accountant pools
 * what is freed (a store freed under another goes back to the C heap), so a
 * pool is only ever touched by the thread running its context.  Unbound, a
 * per-thread default accountant is used (it pools nothing).
 * rg_seq_heap_stats / rg_seq_heap_reset_peak: the bound (or default)
 * accountant's counters now and at the peak since the last reset. */
extern _Thread_local rg_seq_heap *rg_seq__heap_bound;
RG_INLINE rg_seq_heap *rg_seq_heap_bind(rg_seq_heap *h)
{
    rg_seq_heap *old = rg_seq__heap_bound;
    rg_seq__heap_bound = h; /* per packet: one thread-local store */
    return old;
}
void rg_seq_heap_unbind(rg_seq_heap *h);
rg_seq_heap rg_seq_heap_stats(void);
void rg_seq_heap_reset_peak(void);

RG_INLINE void rg_seq_stats_add(rg_seq_stats *st, const rg_seq_res *r)
{
    st->rexmit += !!(r->flags & RG_SEQ_EV_REXMIT);
    st->overlap += !!(r->flags & RG_SEQ_EV_OVERLAP);
    st->out_of_window += !!(r->flags & RG_SEQ_EV_OUT_OF_WINDOW);
    st->buffer_full += !!(r->flags & RG_SEQ_EV_BUFFER_FULL);
    st->conflict += !!(r->flags & RG_SEQ_EV_CONFLICT);
    st->bytes_new += r->new_bytes;
    st->bytes_dup += r->dup_bytes;
    st->bytes_dropped += (uint64_t)r->oow_bytes + r->cap_bytes;
    st->bytes_skipped += r->gap_bytes;
    st->bytes_delivered += r->adv_bytes;
}

#ifdef __cplusplus
}
#endif
#endif /* RG_SEQ_H */
