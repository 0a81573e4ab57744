/* life_handlers.c - handlers of the test stack life.yaml (tests/e2e/test_e2e_lifecycle.py).
 *
 * The data handlers count each direction's payload bytes in per-flow user data
 * (h->user, allocated on the first byte); the `destroyed` handlers log those
 * counts and free the user data, as a real handler frees what it allocated.
 * Under LeakSanitizer an instance that ended without its `destroyed` handler
 * would leak.  Every lifecycle handler writes one line to $LIFE_LOG (if set):
 *   NAME LAYER UID END TS_NS KEY_HEX STATE [BYTES_C2S BYTES_S2C]
 * with END the close reason (rg_hctx.end) and KEY_HEX the instance's forward
 * key, read while the instance must still be valid. */
#include <stdio.h>
#include <stdlib.h>

#include "life_gen.h"

static FILE *log_file(void)
{
    static FILE *f;
    static int tried;
    if (!tried) {
        const char *path = getenv("LIFE_LOG");
        tried = 1;
        f = path ? fopen(path, "w") : NULL;
    }
    return f;
}

static const char *end_name(uint8_t end)
{
    static const char *const names[] = {"packet", "accept", "evicted", "expired", "flushed"};
    return end < sizeof names / sizeof names[0] ? names[end] : "?";
}

static void log_call(const char *name, const rg_hctx *h, unsigned state, int with_bytes)
{
    FILE *f = log_file();
    uint64_t bytes[2] = {0, 0};
    for (int d = 0; d < 2; d++)
        if (h->flow && h->flow->user[d]) bytes[d] = *(const uint64_t *)h->flow->user[d];
    if (!f) return;
    const rg_layer_desc *l = &life_desc.layers[h->layer];
    fprintf(f, "%s %s %llu %s %llu ", name, l->name,
            (unsigned long long)(h->flow ? h->flow->uid : 0), end_name(h->end),
            (unsigned long long)h->ts_ns);
    for (unsigned i = 0; h->flow && i < l->key_len; i++)
        fprintf(f, "%02x", h->flow->key_a[i]);
    fprintf(f, " %u", state);
    if (with_bytes)
        fprintf(f, " %llu %llu", (unsigned long long)bytes[0], (unsigned long long)bytes[1]);
    fputc('\n', f);
    fflush(f);
}

static void count(rg_hctx *h, size_t n)
{
    if (!h->user) return;
    if (!*h->user) {
        *h->user = calloc(1, sizeof(uint64_t));
        if (!*h->user) return;
    }
    *(uint64_t *)*h->user += n;
}

/* the end of an instance: log, then free what the data handlers allocated */
static void end(const char *name, rg_hctx *h, unsigned state)
{
    log_call(name, h, state, 1);
    if (h->flow) {
        free(h->flow->user[0]);
        free(h->flow->user[1]);
    }
}

void tcp_data(const struct tcp_data_args *args, rg_hctx *h)
{
    count(h, args->data.len);
}

void tcp6_data(const struct tcp6_data_args *args, rg_hctx *h)
{
    count(h, args->data.len);
}

void tcp_timeout(const struct tcp_timeout_args *args, rg_hctx *h)
{
    log_call("tcp_timeout", h, args->state, 0);
}

void tcp_evicted(const struct tcp_evicted_args *args, rg_hctx *h)
{
    log_call("tcp_evicted", h, args->state, 0);
}

void tcp_end(const struct tcp_end_args *args, rg_hctx *h)
{
    end("tcp_end", h, args->state);
}

void tcp6_end(const struct tcp6_end_args *args, rg_hctx *h)
{
    end("tcp6_end", h, args->state);
}

void ip_timeout(const struct ip_timeout_args *args, rg_hctx *h)
{
    log_call("ip_timeout", h, args->state, 0);
}

void ip_lost(const struct ip_lost_args *args, rg_hctx *h)
{
    log_call("ip_lost", h, args->state, 0);
}

void ip6_timeout(const struct ip6_timeout_args *args, rg_hctx *h)
{
    log_call("ip6_timeout", h, args->state, 0);
}
