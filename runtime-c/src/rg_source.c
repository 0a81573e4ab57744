/* rg_source.c - the registry of packet sources (see rg_source.h).  A new
 * source adds its name to RG_SOURCES, one word. */
#include "rg/rg_source.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sources in archives of their own (DPDK: build/librgdpdk.a, AF_XDP:
 * build/librgafxdp.a), linked only into binaries built with --io dpdk or --io afxdp
 * (with -u rg_source_NAME): elsewhere these weak references are NULL. */
#define RG_SOURCES_LINKED(X) X(afxdp) X(dpdk)
#define RG_SOURCE_WEAK(n)    extern const rg_source_ops rg_source_##n __attribute__((weak));
RG_SOURCES_LINKED(RG_SOURCE_WEAK)

/* The sources, in --help order (the first is the default): each a file
 * src/rg_source_NAME.c defining `const rg_source_ops rg_source_NAME`, which the
 * Makefile compiles; a new one is one entry here. */
#define RG_SOURCES(X) X(file) X(live) X(cmd) X(packet)

#define RG_SOURCE_DECLARE(n) extern const rg_source_ops rg_source_##n;
#define RG_SOURCE_ENTRY(n)   &rg_source_##n,
RG_SOURCES(RG_SOURCE_DECLARE)

/* every source, those not linked NULL */
static const rg_source_ops *const every[] = {RG_SOURCES(RG_SOURCE_ENTRY)
                                                 RG_SOURCES_LINKED(RG_SOURCE_ENTRY)};
#define RG_NSOURCES (sizeof every / sizeof every[0])

/* the linked ones, in order, NULL-terminated: filled before main (rg_sources_init) */
const rg_source_ops *rg_sources[RG_NSOURCES + 1];

__attribute__((constructor)) static void rg_sources_init(void)
{
    size_t k = 0;
    for (size_t i = 0; i < RG_NSOURCES; i++)
        if (every[i]) rg_sources[k++] = every[i];
    rg_sources[k] = NULL;
}

/* The sources in archives of their own, linked on request: what --io says when one is
 * missing. */
static const struct {
    const char *name, *how, *args_what;
    unsigned caps;
} optional[] = {
    {"dpdk", "this binary has no DPDK source (build it with rubikgen build --io dpdk)",
     "DPDK's EAL arguments",
     RG_SRC_CAP_INLINE | RG_SRC_CAP_QUEUES | RG_SRC_CAP_ARRIVAL_TS | RG_SRC_CAP_ARGS},
    {"afxdp", "this binary has no AF_XDP source (build it with rubikgen build --io afxdp)", NULL,
     RG_SRC_CAP_QUEUES | RG_SRC_CAP_ARRIVAL_TS},
};

void rg_source_names_with(unsigned cap, char *buf, size_t n)
{
    const char *names[16];
    size_t k = 0;
    for (const rg_source_ops *const *s = rg_sources; *s && k < 16; s++)
        if ((*s)->caps & cap) names[k++] = (*s)->name;
    for (size_t i = 0; i < sizeof optional / sizeof optional[0] && k < 16; i++)
        if ((optional[i].caps & cap) && !rg_source_find(optional[i].name))
            names[k++] = optional[i].name;
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < k && used < n; i++) {
        const char *sep = i == 0 ? "" : i + 1 == k ? " or " : ", ";
        int w = snprintf(buf + used, n - used, "%s%s", sep, names[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

const char *rg_source_args_owner(const char **what)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        if ((*s)->caps & RG_SRC_CAP_ARGS) {
            *what = (*s)->args_what;
            return (*s)->name;
        }
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        if (optional[i].args_what) {
            *what = optional[i].args_what;
            return optional[i].name;
        }
    return NULL;
}

const char *rg_source_absent(const char *name)
{
    if (rg_source_find(name)) return NULL;
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; i++)
        if (!strcmp(optional[i].name, name)) return optional[i].how;
    return NULL;
}

const char *rg_source_opt_get(const rg_source_cfg *cfg, const char *name, const char *dflt)
{
    const char *v = dflt;
    for (unsigned i = 0; cfg->kv && i < cfg->nkv; i++)
        if (!strcmp(cfg->kv[i].name, name)) v = cfg->kv[i].value;
    return v;
}

const rg_source_ops *rg_source_find(const char *name)
{
    for (const rg_source_ops *const *s = rg_sources; *s; s++)
        if (!strcmp((*s)->name, name)) return *s;
    return NULL;
}

/* A worker's thread (rg_source_thread_start): fn(arg). */
typedef struct thread_arg {
    int (*fn)(void *);
    void *arg;
} thread_arg;

static void *thread_main(void *a)
{
    thread_arg ta = *(thread_arg *)a;
    free(a);
    (void)ta.fn(ta.arg);
    return NULL;
}

int rg_source_thread_start(pthread_t *th, int *started, int (*fn)(void *), void *arg,
                           const char *who, unsigned i, char *err, size_t errlen)
{
    thread_arg *ta = malloc(sizeof *ta);
    if (ta) *ta = (thread_arg){fn, arg};
    if (!ta || pthread_create(th, NULL, thread_main, ta)) {
        free(ta);
        snprintf(err, errlen, "%s: cannot start worker %u", who, i);
        return -1;
    }
    *started = 1;
    return 0;
}

void rg_source_thread_join(pthread_t *th, int *started)
{
    if (*started) pthread_join(*th, NULL);
    *started = 0;
}

int rg_source_poll(int fd, int ms, const char *who, char *err, size_t errlen)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = poll(&pfd, 1, ms);
    if (pr < 0 && errno != EINTR) {
        snprintf(err, errlen, "%s: poll: %s", who, strerror(errno));
        return -1;
    }
    if (pr > 0 && (pfd.revents & POLLERR)) {
        snprintf(err, errlen, "%s: the socket reports an error (is the interface down?)", who);
        return -1;
    }
    return pr > 0;
}
