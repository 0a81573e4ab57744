/* rg_wrote.c - the files a run wrote, named in its summary (issue 26: no surprising writes).
 *
 * The output folders the NFs were given are noted as they are attached; at the summary each is
 * walked and every regular file modified since the run started is named: the folder's own files
 * one by one, a subfolder (streams/) as one entry with its file count.  The start is taken on
 * the coarse real-time clock, the one the kernel dates files with, so a file written in the
 * first tick of the run is not missed. */
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "rg/rg_json.h"
#include "rg_driver.h"
#include "rg_nfchain.h"

#define WROTE_DIRS 16

static struct {
    pthread_mutex_t mu;
    struct timespec t0;
    unsigned n;
    char *dir[WROTE_DIRS];
} wr = {.mu = PTHREAD_MUTEX_INITIALIZER};

void rg_wrote_start(void)
{
#ifdef CLOCK_REALTIME_COARSE
    clock_gettime(CLOCK_REALTIME_COARSE, &wr.t0);
#else
    clock_gettime(CLOCK_REALTIME, &wr.t0);
    wr.t0.tv_sec -= 1; /* file times may lag the fine clock by a tick */
#endif
}

void rg_wrote_dir(const char *dir)
{
    if (!dir || !*dir) return;
    pthread_mutex_lock(&wr.mu);
    int seen = 0;
    for (unsigned i = 0; i < wr.n && !seen; i++)
        seen = !strcmp(wr.dir[i], dir);
    if (!seen && wr.n < WROTE_DIRS) {
        wr.dir[wr.n] = strdup(dir);
        if (wr.dir[wr.n]) wr.n++;
    }
    pthread_mutex_unlock(&wr.mu);
}

static int since_start(const struct stat *st)
{
    return st->st_mtim.tv_sec > wr.t0.tv_sec ||
           (st->st_mtim.tv_sec == wr.t0.tv_sec && st->st_mtim.tv_nsec >= wr.t0.tv_nsec);
}

/* Files of dir (recursively) written since the start: count and bytes added. */
static void count_tree(const char *dir, uint64_t *files, uint64_t *bytes, int depth)
{
    DIR *d = depth < 8 ? opendir(dir) : NULL;
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue; /* ., .., and the workers' parts (.rg-worker-K) */
        char p[4096];
        struct stat st;
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p || lstat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            count_tree(p, files, bytes, depth + 1);
        } else if (S_ISREG(st.st_mode) && since_start(&st)) {
            ++*files;
            *bytes += (uint64_t)st.st_size;
        }
    }
    closedir(d);
}

typedef struct {
    char path[4096];
    uint64_t files, bytes;
    int is_dir;
} wrote_entry;

/* The entries of folder i, sorted by name; *n set; NULL when none (or out of memory). */
static wrote_entry *entries_of(unsigned i, size_t *n)
{
    *n = 0;
    struct dirent **names = NULL;
    int k = scandir(wr.dir[i], &names, NULL, alphasort);
    if (k < 0) return NULL;
    wrote_entry *v = calloc((size_t)k + 1, sizeof *v);
    for (int j = 0; j < k; j++) {
        const char *nm = names[j]->d_name;
        struct stat st;
        if (v && nm[0] != '.') {
            wrote_entry *w = &v[*n];
            snprintf(w->path, sizeof w->path, "%s/%s", wr.dir[i], nm);
            if (!lstat(w->path, &st)) {
                if (S_ISDIR(st.st_mode)) {
                    w->is_dir = 1;
                    count_tree(w->path, &w->files, &w->bytes, 1);
                } else if (S_ISREG(st.st_mode) && since_start(&st)) {
                    w->files = 1;
                    w->bytes = (uint64_t)st.st_size;
                }
                if (w->files) ++*n;
            }
        }
        free(names[j]);
    }
    free(names);
    return v;
}

static void human_bytes(char *buf, size_t len, uint64_t b)
{
    if (b < 10000)
        snprintf(buf, len, "%" PRIu64 " bytes", b);
    else if (b < 10000000)
        snprintf(buf, len, "%" PRIu64 " KB", (b + 512) / 1024);
    else
        snprintf(buf, len, "%" PRIu64 " MB", (b + 524288) / 1048576);
}

void rg_wrote_text(void)
{
    if (!wr.n) return;
    fputs("wrote         ", stdout);
    uint64_t total = 0, nfiles = 0;
    for (unsigned i = 0; i < wr.n; i++) {
        size_t n;
        wrote_entry *v = entries_of(i, &n);
        for (size_t j = 0; v && j < n; j++) {
            if (v[j].is_dir)
                printf("%s %s/ (%" PRIu64 " file%s)", nfiles ? "," : "", v[j].path, v[j].files,
                       v[j].files == 1 ? "" : "s");
            else
                printf("%s %s", nfiles ? "," : "", v[j].path);
            nfiles += v[j].files;
            total += v[j].bytes;
        }
        free(v);
    }
    char b[32];
    human_bytes(b, sizeof b, total);
    if (nfiles)
        printf("  (%s)\n", b);
    else
        fputs(" no files\n", stdout);
}

void rg_wrote_json(void)
{
    fputs("\"files_written\":[", stdout);
    int first = 1;
    for (unsigned i = 0; i < wr.n; i++) {
        size_t n;
        wrote_entry *v = entries_of(i, &n);
        for (size_t j = 0; v && j < n; j++) {
            fputs(first ? "{\"path\":" : ",{\"path\":", stdout);
            first = 0;
            char p[4100];
            snprintf(p, sizeof p, "%s%s", v[j].path, v[j].is_dir ? "/" : "");
            rg_json_string(stdout, p);
            printf(",\"files\":%" PRIu64 ",\"bytes\":%" PRIu64 "}", v[j].files, v[j].bytes);
        }
        free(v);
    }
    fputs("],", stdout);
}
