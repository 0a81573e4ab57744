/* rg_metrics.c - --metrics ADDR:PORT: a small HTTP/1.0 responder on its own thread that
 * answers GET /metrics with the Prometheus text exposition (format 0.0.4) of a fresh snapshot
 * (rg_live.c) and 404 to any other path.  One connection at a time; a request is read up to
 * its blank line within REQ_MAX bytes and 2 s (a slow or oversized client is dropped), the
 * connection closes after the reply. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rg_live.h"

enum { REQ_MAX = 8192 };

typedef struct rg_metrics {
    rg_live *live;
    int lfd;
    pthread_t th;
    atomic_int stop;
} rg_metrics;

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return;
        s += k;
        n -= (size_t)k;
    }
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t n)
{
    char head[256];
    int k = snprintf(head, sizeof head,
                     "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, type, n);
    send_all(fd, head, (size_t)k);
    send_all(fd, body, n);
}

/* The request's head (up to its blank line) into buf; its length, or -1 (dropped). */
static ssize_t read_head(int fd, char *buf, size_t size)
{
    size_t n = 0;
    while (n + 1 < size) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0) return -1;
        ssize_t k = recv(fd, buf + n, size - 1 - n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        n += (size_t)k;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n")) return (ssize_t)n;
    }
    return -2; /* too large */
}

static void serve_one(rg_metrics *m, int fd)
{
    char buf[REQ_MAX];
    ssize_t n = read_head(fd, buf, sizeof buf);
    if (n == -2) {
        static const char msg[] = "request too large\n";
        reply(fd, "431 Request Header Fields Too Large", "text/plain", msg, sizeof msg - 1);
        return;
    }
    if (n < 0) return;
    /* the request line: METHOD SP PATH [SP VERSION] */
    char *sp = strchr(buf, ' ');
    char *path = sp ? sp + 1 : NULL;
    char *end = path ? path + strcspn(path, " \r\n") : NULL;
    const int get = sp && (size_t)(sp - buf) == 3 && !memcmp(buf, "GET", 3);
    const int head = sp && (size_t)(sp - buf) == 4 && !memcmp(buf, "HEAD", 4);
    if (path) *end = 0;
    char *q = path ? strchr(path, '?') : NULL; /* a query (Prometheus sends none) is ignored */
    if (q) *q = 0;
    if ((!get && !head) || !path || strcmp(path, "/metrics")) {
        static const char msg[] = "not found: GET /metrics\n";
        reply(fd, "404 Not Found", "text/plain", msg, sizeof msg - 1);
        return;
    }
    char err[512];
    size_t len = 0;
    char *body = rg_live_prometheus(m->live, &len, err, sizeof err);
    if (!body) {
        size_t k = strlen(err);
        err[k < sizeof err - 1 ? k : k - 1] = '\n';
        reply(fd, "503 Service Unavailable", "text/plain", err, k + 1 < sizeof err ? k + 1 : k);
        return;
    }
    reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", body, head ? 0 : len);
    free(body);
}

static void *serve(void *arg)
{
    rg_metrics *m = arg;
    while (!atomic_load(&m->stop)) {
        struct pollfd p = {m->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        int fd = accept(m->lfd, NULL, NULL);
        if (fd < 0) continue;
        serve_one(m, fd);
        close(fd);
    }
    return NULL;
}

rg_metrics *rg_metrics_open(rg_live *l, const char *addr, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    size_t hn = (size_t)(colon - addr);
    if (hn >= sizeof host) hn = sizeof host - 1;
    memcpy(host, addr, hn);
    host[hn] = 0;
    if (host[0] == '[' && hn > 1 && host[hn - 1] == ']') { /* [::1]:9100 */
        memmove(host, host + 1, hn - 2);
        host[hn - 2] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &res);
    if (g) {
        snprintf(err, errlen, "--metrics %s: %s", addr, gai_strerror(g));
        return NULL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 8)) {
        snprintf(err, errlen, "--metrics %s: %s", addr, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return NULL;
    }
    freeaddrinfo(res);
    rg_metrics *m = calloc(1, sizeof *m);
    if (!m) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    m->live = l;
    m->lfd = fd;
    if (pthread_create(&m->th, NULL, serve, m)) {
        close(fd);
        free(m);
        snprintf(err, errlen, "--metrics: cannot start its thread");
        return NULL;
    }
    return m;
}

void rg_metrics_close(rg_metrics *m)
{
    if (!m) return;
    atomic_store(&m->stop, 1);
    pthread_join(m->th, NULL);
    close(m->lfd);
    free(m);
}
