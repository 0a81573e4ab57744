/* rg_out.c - the NFs' line outputs: shared files, whole records, rotation, reopen
 * (rg_out.h; docs/operating.md "Logs and rotation"). */
#define _GNU_SOURCE /* strdup, pthread, O_CLOEXEC */
#include "rg_out.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rg/rg_common.h"
#include "rg_nfchain.h" /* RG_WORKER_DIR */

/* One file, shared by every writer of its path. */
typedef struct ofile {
    struct ofile *next;
    char *path;
    int fd;
    unsigned refs;
    uint64_t size;      /* bytes in the current file (rotation by size) */
    time_t opened;      /* when the current file was started (rotation by time) */
    unsigned gen;       /* the reopen generation it was opened at */
    pthread_mutex_t mu; /* one write at a time: no interleaving, and rotation between records */
} ofile;

struct rg_out {
    ofile *f;
    unsigned worker;
    int tag;
    int err; /* the first write's errno, 0: none */
};

static pthread_mutex_t files_mu = PTHREAD_MUTEX_INITIALIZER;
static ofile *files;
static _Atomic unsigned reopen_gen; /* SIGHUP / ctl reopen: files older than it reopen */
static uint64_t rotate_bytes;       /* --rotate SIZE, 0: none */
static uint64_t rotate_secs;        /* --rotate TIME, 0: none */

/* ---- worker tags ---- */

static const char *skip_string(const char *s, const char *end)
{
    for (s++; s < end && *s != '"'; s++)
        if (*s == '\\') s++;
    return s < end ? s + 1 : end;
}

/* Does the object in s[0..n) have a top-level "uid" or "flow" member whose value is a number? */
static int is_flow_record(const char *s, size_t n)
{
    const char *p = s, *end = s + n;
    int depth = 0;
    while (p < end) {
        if (*p == '{' || *p == '[') {
            depth++;
            p++;
        } else if (*p == '}' || *p == ']') {
            depth--;
            p++;
        } else if (*p != '"') {
            p++;
        } else {
            const char *k = p + 1;
            p = skip_string(p, end);
            if (depth != 1) continue;
            size_t kl = (size_t)(p - 1 - k);
            const char *q = p;
            while (q < end && (*q == ' ' || *q == '\t'))
                q++;
            if (q >= end || *q != ':') continue; /* a value, not a key */
            for (q++; q < end && (*q == ' ' || *q == '\t'); q++) {
            }
            if (((kl == 3 && !memcmp(k, "uid", 3)) || (kl == 4 && !memcmp(k, "flow", 4))) &&
                q < end && *q >= '0' && *q <= '9')
                return 1;
        }
    }
    return 0;
}

char *rg_out_tag_line(const char *s, size_t n, unsigned worker, size_t *outlen)
{
    size_t last = n;
    while (last && (s[last - 1] == ' ' || s[last - 1] == '\r'))
        last--;
    int tag = last && s[last - 1] == '}' && is_flow_record(s, n);
    char w[32];
    int wl = tag ? snprintf(w, sizeof w, ",\"worker\":%u}", worker) : 0;
    char *b = malloc(n + (size_t)wl + 1);
    if (!b) return NULL;
    if (tag) {
        memcpy(b, s, last - 1);
        memcpy(b + last - 1, w, (size_t)wl);
        *outlen = last - 1 + (size_t)wl;
    } else {
        memcpy(b, s, n);
        *outlen = n;
    }
    b[*outlen] = 0;
    return b;
}

/* ---- options ---- */

int rg_out_rotate_option(const char *arg, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (end == arg || errno || !v || *arg == '-') {
        snprintf(err, errlen,
                 "--rotate %s: expected SIZE (100M, 10K, 1G, bytes) or TIME "
                 "(30s, 10min, 1h, 1d)",
                 arg);
        return RG_EINVAL;
    }
    static const struct {
        const char *suffix;
        uint64_t mul;
        int time;
    } units[] = {
        {"", 1, 0},        {"B", 1, 0},        {"K", 1024, 0},      {"KB", 1024, 0},
        {"KiB", 1024, 0},  {"M", 1 << 20, 0},  {"MB", 1 << 20, 0},  {"MiB", 1 << 20, 0},
        {"G", 1 << 30, 0}, {"GB", 1 << 30, 0}, {"GiB", 1 << 30, 0}, {"s", 1, 1},
        {"min", 60, 1},    {"h", 3600, 1},     {"d", 86400, 1},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix)) continue;
        if (v > UINT64_MAX / units[i].mul) break;
        if (units[i].time)
            rotate_secs = v * units[i].mul;
        else
            rotate_bytes = v * units[i].mul;
        return RG_OK;
    }
    snprintf(err, errlen, "--rotate %s: unknown unit '%s' (sizes: K, M, G; times: s, min, h, d%s)",
             arg, end, !strcmp(end, "m") ? "; say M for megabytes or min for minutes" : "");
    return RG_EINVAL;
}

/* ---- files ---- */

/* path without its ".rg-worker-K" components (a copy; NULL: out of memory). */
static char *shared_path(const char *path)
{
    char *p = strdup(path);
    if (!p) return NULL;
    const size_t wl = strlen(RG_WORKER_DIR);
    for (char *c = p; *c;) {
        char *seg = c == p ? c : c + 1; /* c: the start or a '/' */
        if ((c == p || *c == '/') && !strncmp(seg, RG_WORKER_DIR, wl)) {
            char *e = seg + wl;
            while (*e >= '0' && *e <= '9')
                e++;
            if (*e == '/' || !*e) {
                memmove(seg, *e ? e + 1 : e, strlen(*e ? e + 1 : e) + 1);
                continue;
            }
        }
        c++;
        while (*c && *c != '/')
            c++;
    }
    return p;
}

static int open_fd(const char *path, int trunc)
{
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (trunc ? O_TRUNC : 0), 0666);
}

rg_out *rg_out_open(const char *path, unsigned worker, int flags, char *err, size_t errlen)
{
    rg_out *o = calloc(1, sizeof *o);
    char *sp = shared_path(path);
    if (!o || !sp) {
        free(o);
        free(sp);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    o->worker = worker;
    o->tag = flags & RG_OUT_TAG;
    pthread_mutex_lock(&files_mu);
    ofile *f = files;
    while (f && strcmp(f->path, sp))
        f = f->next;
    if (f) {
        f->refs++;
        free(sp);
    } else if (!(f = calloc(1, sizeof *f))) {
        snprintf(err, errlen, "out of memory");
    } else {
        f->path = sp;
        f->fd = open_fd(sp, !(flags & RG_OUT_APPEND));
        if (f->fd < 0) {
            snprintf(err, errlen, "cannot create %s: %s", sp, strerror(errno));
            free(f);
            f = NULL;
        } else {
            pthread_mutex_init(&f->mu, NULL);
            f->refs = 1;
            struct stat st;
            f->size = fstat(f->fd, &st) ? 0 : (uint64_t)st.st_size;
            f->opened = time(NULL);
            f->gen = atomic_load(&reopen_gen);
            f->next = files;
            files = f;
        }
    }
    if (!f) free(sp);
    pthread_mutex_unlock(&files_mu);
    if (!f) {
        free(o);
        return NULL;
    }
    o->f = f;
    return o;
}

/* The file at f->path again (logrotate moved it): appended to, created when missing.  Under
 * f->mu.  On failure the old descriptor stays (nothing is lost) and the reason is printed. */
static int reopen(ofile *f, unsigned gen, char *err, size_t errlen)
{
    f->gen = gen;
    int fd = open_fd(f->path, 0);
    if (fd < 0) {
        snprintf(err, errlen, "cannot reopen %s: %s", f->path, strerror(errno));
        return RG_EIO;
    }
    struct stat st;
    f->size = fstat(fd, &st) ? 0 : (uint64_t)st.st_size;
    close(f->fd);
    f->fd = fd;
    return RG_OK;
}

/* Rename the current file to PATH.YYYYmmddTHHMMSSZ (.1, .2... when taken) and start a new
 * one.  Under f->mu. */
static int rotate(ofile *f, time_t now)
{
    struct tm tm;
    char stamp[32];
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    size_t n = strlen(f->path) + sizeof stamp + 24;
    char *to = malloc(n);
    if (!to) return RG_ENOMEM;
    struct stat st;
    snprintf(to, n, "%s.%s", f->path, stamp);
    for (unsigned k = 1; !lstat(to, &st); k++)
        snprintf(to, n, "%s.%s.%u", f->path, stamp, k);
    int rc = RG_EIO;
    if (!rename(f->path, to)) {
        int fd = open_fd(f->path, 1);
        if (fd >= 0) {
            close(f->fd);
            f->fd = fd;
            rc = RG_OK;
        }
    }
    if (rc) fprintf(stderr, "rg: --rotate: cannot rotate %s: %s\n", f->path, strerror(errno));
    f->size = 0; /* a failure is not retried at every record */
    f->opened = now;
    free(to);
    return rc;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return RG_EIO;
        p += k;
        n -= (size_t)k;
    }
    return RG_OK;
}

int rg_out_write(rg_out *o, const char *rec, size_t len)
{
    if (!len) return RG_OK;
    /* the record as it goes to disk: lines tagged, a final newline */
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int own = o->tag || rec[len - 1] != '\n';
    if (own) {
        for (size_t i = 0; i < len;) {
            const char *nl = memchr(rec + i, '\n', len - i);
            size_t ln = nl ? (size_t)(nl - (rec + i)) : len - i, tl = ln;
            char *t = o->tag ? rg_out_tag_line(rec + i, ln, o->worker, &tl) : NULL;
            if (o->tag && !t) goto oom;
            if (n + tl + 1 > cap) {
                cap = 2 * (n + tl + 1);
                char *b2 = realloc(buf, cap);
                if (!b2) {
                    free(t);
                    goto oom;
                }
                buf = b2;
            }
            memcpy(buf + n, t ? t : rec + i, tl);
            n += tl;
            buf[n++] = '\n';
            free(t);
            i += ln + 1;
        }
    }
    const char *p = own ? buf : rec;
    if (!own) n = len;
    ofile *f = o->f;
    pthread_mutex_lock(&f->mu);
    unsigned gen = atomic_load_explicit(&reopen_gen, memory_order_relaxed);
    if (f->gen != gen) {
        char why[512];
        if (reopen(f, gen, why, sizeof why)) fprintf(stderr, "rg: SIGHUP: %s\n", why);
    }
    if (rotate_secs || rotate_bytes) {
        time_t now = time(NULL);
        if (f->size && ((rotate_secs && (uint64_t)(now - f->opened) >= rotate_secs) ||
                        (rotate_bytes && f->size + n > rotate_bytes)))
            rotate(f, now);
    }
    int rc = write_all(f->fd, p, n);
    if (!rc) f->size += n;
    pthread_mutex_unlock(&f->mu);
    if (rc && !o->err) o->err = errno ? errno : EIO;
    free(buf);
    return rc;
oom:
    free(buf);
    if (!o->err) o->err = ENOMEM;
    errno = ENOMEM;
    return RG_EIO;
}

int rg_out_close(rg_out *o, char *err, size_t errlen)
{
    if (!o) return RG_OK;
    ofile *f = o->f;
    int rc = RG_OK;
    if (o->err) {
        snprintf(err, errlen, "cannot write %s: %s", f->path, strerror(o->err));
        rc = RG_EIO;
    }
    pthread_mutex_lock(&files_mu);
    if (!--f->refs) {
        for (ofile **pp = &files; *pp; pp = &(*pp)->next)
            if (*pp == f) {
                *pp = f->next;
                break;
            }
        if (close(f->fd) && !rc) {
            snprintf(err, errlen, "cannot write %s: %s", f->path, strerror(errno));
            rc = RG_EIO;
        }
        pthread_mutex_destroy(&f->mu);
        free(f->path);
        free(f);
    }
    pthread_mutex_unlock(&files_mu);
    free(o);
    return rc;
}

void rg_out_reopen_later(void)
{
    atomic_fetch_add(&reopen_gen, 1);
}

int rg_out_reopen_all(char *err, size_t errlen)
{
    unsigned gen = atomic_fetch_add(&reopen_gen, 1) + 1;
    int n = 0, failed = 0;
    pthread_mutex_lock(&files_mu);
    for (ofile *f = files; f; f = f->next) {
        pthread_mutex_lock(&f->mu);
        if (f->gen != gen) {
            char why[512];
            if (reopen(f, gen, why, sizeof why)) {
                if (!failed) snprintf(err, errlen, "%s", why);
                failed = 1;
            } else {
                n++;
            }
        }
        pthread_mutex_unlock(&f->mu);
    }
    pthread_mutex_unlock(&files_mu);
    return failed ? -1 : n;
}
