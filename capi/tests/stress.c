/* Many threads on the same pages of one file through the C interface, behind
 * a cache a third of the file's size, with a sync every 20 ms beside the
 * flusher: queued reads and writes (setcache_submit_*, setcache_poll),
 * setcache_pread and setcache_pwrite, and pins, shared and mutable.
 *
 * Every write fills a whole page with a stamp (its thread and number), the
 * page's number and words derived from the stamp. Half of all requests go
 * to a few pages every thread writes; a page read from them must be whole
 * (one write's bytes, or never written). The other half go to pages each
 * thread owns (no other thread touches them, and the owner has at most one
 * request on each in flight): a read of one must show the owner's last
 * finished write exactly. No thread may go 5 s without a request of its own
 * finishing. After the run, the store is closed and opened again, and every
 * owned page must hold its owner's last write, every shared page a whole one.
 *
 *   stress DEVICE_DIR_0 DEVICE_DIR_1 [SECONDS [THREADS [PARTITIONS]]]
 *
 * Prints one line starting "ok" and exits 0, or the failures and exits 1. */
#define _GNU_SOURCE
#include <setcache.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PS 4096
#define WORDS (PS / 8)
#define PAGES 768
#define SHARED 24
#define DEPTH 4
#define CACHE_PAGES 256
#define STALL_NS (5ull * 1000 * 1000 * 1000)
#define MAX_THREADS 256

static setcache_store *store;
static setcache_file *file;
static uint64_t deadline_ns;
static int nthreads;
static atomic_int failures;
static atomic_int stop;

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
static int decode(const uint8_t *b, uint64_t page, uint64_t *stamp, int t, const char *how) {
    uint64_t w[WORDS];
    memcpy(w, b, PS);
    *stamp = w[0];
    for (size_t i = 0; i < WORDS; i++) {
        uint64_t want = w[0] == 0 ? 0 : word_of(w[0], page, i);
        if (w[i] != want) {
            printf("thread %d (%s): page %llu torn or another page's: word %zu is %#llx, "
                   "stamp %#llx wants %#llx\n",
                   t, how, (unsigned long long)page, i, (unsigned long long)w[i],
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
    uint64_t last_end;
    uint64_t longest;
    /* For each page this thread owns: its last finished write (0: none). */
    uint64_t last[PAGES];
    /* Requests of this thread in flight on each page. */
    uint8_t busy[PAGES];
};

static uint64_t next(struct thread *th) {
    th->rng += 0x9e3779b97f4a7c15ull;
    return mix64(th->rng);
}

static int owns(int t, uint64_t page) {
    return page >= SHARED && (int)((page - SHARED) % (uint64_t)nthreads) == t;
}

/* A page for the next request: a shared one, or one of this thread's own
 * with nothing of this thread in flight on it (none: a shared one). */
static uint64_t pick(struct thread *th) {
    if (next(th) % 2 == 0)
        return next(th) % SHARED;
    uint64_t own = (PAGES - SHARED) / (uint64_t)nthreads;
    for (int tries = 0; own > 0 && tries < 8; tries++) {
        uint64_t p = SHARED + (uint64_t)th->t + (next(th) % own) * (uint64_t)nthreads;
        if (!th->busy[p])
            return p;
    }
    return next(th) % SHARED;
}

static void ended(struct thread *th) {
    uint64_t at = now_ns();
    if (at - th->last_end > th->longest)
        th->longest = at - th->last_end;
    th->last_end = at;
    th->ops++;
}

static void wrote(struct thread *th, uint64_t page, uint64_t stamp) {
    ended(th);
    if (owns(th->t, page))
        th->last[page] = stamp;
}

static void read_back(struct thread *th, uint64_t page, const uint8_t *b, const char *how) {
    ended(th);
    uint64_t stamp;
    if (decode(b, page, &stamp, th->t, how) < 0) {
        fail();
        return;
    }
    if (owns(th->t, page) && stamp != th->last[page]) {
        printf("thread %d (%s): own page %llu shows stamp %#llx, its last write was %#llx\n",
               th->t, how, (unsigned long long)page, (unsigned long long)stamp,
               (unsigned long long)th->last[page]);
        fail();
    }
}

static int running(void) { return now_ns() < deadline_ns && atomic_load(&failures) == 0; }

/* setcache_pread and setcache_pwrite (`pins` 0), or shared and mutable pins. */
static void calls(struct thread *th, int pins) {
    static _Thread_local uint8_t buf[PS];
    while (running()) {
        uint64_t page = pick(th);
        uint64_t at = page * PS;
        int write = next(th) % 2 == 0;
        if (!pins && !write) {
            int64_t n = setcache_pread(file, buf, PS, at);
            if (n != PS) {
                printf("thread %d: pread of page %llu: %lld (%s)\n", th->t,
                       (unsigned long long)page, (long long)n, setcache_last_error());
                fail();
                return;
            }
            read_back(th, page, buf, "pread");
        } else if (!pins) {
            uint64_t stamp = ((uint64_t)th->t + 1) << 40 | ++th->seq;
            fill(buf, stamp, page);
            int64_t n = setcache_pwrite(file, buf, PS, at);
            if (n != PS) {
                printf("thread %d: pwrite of page %llu: %lld (%s)\n", th->t,
                       (unsigned long long)page, (long long)n, setcache_last_error());
                fail();
                return;
            }
            wrote(th, page, stamp);
        } else if (!write) {
            const void *data;
            size_t len;
            setcache_page *pin;
            int rc = setcache_pin(file, at, &data, &len, &pin);
            if (rc < 0 || len != PS) {
                printf("thread %d: pin of page %llu: %d (%s)\n", th->t,
                       (unsigned long long)page, rc, setcache_last_error());
                fail();
                return;
            }
            memcpy(buf, data, PS);
            sched_yield();
            if (memcmp(buf, data, PS) != 0) {
                printf("thread %d: page %llu changed under a pin\n", th->t,
                       (unsigned long long)page);
                fail();
            }
            setcache_unpin(pin);
            read_back(th, page, buf, "pin");
        } else {
            void *data;
            size_t len;
            setcache_page *pin;
            int rc = setcache_pin_mut(file, at, &data, &len, &pin);
            if (rc < 0 || len != PS) {
                printf("thread %d: pin_mut of page %llu: %d (%s)\n", th->t,
                       (unsigned long long)page, rc, setcache_last_error());
                fail();
                return;
            }
            uint64_t stamp = ((uint64_t)th->t + 1) << 40 | ++th->seq;
            fill(buf, stamp, page);
            /* In two halves with a yield between: nobody may see half. */
            memcpy(data, buf, PS / 2);
            sched_yield();
            memcpy((uint8_t *)data + PS / 2, buf + PS / 2, PS / 2);
            setcache_unpin(pin);
            wrote(th, page, stamp);
        }
    }
}

struct slot {
    int used;
    uint64_t page;
    uint64_t stamp; /* 0: a read */
    uint8_t buf[PS];
};

static void queued(struct thread *th) {
    setcache_queue *q;
    if (setcache_queue_new(store, DEPTH, &q) < 0) {
        printf("thread %d: queue: %s\n", th->t, setcache_last_error());
        fail();
        return;
    }
    static _Thread_local struct slot slots[DEPTH];
    int in_flight = 0;
    for (;;) {
        int open = running();
        for (int k = 0; open && k < DEPTH; k++) {
            struct slot *s = &slots[k];
            if (s->used)
                continue;
            uint64_t page = pick(th);
            /* One request per page in flight from this thread: two writes of
             * a queue run in any order. */
            if (th->busy[page])
                continue;
            s->page = page;
            int rc;
            if (next(th) % 2 == 0) {
                s->stamp = ((uint64_t)th->t + 1) << 40 | ++th->seq;
                fill(s->buf, s->stamp, page);
                rc = setcache_submit_write(q, file, s->buf, PS, page * PS, (uint64_t)k);
            } else {
                s->stamp = 0;
                rc = setcache_submit_read(q, file, s->buf, PS, page * PS, (uint64_t)k);
            }
            if (rc < 0) {
                printf("thread %d: submit: %d (%s)\n", th->t, rc, setcache_last_error());
                fail();
                open = 0;
                break;
            }
            s->used = 1;
            th->busy[page] = 1;
            in_flight++;
        }
        if (in_flight == 0)
            break;
        struct setcache_completion done[DEPTH];
        int n = setcache_poll(q, done, DEPTH, 1);
        if (n < 0) {
            printf("thread %d: poll: %d (%s)\n", th->t, n, setcache_last_error());
            fail();
            break;
        }
        for (int i = 0; i < n; i++) {
            struct slot *s = &slots[done[i].tag];
            s->used = 0;
            th->busy[s->page] = 0;
            in_flight--;
            if (done[i].result != PS) {
                printf("thread %d: queued %s of page %llu: %lld (%s)\n", th->t,
                       s->stamp ? "write" : "read", (unsigned long long)s->page,
                       (long long)done[i].result, setcache_last_error());
                fail();
            } else if (s->stamp) {
                wrote(th, s->page, s->stamp);
            } else {
                read_back(th, s->page, s->buf, "queued read");
            }
        }
    }
    setcache_queue_free(q);
}

static void *worker(void *arg) {
    struct thread *th = arg;
    th->last_end = now_ns();
    switch (th->t % 3) {
    case 0:
        queued(th);
        break;
    case 1:
        calls(th, 0);
        break;
    default:
        calls(th, 1);
    }
    return NULL;
}

static void *syncer(void *arg) {
    uint64_t *n = arg;
    while (!atomic_load(&stop)) {
        if (setcache_sync(file) < 0) {
            printf("sync: %s\n", setcache_last_error());
            fail();
        }
        (*n)++;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int open_store(const char *const *devices, uint32_t partitions) {
    struct setcache_options opts = {
        .cache_bytes = CACHE_PAGES * PS, .page_size = PS, .partitions = partitions};
    if (setcache_store_open(devices, 2, &opts, &store) < 0) {
        printf("open: %s\n", setcache_last_error());
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s DEVICE_DIR_0 DEVICE_DIR_1 [SECONDS [THREADS [PARTITIONS]]]\n",
                argv[0]);
        return 2;
    }
    const char *devices[] = {argv[1], argv[2]};
    double secs = argc > 3 ? atof(argv[3]) : 3;
    nthreads = argc > 4 ? atoi(argv[4]) : 32;
    uint32_t partitions = argc > 5 ? (uint32_t)atoi(argv[5]) : 0;
    if (nthreads < 3 || nthreads > MAX_THREADS || secs <= 0) {
        fprintf(stderr, "THREADS must be 3 to %d and SECONDS above 0\n", MAX_THREADS);
        return 2;
    }
    if (open_store(devices, partitions) < 0)
        return 1;
    if (setcache_create(store, "stress", (uint64_t)PAGES * PS, &file) < 0) {
        printf("create: %s\n", setcache_last_error());
        return 1;
    }
    struct thread *ths = calloc((size_t)nthreads, sizeof *ths);
    pthread_t ids[MAX_THREADS], sid;
    uint64_t syncs = 0;
    deadline_ns = now_ns() + (uint64_t)(secs * 1e9);
    pthread_create(&sid, NULL, syncer, &syncs);
    for (int t = 0; t < nthreads; t++) {
        ths[t].t = t;
        ths[t].rng = 0x5eedull ^ (uint64_t)t;
        pthread_create(&ids[t], NULL, worker, &ths[t]);
    }
    uint64_t ops = 0, longest = 0;
    for (int t = 0; t < nthreads; t++) {
        pthread_join(ids[t], NULL);
        ops += ths[t].ops;
        if (ths[t].longest > longest)
            longest = ths[t].longest;
        if (ths[t].ops == 0) {
            printf("thread %d finished no request\n", t);
            fail();
        }
        if (ths[t].longest > STALL_NS) {
            printf("thread %d went %.3f s without a request finishing\n", t,
                   ths[t].longest / 1e9);
            fail();
        }
    }
    atomic_store(&stop, 1);
    pthread_join(sid, NULL);
    if (setcache_close(file) < 0 || setcache_store_close(store) < 0) {
        printf("close: %s\n", setcache_last_error());
        return 1;
    }

    /* What a fresh store reads. */
    if (open_store(devices, partitions) < 0)
        return 1;
    if (setcache_open(store, "stress", &file) < 0) {
        printf("reopen: %s\n", setcache_last_error());
        return 1;
    }
    static uint8_t buf[PS];
    for (uint64_t page = 0; page < PAGES; page++) {
        if (setcache_pread(file, buf, PS, page * PS) != PS) {
            printf("after the reopen, page %llu: %s\n", (unsigned long long)page,
                   setcache_last_error());
            fail();
            continue;
        }
        uint64_t stamp;
        if (decode(buf, page, &stamp, -1, "after the reopen") < 0) {
            fail();
            continue;
        }
        if (page >= SHARED) {
            int owner = (int)((page - SHARED) % (uint64_t)nthreads);
            if (stamp != ths[owner].last[page]) {
                printf("after the reopen, own page %llu holds stamp %#llx, its last write "
                       "was %#llx\n",
                       (unsigned long long)page, (unsigned long long)stamp,
                       (unsigned long long)ths[owner].last[page]);
                fail();
            }
        }
    }
    setcache_close(file);
    setcache_store_close(store);
    int f = atomic_load(&failures);
    if (f > 0) {
        printf("%d failures\n", f);
        return 1;
    }
    printf("ok %d threads, %.0f s: %llu requests, %llu syncs, the longest wait %.1f ms\n",
           nthreads, secs, (unsigned long long)ops, (unsigned long long)syncs, longest / 1e6);
    free(ths);
    return 0;
}
