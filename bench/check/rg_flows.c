/* rg_flows.c - the correctness side of the benchmark: what a generated stack
 * delivers and how its flows end, per layer.
 *
 * Built by bench/run.py (`make -C bench flows STACK=S STACK_DIR=DIR`) against
 * one generated stack (DIR/S_gen.c, DIR/S_handlers.c; -DRG_STACK_DESC=S_desc)
 * into DIR/S-flows.  `DIR/S-flows CAPTURE` feeds the capture exactly as the
 * driver's --bench mode does (whole capture in memory, idle expiry on packet
 * time once per second of it, the same entry layer per link type, a final
 * flush) with an observer that counts, per layer with instances, the
 * instances opened, how each one ended (accept = its PSM reached an accept
 * state, i.e. for TCP a FIN/ACK close or a RST; evicted; expired; flushed at
 * the end of the capture), how many were complete, and the bytes of the
 * "data" arguments of the layer's handler calls.  One JSON line:
 *
 *   {"stack","pkts","calls","payload_bytes","errors","skipped",
 *    "layers":{"tcp":{"opened","accept","evicted","expired","flushed",
 *                     "complete","payload_bytes"}, ...}}
 *
 * The --bench output only has totals over every layer (an IPv4 datagram is an
 * instance too, and the flush closes whatever is left), so it cannot tell a
 * TCP connection that closed from one that was flushed. */
#include <inttypes.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rg/rg_api.h"
#include "rg/rg_pcap.h"

#ifndef RG_STACK_DESC
#error "compile with -DRG_STACK_DESC=<stack>_desc"
#endif
extern const rg_stack_desc RG_STACK_DESC;

#define NS_PER_S UINT64_C(1000000000)

typedef struct layer_counts {
    uint64_t opened, closed[4], complete, payload;
} layer_counts;

typedef struct checker {
    const rg_stack_desc *stack;
    layer_counts *layer;
    int *data_arg; /* per handler: index of its "data" bytes argument, or -1 */
    uint64_t calls, payload;
} checker;

static void on_call(void *self, const rg_call *c)
{
    checker *k = self;
    k->calls++;
    int a = k->data_arg[c->handler];
    if (a >= 0 && c->args[a].kind == RG_VAL_BYTES) {
        k->payload += c->args[a].bytes.len;
        k->layer[c->layer].payload += c->args[a].bytes.len;
    }
}

static void on_open(void *self, const rg_flow_info *f, uint64_t ts_ns)
{
    (void)ts_ns;
    ((checker *)self)->layer[f->layer].opened++;
}

static void on_close(void *self, const rg_flow_info *f, int reason, int complete, uint64_t ts_ns)
{
    (void)ts_ns;
    layer_counts *l = &((checker *)self)->layer[f->layer];
    if (reason >= 0 && reason < 4) l->closed[reason]++;
    if (complete) l->complete++;
}

/* The driver's choice of entry layer (rg_driver.c entry_map_init / entry_pick). */
typedef struct entry_map {
    int fixed;
    int16_t v4, v6;
} entry_map;

static int entry_init(entry_map *m, const rg_stack_desc *s, const rg_linkinfo *li)
{
    int kind = -1;
    m->fixed = -1;
    m->v4 = m->v6 = -1;
    switch (li->dlt) {
    case DLT_EN10MB:
        kind = RG_LINK_ETHERNET;
        break;
    case DLT_NULL:
    case DLT_LOOP:
        kind = RG_LINK_NULL;
        break;
    case DLT_LINUX_SLL:
        kind = RG_LINK_SLL;
        break;
    case DLT_LINUX_SLL2:
        kind = RG_LINK_SLL2;
        break;
    default:
        if (li->entry == RG_ENTRY_IP || li->entry == RG_ENTRY_IPV4)
            m->v4 = s->entry[RG_LINK_RAW_IPV4];
        if (li->entry == RG_ENTRY_IP || li->entry == RG_ENTRY_IPV6)
            m->v6 = s->entry[RG_LINK_RAW_IPV6];
    }
    if (kind >= 0) m->fixed = s->entry[kind];
    return m->fixed >= 0 || m->v4 >= 0 || m->v6 >= 0 ? 0 : -1;
}

static int entry_pick(const entry_map *m, const rg_linkinfo *li, const rg_frame *f, unsigned *layer,
                      uint32_t *off)
{
    if (m->fixed >= 0) {
        *layer = (unsigned)m->fixed;
        *off = 0;
        return 1;
    }
    rg_netpos np;
    if (rg_link_locate(li, f->data, f->caplen, &np)) return 0;
    int e = np.proto == RG_ENTRY_IPV4 ? m->v4 : np.proto == RG_ENTRY_IPV6 ? m->v6 : -1;
    if (e < 0 || np.off > f->caplen) return 0;
    *layer = (unsigned)e;
    *off = np.off;
    return 1;
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    }
    putchar('"');
}

int main(int argc, char **argv)
{
    const rg_stack_desc *s = &RG_STACK_DESC;
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s CAPTURE\nPer-layer flow and payload counts of stack %s.\n",
                argv[0], s->name);
        return 2;
    }
    char err[512];
    rg_capture cap;
    if (rg_capture_load(argv[1], &cap, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    entry_map em;
    if (entry_init(&em, s, &cap.link)) {
        fprintf(stderr, "%s: stack %s has no entry for link type %d\n", argv[0], s->name,
                cap.link.dlt);
        rg_capture_free(&cap);
        return 1;
    }
    checker k = {s, calloc(s->nlayers, sizeof(layer_counts)),
                 calloc(s->nhandlers ? s->nhandlers : 1, sizeof(int)), 0, 0};
    if (!k.layer || !k.data_arg) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    for (unsigned h = 0; h < s->nhandlers; h++) {
        k.data_arg[h] = -1;
        for (unsigned a = 0; a < s->handlers[h].nargs; a++)
            if (s->handlers[h].arg_kinds[a] == RG_VAL_BYTES &&
                !strcmp(s->handlers[h].arg_names[a], "data")) {
                k.data_arg[h] = (int)a;
                break;
            }
    }
    rg_obs obs = {&k, on_call, on_open, NULL, on_close, NULL, NULL};
    rg_ctx_cfg cfg = {0, 1, &obs, 0, NULL, 0};
    void *ctx = s->ctx_new(&cfg);
    if (!ctx) {
        fprintf(stderr, "%s: cannot create the stack context\n", argv[0]);
        return 1;
    }
    uint64_t next_expire = 0, skipped = 0;
    int expire_on = 0;
    for (size_t i = 0; i < cap.count; i++) {
        const rg_frame *f = &cap.frames[i];
        if (f->ts_ns >= next_expire) {
            if (expire_on) s->expire(ctx, f->ts_ns);
            expire_on = 1;
            next_expire = f->ts_ns + NS_PER_S;
        }
        unsigned layer;
        uint32_t off;
        if (!entry_pick(&em, &cap.link, f, &layer, &off)) {
            skipped++;
            continue;
        }
        (void)s->process(ctx, layer, f->data + off, f->caplen - off, f->ts_ns);
    }
    s->flush(ctx);
    const rg_stats *st = s->stats ? s->stats(ctx) : NULL;
    uint64_t errors = st ? rg_stats_total_errors(st) : 0;

    printf("{\"stack\":");
    json_str(s->name);
    printf(",\"pkts\":%zu,\"calls\":%" PRIu64 ",\"payload_bytes\":%" PRIu64 ",\"errors\":%" PRIu64
           ",\"skipped\":%" PRIu64 ",\"layers\":{",
           cap.count, k.calls, k.payload, errors, skipped);
    int first = 1;
    for (unsigned l = 0; l < s->nlayers; l++) {
        if (!s->layers[l].has_instance) continue;
        const layer_counts *c = &k.layer[l];
        printf("%s", first ? "" : ",");
        first = 0;
        json_str(s->layers[l].name);
        printf(":{\"protocol\":");
        json_str(s->layers[l].protocol);
        printf(",\"opened\":%" PRIu64 ",\"accept\":%" PRIu64 ",\"evicted\":%" PRIu64
               ",\"expired\":%" PRIu64 ",\"flushed\":%" PRIu64 ",\"complete\":%" PRIu64
               ",\"payload_bytes\":%" PRIu64 "}",
               c->opened, c->closed[RG_CLOSE_ACCEPT], c->closed[RG_CLOSE_EVICTED],
               c->closed[RG_CLOSE_EXPIRED], c->closed[RG_CLOSE_FLUSHED], c->complete, c->payload);
    }
    printf("}}\n");
    s->ctx_free(ctx);
    free(k.layer);
    free(k.data_arg);
    rg_capture_free(&cap);
    return 0;
}
