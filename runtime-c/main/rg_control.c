/* rg_control.c - the control socket (--control PATH, see rg_nfchain.h).
 *
 * Protocol (rubikgen ctl): one request per connection, one line of
 * tab-separated fields, then the reply and the connection closes:
 *     attach \t NF \t NAME-or-empty [\t KEY=VALUE]...
 *     detach \t NAME
 *     list
 *     rules \t info | rules \t load \t SO   (rg_rules_ctl.h)
 *     stats [\t json|prometheus] | flows \t LAYER \t FILTER \t LIMIT   (rg_live.h)
 *     trace \t N [\t TIMEOUT]   (rg_trace_ctl.c: a build with -DRG_TRACE)
 * The reply is "ok\n" followed by text (list: "NAME\tSOURCE" lines), or
 * "error: MESSAGE\n".  Only the process's user, root or --control-group may connect, a
 * request is bounded (RG_CTLREQ_MAX bytes, RG_CTLREQ_FIELDS fields), and what attach and
 * rules load name is checked before it is loaded (rg_ctlsec.h).  The thread only moves bytes: the
 * chain changes on the packet loop's thread, between two packets, so the chain needs no lock.
 *
 * --workers N: every worker has its own chain and applies every request to it between two of
 * its packets (rg_control_poll_worker: an atomic load when none is pending); the reply goes
 * when the last worker has applied it (worker 0's reply, or the first error). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rg_ctlsec.h"
#include "rg_live.h"
#include "rg_nfchain.h"
#include "rg_out.h"
#include "rg_rules_ctl.h"

enum { REQ_MAX = RG_CTLREQ_MAX, REPLY_MAX = 8192 };

struct rg_control {
    struct sockaddr_un addr;
    int lfd;
    pthread_t th;
    int th_ok;
    atomic_int pending;   /* a request waits for the packet loop */
    _Atomic uint64_t gen; /* the pending request's number (1, 2, ...) */
    unsigned nw;          /* the workers that apply each request */
    unsigned acks;        /* the workers that applied it (under mu) */
    uint64_t *seen;       /* per worker: the last request it applied (its own) */
    atomic_int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done; /* the reply is ready (under mu) */
    char req[REQ_MAX];
    char reply[REPLY_MAX];
};

/* One request of fd into c->req (its line, without the newline); its length, -1 for a bad
 * client (dropped: silent, or nothing sent) or -2 for a line longer than RG_CTLREQ_MAX. */
static ssize_t read_request(rg_control *c, int fd)
{
    size_t n = 0;
    char *nl = NULL;
    while (!nl) {
        if (n == sizeof c->req) return -2;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0) return -1; /* a silent client does not hold the socket */
        ssize_t k = read(fd, c->req + n, sizeof c->req - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        nl = memchr(c->req + n, '\n', (size_t)k);
        n += (size_t)k;
    }
    if (nl) n = (size_t)(nl - c->req); /* one request per connection: the rest is ignored */
    if (n >= sizeof c->req) return -2;
    c->req[n] = 0;
    return n || nl ? (ssize_t)n : -1;
}

/* Is f an NF's shared object rather than a stock NF's name? (rg_nfchain.c's rule) */
static int names_so(const char *f)
{
    size_t n = strlen(f);
    return strchr(f, '/') || (n > 3 && !strcmp(f + n - 3, ".so"));
}

/* Check request c->req (n bytes) before the packet loop sees it: parsed, and the .so an
 * attach or rules load names resolved (rg_so_resolve) and trusted (rg_so_trusted) before
 * anything dlopens it; c->req is rewritten with the resolved path.  0, or -1 (reply). */
static int screen(rg_control *c, size_t n, char *reply, size_t size)
{
    char copy[RG_CTLREQ_MAX], err[4096];
    rg_ctlreq r;
    memcpy(copy, c->req, n + 1);
    if (rg_ctlreq_parse(copy, n, &r, err, sizeof err)) {
        snprintf(reply, size, "error: %s\n", err);
        return -1;
    }
    unsigned at = !strcmp(r.f[0], "attach") && names_so(r.f[1]) ? 1
                  : !strcmp(r.f[0], "rules") && r.n == 3        ? 2
                                                                : 0;
    if (!strcmp(r.f[0], "reopen")) { /* the outputs are the driver's, not a context's */
        int k = rg_out_reopen_all(err, sizeof err);
        if (k < 0)
            snprintf(reply, size, "error: %.4000s\n", err);
        else
            snprintf(reply, size, "ok\nreopened %d files\n", k);
        return -1; /* answered here */
    }
    if (!at) return 0;
    char path[4096];
    if (rg_so_resolve(NULL, r.f[at], path, sizeof path, err, sizeof err) ||
        rg_so_trusted(path, at == 2 ? 'r' : 'n', err, sizeof err)) {
        fprintf(stderr, "control: refused to load %s: %s\n", r.f[at], err);
        snprintf(reply, size, "error: refused: %.4000s\n", err);
        return -1;
    }
    r.f[at] = path;
    size_t w = 0;
    for (unsigned i = 0; i < r.n; i++) {
        int k = snprintf(c->req + w, sizeof c->req - w, "%s%s", i ? "\t" : "", r.f[i]);
        if (k < 0 || (size_t)k >= sizeof c->req - w) {
            snprintf(reply, size, "error: the request is too long\n");
            return -1;
        }
        w += (size_t)k;
    }
    return 0;
}

static void write_all(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

/* Read and drop what a client sent past the bound (up to its newline, a pause or 1 MiB):
 * a reply over unread bytes reaches it as a connection reset, not as the reason. */
static void drain(int fd)
{
    char buf[4096];
    for (size_t total = 0; total < (1u << 20);) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0) return;
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0 || memchr(buf, '\n', (size_t)k)) return;
        total += (size_t)k;
    }
}

/* Refuse a peer the socket is not for (rg_ctlsec_peer_ok), with the reason on stderr. */
static int peer_refused(int fd)
{
    char why[256];
    if (rg_ctlsec_peer_ok(fd, why, sizeof why)) return 0;
    fprintf(stderr, "control: refused a connection: %s\n", why);
    write_all(fd, "error: permission denied\n");
    return 1;
}

static void *serve(void *arg)
{
    rg_control *c = arg;
    while (!atomic_load(&c->stop)) {
        struct pollfd p = {c->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept(c->lfd, NULL, NULL);
        if (fd < 0) continue;
        ssize_t n = read_request(c, fd); /* read first: a reply over unread bytes is a reset */
        if (n != -1 && peer_refused(fd)) n = -1;
        if (n == -2) {
            drain(fd);
            write_all(fd, "error: the request is too long\n");
        }
        if (n >= 0 && rg_live_handles(c->req)) { /* stats, flows: rg_live.c gathers them */
            rg_live_control(rg_live_current(), c->req, (size_t)n, fd);
        } else if (n >= 0 && !screen(c, (size_t)n, c->reply, sizeof c->reply)) {
            pthread_mutex_lock(&c->mu);
            c->done = 0;
            c->acks = 0;
            atomic_fetch_add(&c->gen, 1);
            atomic_store(&c->pending, 1);
            while (!c->done && !atomic_load(&c->stop))
                pthread_cond_wait(&c->cv, &c->mu);
            if (!c->done) snprintf(c->reply, sizeof c->reply, "error: the run is ending\n");
            pthread_mutex_unlock(&c->mu);
            write_all(fd, c->reply);
        } else if (n >= 0) {
            write_all(fd, c->reply); /* screen's refusal, or its own answer (reopen) */
        }
        close(fd);
    }
    return NULL;
}

rg_control *rg_control_open(const char *path, char *err, size_t errlen)
{
    return rg_control_open_workers(path, 1, err, errlen);
}

rg_control *rg_control_open_workers(const char *path, unsigned nw, char *err, size_t errlen)
{
    rg_control *c = calloc(1, sizeof *c);
    if (c) c->seen = calloc(nw ? nw : 1, sizeof *c->seen);
    if (!c || !c->seen) {
        if (c) free(c);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->nw = nw ? nw : 1;
    c->lfd = -1;
    if (strlen(path) >= sizeof c->addr.sun_path) {
        snprintf(err, errlen, "the socket path is too long (%zu bytes at most)",
                 sizeof c->addr.sun_path - 1);
        free(c);
        return NULL;
    }
    c->addr.sun_family = AF_UNIX;
    memcpy(c->addr.sun_path, path, strlen(path) + 1);
    c->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    int bound = c->lfd >= 0 && !bind(c->lfd, (struct sockaddr *)&c->addr, sizeof c->addr);
    if (bound && rg_ctlsec_socket(path, err, errlen)) { /* its mode before anyone can connect */
        close(c->lfd);
        unlink(path);
        free(c->seen);
        free(c);
        return NULL;
    }
    if (!bound || listen(c->lfd, 8)) {
        snprintf(err, errlen, "%s%s", strerror(errno),
                 errno == EADDRINUSE ? " (a socket left by a run that did not end? remove it)"
                                     : "");
        if (c->lfd >= 0) close(c->lfd);
        free(c->seen);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (pthread_create(&c->th, NULL, serve, c)) {
        snprintf(err, errlen, "cannot start its thread");
        rg_control_close(c);
        return NULL;
    }
    c->th_ok = 1;
    return c;
}

/* Apply request req (split in place) to ch and the rule sets of the context whose
 * counters are st (NULL: every context), the reply into reply[REPLY_MAX]. */
static void apply(char *req, char *reply, rg_chain *ch, const struct rg_stats *st)
{
    rg_ctlreq r;
    char err[2048];
    if (rg_ctlreq_parse(req, strlen(req), &r, err, sizeof err)) { /* screened: not expected */
        snprintf(reply, REPLY_MAX, "error: %s\n", err);
        return;
    }
    char **f = r.f;
    unsigned n = r.n;
    if (!strcmp(f[0], "rules")) { /* rule sets (rg_rules_load.c): this context's only */
        rg_rules_control(f, n, reply, REPLY_MAX, st);
        size_t k = strlen(reply);
        if (n == 2 && !strncmp(reply, "ok\n", 3)) { /* where rubikgen ctl compiles a new set */
            char dirs[4096];
            rg_so_trusted_dirs('r', dirs, sizeof dirs);
            snprintf(reply + k, REPLY_MAX - k, "rules_path\t%s\n", dirs);
        }
    } else if (!strcmp(f[0], "list")) {
        int k = snprintf(reply, REPLY_MAX, "ok\n");
        rg_chain_list(ch, reply + k, REPLY_MAX - (size_t)k);
    } else if (!strcmp(f[0], "detach")) {
        if (rg_chain_detach(ch, f[1], err, sizeof err))
            snprintf(reply, REPLY_MAX, "error: %s\n", err);
        else
            snprintf(reply, REPLY_MAX, "ok\ndetached %s\n", f[1]);
    } else { /* attach: its KEY=VALUE checked by the parser */
        rg_nf_kv kv[RG_CTLREQ_FIELDS];
        unsigned m = 0;
        for (unsigned i = 3; i < n; i++) {
            char *eq = strchr(f[i], '=');
            *eq = 0;
            kv[m++] = (rg_nf_kv){f[i], eq + 1};
        }
        if (rg_chain_attach(ch, f[1], f[2][0] ? f[2] : NULL, kv, m, err, sizeof err))
            snprintf(reply, REPLY_MAX, "error: %s\n", err);
        else
            snprintf(reply, REPLY_MAX, "ok\nattached %s\n", f[1]);
    }
}

void rg_control_poll(rg_control *c, rg_chain *ch)
{
    rg_control_poll_worker(c, ch, 0, NULL);
}

void rg_control_poll_worker(rg_control *c, rg_chain *ch, unsigned worker, const struct rg_stats *st)
{
    if (!atomic_load_explicit(&c->pending, memory_order_acquire)) return;
    uint64_t gen = atomic_load_explicit(&c->gen, memory_order_acquire);
    if (c->seen[worker] == gen) return; /* applied: the others have not yet */
    c->seen[worker] = gen;
    /* the request is not written while it is pending: each worker splits its own copy */
    char req[REQ_MAX], reply[REPLY_MAX];
    memcpy(req, c->req, sizeof req);
    apply(req, reply, ch, st);
    pthread_mutex_lock(&c->mu);
    if (c->acks == 0 || (!strncmp(reply, "error", 5) && strncmp(c->reply, "error", 5))) {
        if (c->nw > 1 && c->acks && !strncmp(reply, "error", 5))
            snprintf(c->reply, sizeof c->reply, "error: worker %u: %.8000s", worker, reply + 7);
        else
            memcpy(c->reply, reply, sizeof reply);
    }
    if (++c->acks == c->nw) {
        c->done = 1;
        atomic_store(&c->pending, 0);
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
}

void rg_control_close(rg_control *c)
{
    if (!c) return;
    atomic_store(&c->stop, 1);
    if (c->th_ok) {
        pthread_mutex_lock(&c->mu);
        pthread_cond_signal(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    if (c->lfd >= 0) {
        close(c->lfd);
        unlink(c->addr.sun_path);
    }
    free(c->seen);
    free(c);
}
