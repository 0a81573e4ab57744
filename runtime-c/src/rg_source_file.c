/* rg_source_file.c - the capture-file packet source: pcap and pcapng files
 * (or stdin) read with rg_pcap, in bursts.
 *
 * rg_pcap_next's frame is valid only until its next call, so a burst of more
 * than one frame copies each frame's bytes into the source's arena (8-byte
 * aligned, as rg_capture_load lays them out); the arena is reused by the next
 * burst, which is what rg_source.h promises. */
#include "rg/rg_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct file_source {
    rg_source base;
    rg_pcap *cap;
    rg_source_stats st;
    uint8_t *arena; /* this burst's frame bytes */
    size_t arena_cap;
    int state;     /* 0 = reading; RG_SRC_END or RG_SRC_ERROR: what the next burst returns */
    char err[256]; /* the source's own error (out of memory); else rg_pcap's */
} file_source;

static rg_source *file_open(const rg_source_cfg *cfg, char *err, size_t errlen)
{
    if (cfg->filter) {
        snprintf(err, errlen, "%s: the file source takes no filter", cfg->name);
        return NULL;
    }
    file_source *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cap = rg_pcap_open(cfg->name, err, errlen);
    if (!s->cap) {
        free(s);
        return NULL;
    }
    s->base.ops = &rg_source_file;
    return &s->base;
}

/* Room for need more bytes at used; 0 or RG_ENOMEM. */
static int arena_reserve(file_source *s, size_t used, size_t need)
{
    if (s->arena && need <= s->arena_cap - used) return RG_OK;
    size_t cap = s->arena_cap ? s->arena_cap : 65536;
    while (cap - used < need) {
        if (cap > SIZE_MAX / 2) return RG_ENOMEM;
        cap *= 2;
    }
    uint8_t *a = realloc(s->arena, cap);
    if (!a) return RG_ENOMEM;
    s->arena = a;
    s->arena_cap = cap;
    return RG_OK;
}

static int file_next_burst(rg_source *src, rg_frame *out, unsigned max)
{
    file_source *s = (file_source *)src;
    if (s->state) return s->state;
    size_t off[RG_BURST_MAX]; /* where each copied frame's bytes start (the arena may move) */
    if (max > RG_BURST_MAX) max = RG_BURST_MAX;
    unsigned n = 0;
    size_t used = 0;
    while (n < max) {
        /* paced input: hand over what arrived rather than wait for a whole burst */
        if (n && !rg_pcap_ready(s->cap)) break;
        int rc = rg_pcap_next(s->cap, &out[n]);
        if (rc != 1) {
            s->state = rc == 0 ? RG_SRC_END : RG_SRC_ERROR;
            break;
        }
        s->st.frames++;
        s->st.bytes += out[n].caplen;
        if (max > 1) { /* one frame alone stays in rg_pcap's buffer */
            size_t len = ((size_t)out[n].caplen + 7) & ~(size_t)7;
            if (arena_reserve(s, used, len)) {
                snprintf(s->err, sizeof s->err, "out of memory (a burst of frames)");
                s->state = RG_SRC_ERROR;
                break;
            }
            memcpy(s->arena + used, out[n].data, out[n].caplen);
            off[n] = used;
            used += len;
        }
        n++;
    }
    if (max > 1)
        for (unsigned i = 0; i < n; i++)
            out[i].data = s->arena + off[i];
    return n ? (int)n : s->state;
}

static const rg_linkinfo *file_link(const rg_source *src)
{
    return rg_pcap_link(((const file_source *)src)->cap);
}

static void file_stats(const rg_source *src, rg_source_stats *st)
{
    *st = ((const file_source *)src)->st;
}

static const char *file_error(const rg_source *src)
{
    const file_source *s = (const file_source *)src;
    return s->err[0] ? s->err : rg_pcap_error(s->cap);
}

static void file_close(rg_source *src)
{
    file_source *s = (file_source *)src;
    if (!s) return;
    rg_pcap_close(s->cap);
    free(s->arena);
    free(s);
}

const rg_source_ops rg_source_file = {
    .name = "file",
    .help = "a pcap or pcapng capture file (CAPTURE '-' = stdin)",
    .caps = RG_SRC_CAP_BENCH,
    .open = file_open,
    .next_burst = file_next_burst,
    .link = file_link,
    .stats = file_stats,
    .error = file_error,
    .close = file_close,
};
