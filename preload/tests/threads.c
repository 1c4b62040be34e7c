/* Many threads of one program on the same file through plain POSIX calls
 * (the preload library's, when preloaded): `pread` and `pwrite` on one
 * descriptor all threads share, on descriptors of their own (opened and
 * closed again every few hundred calls, so that the descriptor table changes
 * under the others), and `fsync` every 20 ms on the shared one.
 *
 * Every write fills a whole page with a stamp (its thread and number), the
 * page's number and words derived from the stamp. Half of all requests go to
 * a few pages every thread writes: a read of one must show one write whole,
 * or zeros. The others go to pages each thread owns: a read of one must show
 * the owner's last write exactly. After the threads end, every descriptor is
 * closed, the file opened again, and every page checked the same way.
 *
 *   threads DIR [SECONDS [THREADS [lax]]]
 *
 * With `lax`, the shared pages are not checked: Linux's own page cache does
 * not keep a buffered `pread` from seeing part of a `pwrite` of the same page
 * made at the same moment, so on a plain directory they may read torn (the
 * own pages are checked, so that the program's checks are themselves
 * checked against the kernel).
 *
 * Prints one line starting "ok" and exits 0, or the failures and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PS 4096
#define WORDS (PS / 8)
#define PAGES 768
#define SHARED 24
#define MAX_THREADS 256
#define REOPEN_EVERY 300

static char name[4096];
static int shared_fd;
static uint64_t deadline_ns;
static int nthreads;
static atomic_int failures;
static atomic_int stop;
static int lax;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t word_of(uint64_t stamp, uint64_t page, size_t i) {
    return i == 0 ? stamp : i == 1 ? page : mix64(stamp ^ (i * 0x9e3779b97f4a7c15ull));
}

static void fill(uint8_t *b, uint64_t stamp, uint64_t page) {
    for (size_t i = 0; i < WORDS; i++) {
        uint64_t w = word_of(stamp, page, i);
        memcpy(b + 8 * i, &w, 8);
    }
}

/* The stamp page `page` holds in `b` (0: never written), or -1 with a line
 * saying what is wrong with it. */
static int decode(const uint8_t *b, uint64_t page, uint64_t *stamp, int t) {
    uint64_t w[WORDS];
    memcpy(w, b, PS);
    *stamp = w[0];
    for (size_t i = 0; i < WORDS; i++) {
        uint64_t want = w[0] == 0 ? 0 : word_of(w[0], page, i);
        if (w[i] != want) {
            printf("thread %d: page %llu torn or another page's: word %zu is %#llx, stamp "
                   "%#llx wants %#llx\n",
                   t, (unsigned long long)page, i, (unsigned long long)w[i],
                   (unsigned long long)w[0], (unsigned long long)want);
            return -1;
        }
    }
    return 0;
}

static void fail(void) { atomic_fetch_add(&failures, 1); }

struct thread {
    int t;
    uint64_t rng;
    uint64_t seq;
    uint64_t ops;
    uint64_t last[PAGES];
};

static uint64_t next(struct thread *th) {
    th->rng += 0x9e3779b97f4a7c15ull;
    return mix64(th->rng);
}

static int owner_of(uint64_t page) {
    return page < SHARED ? -1 : (int)((page - SHARED) % (uint64_t)nthreads);
}

static uint64_t pick(struct thread *th) {
    uint64_t own = (PAGES - SHARED) / (uint64_t)nthreads;
    if (next(th) % 2 == 0 || own == 0)
        return next(th) % SHARED;
    return SHARED + (uint64_t)th->t + (next(th) % own) * (uint64_t)nthreads;
}

static void *worker(void *arg) {
    struct thread *th = arg;
    static _Thread_local uint8_t buf[PS];
    int own = th->t % 2 == 1;
    int fd = own ? open(name, O_RDWR) : shared_fd;
    if (fd < 0) {
        printf("thread %d: open: %s\n", th->t, strerror(errno));
        fail();
        return NULL;
    }
    while (now_ns() < deadline_ns && atomic_load(&failures) == 0) {
        if (own && th->ops % REOPEN_EVERY == REOPEN_EVERY - 1) {
            close(fd);
            fd = open(name, O_RDWR);
            if (fd < 0) {
                printf("thread %d: open again: %s\n", th->t, strerror(errno));
                fail();
                return NULL;
            }
        }
        uint64_t page = pick(th);
        th->ops++;
        if (next(th) % 2 == 0) {
            uint64_t stamp = ((uint64_t)th->t + 1) << 40 | ++th->seq;
            fill(buf, stamp, page);
            ssize_t n = pwrite(fd, buf, PS, (off_t)(page * PS));
            if (n != PS) {
                printf("thread %d: pwrite of page %llu: %zd (%s)\n", th->t,
                       (unsigned long long)page, n, strerror(errno));
                fail();
                break;
            }
            if (owner_of(page) == th->t)
                th->last[page] = stamp;
            continue;
        }
        ssize_t n = pread(fd, buf, PS, (off_t)(page * PS));
        if (n != PS) {
            printf("thread %d: pread of page %llu: %zd (%s)\n", th->t, (unsigned long long)page,
                   n, strerror(errno));
            fail();
            break;
        }
        uint64_t stamp;
        if (lax && owner_of(page) < 0)
            continue;
        if (decode(buf, page, &stamp, th->t) < 0) {
            fail();
        } else if (owner_of(page) == th->t && stamp != th->last[page]) {
            printf("thread %d: own page %llu shows stamp %#llx, its last write was %#llx\n",
                   th->t, (unsigned long long)page, (unsigned long long)stamp,
                   (unsigned long long)th->last[page]);
            fail();
        }
    }
    if (own)
        close(fd);
    return NULL;
}

static void *syncer(void *arg) {
    uint64_t *n = arg;
    while (!atomic_load(&stop)) {
        if (fsync(shared_fd) < 0) {
            printf("fsync: %s\n", strerror(errno));
            fail();
        }
        (*n)++;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [SECONDS [THREADS [lax]]]\n", argv[0]);
        return 2;
    }
    double secs = argc > 2 ? atof(argv[2]) : 3;
    nthreads = argc > 3 ? atoi(argv[3]) : 32;
    lax = argc > 4 && strcmp(argv[4], "lax") == 0;
    if (nthreads < 2 || nthreads > MAX_THREADS || secs <= 0) {
        fprintf(stderr, "THREADS must be 2 to %d and SECONDS above 0\n", MAX_THREADS);
        return 2;
    }
    snprintf(name, sizeof name, "%s/threads", argv[1]);
    shared_fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (shared_fd < 0 || ftruncate(shared_fd, (off_t)PAGES * PS) < 0) {
        printf("create %s: %s\n", name, strerror(errno));
        return 1;
    }
    struct thread *ths = calloc((size_t)nthreads, sizeof *ths);
    pthread_t ids[MAX_THREADS], sid;
    uint64_t syncs = 0;
    deadline_ns = now_ns() + (uint64_t)(secs * 1e9);
    pthread_create(&sid, NULL, syncer, &syncs);
    for (int t = 0; t < nthreads; t++) {
        ths[t].t = t;
        ths[t].rng = 0x7ead5ull ^ (uint64_t)t;
        pthread_create(&ids[t], NULL, worker, &ths[t]);
    }
    uint64_t ops = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(ids[t], NULL);
        ops += ths[t].ops;
        if (ths[t].ops == 0) {
            printf("thread %d made no call\n", t);
            fail();
        }
    }
    atomic_store(&stop, 1);
    pthread_join(sid, NULL);
    if (close(shared_fd) < 0) {
        printf("close: %s\n", strerror(errno));
        fail();
    }

    /* The file as a new descriptor reads it. */
    int fd = open(name, O_RDONLY);
    if (fd < 0) {
        printf("open after: %s\n", strerror(errno));
        return 1;
    }
    static uint8_t buf[PS];
    for (uint64_t page = 0; page < PAGES; page++) {
        uint64_t stamp;
        if (lax && owner_of(page) < 0)
            continue;
        if (pread(fd, buf, PS, (off_t)(page * PS)) != PS) {
            printf("after, page %llu: %s\n", (unsigned long long)page, strerror(errno));
            fail();
        } else if (decode(buf, page, &stamp, -1) < 0) {
            fail();
        } else if (owner_of(page) >= 0 && stamp != ths[owner_of(page)].last[page]) {
            printf("after, own page %llu holds stamp %#llx, its last write was %#llx\n",
                   (unsigned long long)page, (unsigned long long)stamp,
                   (unsigned long long)ths[owner_of(page)].last[page]);
            fail();
        }
    }
    close(fd);
    unlink(name);
    int f = atomic_load(&failures);
    if (f > 0) {
        printf("%d failures\n", f);
        return 1;
    }
    printf("ok %d threads, %.0f s: %llu calls, %llu fsyncs\n", nthreads, secs,
           (unsigned long long)ops, (unsigned long long)syncs);
    free(ths);
    return 0;
}
