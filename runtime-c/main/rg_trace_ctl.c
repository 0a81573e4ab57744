/* rg_trace_ctl.c - `trace N [TIMEOUT]` on the control socket: arm the recorder (rg_trace.h),
 * wait for N packets or the timeout, and reply with one JSON line per traced packet, after a
 * first line saying how many were asked for and traced.  The request waits on the control
 * thread; the packet path only fills records.  `rubikgen ctl SOCK trace N` renders the lines
 * as text (cli/live.py) or passes them on (--format json). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rg/rg_api.h"
#include "rg/rg_seq.h"
#include "rg/rg_trace.h"
#include "rg_live.h"
#include "rg_nfchain.h"

static const char *reason_name(unsigned r)
{
    static const char *const names[] = {"truncated", "malformed", "unsupported", "no_instance",
                                        "cap",       "psm_fail",  "checksum",    "other"};
    return r < sizeof names / sizeof names[0] ? names[r] : "user";
}

static const char *verdict_name(int v)
{
    switch (v) {
    case RG_PASS:
        return "pass";
    case RG_BYPASS_FLOW:
        return "bypass_flow";
    case RG_DROP:
        return "drop";
    case RG_DROP_FLOW:
        return "drop_flow";
    default:
        return "unknown";
    }
}

/* A JSON string of a static text of the generated code (spec paths, names: no quotes, but
 * escaped all the same). */
static void str_json(rg_sbuf *b, const char *s)
{
    rg_sbuf_printf(b, "\"");
    for (; s && *s; s++) {
        if (*s == '"' || *s == '\\')
            rg_sbuf_printf(b, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            rg_sbuf_printf(b, "\\u%04x", (unsigned char)*s);
        else
            rg_sbuf_printf(b, "%c", *s);
    }
    rg_sbuf_printf(b, "\"");
}

static const char *state_name(const rg_layer_desc *l, uint32_t s)
{
    return l && l->has_psm && s < l->nstates ? l->states[s] : NULL;
}

static void state_json(rg_sbuf *b, const rg_layer_desc *l, uint32_t s)
{
    const char *n = state_name(l, s);
    if (n)
        str_json(b, n);
    else
        rg_sbuf_printf(b, "%" PRIu32, s);
}

/* The sequence insert's outcome, most telling first (rg_seq.h's flags). */
static const char *seq_action(uint32_t fl, uint32_t where)
{
    if (fl & RG_SEQ_EV_CONFLICT) return "overlap with different data";
    if (fl & RG_SEQ_EV_MEMCAP) return "memcap";
    if (fl & RG_SEQ_EV_BUFFER_FULL) return "buffer full";
    if (fl & RG_SEQ_EV_OUT_OF_WINDOW) return "out of window";
    if (fl & RG_SEQ_EV_REXMIT) return "retransmission";
    if (fl & RG_SEQ_EV_OVERLAP) return "overlap";
    return where == 0 ? "in order" : where == 1 ? "buffered" : "old";
}

static void step_json(rg_sbuf *b, const rg_stack_desc *stack, const rg_trace_pkt *r,
                      const rg_trace_step *s)
{
    const rg_layer_desc *l = s->layer < stack->nlayers ? &stack->layers[s->layer] : NULL;
    rg_sbuf_printf(b, "{\"layer\":");
    str_json(b, l ? l->name : "?");
    switch (s->kind) {
    case RG_TR_LAYER:
        rg_sbuf_printf(b, ",\"step\":\"layer\",\"protocol\":");
        str_json(b, l ? l->protocol : "?");
        if (s->a == UINT32_MAX)
            rg_sbuf_printf(b, ",\"offset\":null");
        else
            rg_sbuf_printf(b, ",\"offset\":%" PRIu32, s->a);
        rg_sbuf_printf(b, ",\"length\":%" PRIu32, s->b);
        break;
    case RG_TR_PARSED:
        rg_sbuf_printf(b, ",\"step\":\"parsed\",\"ok\":%s", s->a ? "false" : "true");
        if (s->a) rg_sbuf_printf(b, ",\"error\":\"%s\"", reason_name(s->a - 1));
        break;
    case RG_TR_FOUND:
    case RG_TR_CREATED:
        rg_sbuf_printf(b, ",\"step\":\"instance\",\"action\":\"%s\",\"uid\":%" PRIu64 ",\"dir\":%u",
                       s->kind == RG_TR_FOUND ? "found" : "created", s->uid, s->dir);
        if (s->klen && l) {
            rg_sbuf_printf(b, ",");
            rg_key_json(b, l, r->keys + s->koff, r->keys + s->koff + s->klen);
        }
        break;
    case RG_TR_NOINST:
        rg_sbuf_printf(b, ",\"step\":\"instance\",\"action\":\"none\"");
        break;
    case RG_TR_PSM:
        rg_sbuf_printf(b, ",\"step\":\"psm\",\"from\":");
        state_json(b, l, s->a);
        rg_sbuf_printf(b, ",\"to\":");
        state_json(b, l, s->b);
        rg_sbuf_printf(b, ",\"transition\":");
        str_json(b, s->s);
        rg_sbuf_printf(b, ",\"spec\":");
        str_json(b, s->t);
        break;
    case RG_TR_FAIL:
        rg_sbuf_printf(b, ",\"step\":\"psm\",\"from\":");
        state_json(b, l, s->a);
        rg_sbuf_printf(b, ",\"to\":null,\"transition\":null,\"on_fail\":");
        str_json(b, s->s);
        break;
    case RG_TR_SEQ:
        rg_sbuf_printf(b,
                       ",\"step\":\"sequence\",\"dir\":%u,\"seq\":%" PRIu64 ",\"length\":%" PRIu64
                       ",\"action\":\"%s\"",
                       s->dir, s->uid >> 32, s->uid & 0xffffffffu, seq_action(s->a, s->b));
        break;
    case RG_TR_ASM:
        rg_sbuf_printf(b, ",\"step\":\"assemble\",\"bytes\":%" PRIu32 ",\"gaps\":%" PRIu32, s->a,
                       s->b);
        break;
    case RG_TR_EVENT:
        rg_sbuf_printf(b, ",\"step\":\"event\",\"event\":");
        str_json(b, s->s);
        break;
    case RG_TR_CALL:
        rg_sbuf_printf(b, ",\"step\":\"handler\",\"handler\":");
        str_json(b, s->a < stack->nhandlers ? stack->handlers[s->a].name : "?");
        break;
    case RG_TR_DESTROY:
        rg_sbuf_printf(b, ",\"step\":\"destroy\"");
        break;
    default:
        rg_sbuf_printf(b, ",\"step\":\"note\",\"note\":");
        str_json(b, s->s);
        break;
    }
    rg_sbuf_printf(b, "}");
}

static void packet_json(rg_sbuf *b, const rg_stack_desc *stack, unsigned k, const rg_trace_pkt *r)
{
    const unsigned entry = r->entry < stack->nlayers ? r->entry : 0;
    rg_sbuf_printf(b,
                   "{\"trace\":%u,\"worker\":%u,\"packet\":%" PRIu64 ",\"ts_ns\":%" PRIu64
                   ",\"caplen\":%" PRIu32 ",\"entry\":",
                   k, r->worker, r->pkt_no, r->ts_ns, r->caplen);
    str_json(b, stack->nlayers ? stack->layers[entry].name : "?");
    rg_sbuf_printf(b, ",\"layers\":[");
    unsigned nl = 0;
    for (uint32_t i = 0; i < r->nsteps; i++)
        if (r->step[i].kind == RG_TR_LAYER && r->step[i].layer < stack->nlayers) {
            rg_sbuf_printf(b, "%s", nl++ ? "," : "");
            str_json(b, stack->layers[r->step[i].layer].name);
        }
    rg_sbuf_printf(b, "],\"steps\":[");
    for (uint32_t i = 0; i < r->nsteps; i++) {
        if (i) rg_sbuf_printf(b, ",");
        step_json(b, stack, r, &r->step[i]);
    }
    rg_sbuf_printf(b, "],\"nfs\":[");
    unsigned nn = 0;
    for (const char *p = r->nfs; *p;) { /* "NAME\tSOURCE\n" lines: the names */
        const char *tab = strchr(p, '\t'), *nl2 = strchr(p, '\n');
        if (!tab || !nl2 || tab > nl2) break;
        char name[64];
        size_t len = (size_t)(tab - p) < sizeof name - 1 ? (size_t)(tab - p) : sizeof name - 1;
        memcpy(name, p, len);
        name[len] = 0;
        rg_sbuf_printf(b, "%s", nn++ ? "," : "");
        str_json(b, name);
        p = nl2 + 1;
    }
    rg_sbuf_printf(b, "],\"result\":\"%s\",\"verdict\":\"%s\",\"lost_steps\":%" PRIu32 "}\n",
                   r->rc == RG_PKT_ERROR     ? "error"
                   : r->rc == RG_PKT_DROPPED ? "dropped"
                                             : "ok",
                   verdict_name(r->verdict), r->lost);
}

unsigned rg_trace_chain_nfs(const void *chain, char *buf, size_t n)
{
    return rg_chain_list(chain, buf, n);
}

void rg_trace_request(const rg_stack_desc *stack, unsigned n, unsigned timeout_ms, int fd)
{
    static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
    if (!rg_trace_built) {
        rg_ctl_reply_error(fd, "this binary was built without packet tracing (rebuild it with "
                               "`rubikgen build --trace` or run it with `rubikgen run --trace`)");
        return;
    }
    if (pthread_mutex_trylock(&one)) {
        rg_ctl_reply_error(fd, "a trace is already running");
        return;
    }
    if (rg_trace_arm(n)) {
        pthread_mutex_unlock(&one);
        rg_ctl_reply_error(fd, "out of memory");
        return;
    }
    const rg_trace_pkt **got = calloc(n, sizeof *got);
    unsigned k = got ? rg_trace_collect(timeout_ms, got, n) : rg_trace_collect(0, NULL, 0);
    rg_sbuf b = {0};
    rg_sbuf_printf(&b,
                   "{\"asked\":%u,\"traced\":%u,\"timeout_s\":%u,\"timed_out\":%s,\"stack\":", n, k,
                   timeout_ms / 1000, k < n ? "true" : "false");
    str_json(&b, stack->name);
    rg_sbuf_printf(&b, "}\n");
    for (unsigned i = 0; i < k; i++)
        packet_json(&b, stack, i + 1, got[i]);
    pthread_mutex_unlock(&one);
    free(got);
    if (!got || b.oom) {
        rg_ctl_reply_error(fd, "out of memory");
    } else {
        rg_ctl_write_all(fd, "ok\n", 3);
        rg_ctl_write_all(fd, b.s, b.n);
    }
    free(b.s);
}
