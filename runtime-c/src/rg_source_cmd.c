/* rg_source_cmd.c - the command source: the pcap or pcapng stream a shell command writes on
 * its standard output (`--io cmd "gzip -dc x.pcap.gz"`, `"tcpdump -r x -w -"`, `"ssh host
 * tcpdump -w -"`), read as the file source reads a pipe.
 *
 * The command runs in a child process (the shell of --shell, default /bin/sh, with -c); this
 * source is the file source (rg_source_file) on the pipe's read end, plus the child: when the
 * stream ends, the command's exit status decides whether it ended well (a command that fails
 * after some frames is an error, the frames read before kept).  It also shows a source with an
 * option of its own (--shell), read by name (rg_source_opt_get): no member of rg_source_cfg. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rg/rg_source.h"

typedef struct cmd_source {
    rg_source base;
    rg_source *file; /* the file source on /dev/fd/N */
    pid_t pid;       /* the command; 0 once reaped */
    int status;      /* its wait status, once reaped */
    int fd;          /* the pipe's read end */
    char err[256];   /* the command's failure; else the file source's error */
} cmd_source;

const rg_source_ops rg_source_cmd;

/* Reap the command (blocking); 0 if it exited with status 0. */
static int reap(cmd_source *c)
{
    while (c->pid > 0 && waitpid(c->pid, &c->status, 0) < 0 && errno == EINTR)
        ;
    c->pid = 0;
    return WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0 ? 0 : -1;
}

/* The stream ended without a capture header: 1 if the command exited by itself within
 * about 100 ms (it closed its stdout by exiting), its status in c->status; else it is
 * stopped (it writes no capture) and 0. */
static int exited_by_itself(cmd_source *c)
{
    for (int i = 0; i < 100 && c->pid > 0; i++) {
        pid_t r = waitpid(c->pid, &c->status, WNOHANG);
        if (r == c->pid) {
            c->pid = 0;
            return 1;
        }
        if (r < 0 && errno != EINTR) break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    kill(c->pid, SIGTERM);
    (void)reap(c);
    return 0;
}

/* Why the command failed, into c->err. */
static void status_text(cmd_source *c)
{
    if (WIFEXITED(c->status))
        snprintf(c->err, sizeof c->err, "the command exited with status %d",
                 WEXITSTATUS(c->status));
    else if (WIFSIGNALED(c->status))
        snprintf(c->err, sizeof c->err, "the command was killed by signal %d", WTERMSIG(c->status));
}

static void cmd_close(rg_source *src)
{
    cmd_source *c = (cmd_source *)src;
    if (!c) return;
    if (c->file) rg_source_file.close(c->file);
    if (c->fd >= 0) close(c->fd);
    if (c->pid > 0) { /* stopped early (--count, a signal): the command need not finish */
        kill(c->pid, SIGTERM);
        (void)reap(c);
    }
    free(c);
}

static rg_source *cmd_open(const rg_source_cfg *cfg, char *err, size_t errlen)
{
    const char *shell = rg_source_opt_get(cfg, "shell", "/bin/sh");
    cmd_source *c = calloc(1, sizeof *c);
    int p[2];
    if (!c || pipe(p) < 0) {
        snprintf(err, errlen, "cmd: %s", c ? strerror(errno) : "out of memory");
        free(c);
        return NULL;
    }
    /* close-on-exec: the command holds neither end but its stdout (dup2 clears it there) */
    (void)fcntl(p[0], F_SETFD, FD_CLOEXEC);
    (void)fcntl(p[1], F_SETFD, FD_CLOEXEC);
    c->base.ops = &rg_source_cmd;
    c->fd = p[0];
    c->pid = fork();
    if (c->pid == 0) { /* the child: stdout is the pipe (dup2 clears its close-on-exec) */
        if (dup2(p[1], STDOUT_FILENO) >= 0) execl(shell, shell, "-c", cfg->name, (char *)NULL);
        fprintf(stderr, "cmd: %s: %s\n", shell, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    if (c->pid < 0) {
        snprintf(err, errlen, "cmd: fork: %s", strerror(errno));
        c->pid = 0;
        cmd_close(&c->base);
        return NULL;
    }
    char path[32];
    snprintf(path, sizeof path, "/dev/fd/%d", c->fd);
    rg_source_cfg fcfg = {.name = path, .stop = cfg->stop};
    char ferr[256];
    c->file = rg_source_file.open(&fcfg, ferr, sizeof ferr);
    if (!c->file) {   /* no capture header: the command's failure says more, if it failed */
        close(c->fd); /* a command still writing gets EPIPE */
        c->fd = -1;
        const int by_itself = exited_by_itself(c);
        const int st = WIFEXITED(c->status) ? WEXITSTATUS(c->status) : 0;
        if (by_itself && st != 0 && st != 128 + SIGPIPE) {
            status_text(c);
            snprintf(err, errlen, "cmd: %s: %s", cfg->name, c->err);
        } else { /* the file source's reason, without the pipe's name */
            const size_t plen = strlen(path);
            const char *why = strncmp(ferr, path, plen) ? ferr : ferr + plen;
            snprintf(err, errlen, "cmd: %s: its output%s%s", cfg->name, *why == ':' ? "" : ": ",
                     why);
        }
        cmd_close(&c->base);
        return NULL;
    }
    return &c->base;
}

static int cmd_next_burst(rg_source *src, rg_frame *out, unsigned max)
{
    cmd_source *c = (cmd_source *)src;
    int n = rg_source_file.next_burst(c->file, out, max);
    if (n == RG_SRC_END && c->pid > 0 && reap(c)) {
        status_text(c);
        return RG_SRC_ERROR;
    }
    return n == RG_SRC_END && c->err[0] ? RG_SRC_ERROR : n;
}

static const rg_linkinfo *cmd_link(const rg_source *src)
{
    return rg_source_file.link(((const cmd_source *)src)->file);
}

static void cmd_stats(const rg_source *src, rg_source_stats *st)
{
    rg_source_file.stats(((const cmd_source *)src)->file, st);
}

static const char *cmd_error(const rg_source *src)
{
    const cmd_source *c = (const cmd_source *)src;
    return c->err[0] ? c->err : rg_source_file.error(c->file);
}

static const rg_source_opt cmd_opts[] = {
    {"shell", "PATH", "the shell that runs the command, with -c (default /bin/sh)", RG_SOPT_STR, 0,
     0, RG_SOPT_KV_ONLY, 0},
    {NULL, NULL, NULL, 0, 0, 0, 0, 0},
};

const rg_source_ops rg_source_cmd = {
    .name = "cmd",
    .help = "the pcap/pcapng stream a shell command writes (CAPTURE: the command)",
    .opts = cmd_opts,
    .open = cmd_open,
    .next_burst = cmd_next_burst,
    .link = cmd_link,
    .stats = cmd_stats,
    .error = cmd_error,
    .close = cmd_close,
};
