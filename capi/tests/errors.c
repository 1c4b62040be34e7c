/* Every call of the C interface on its error paths: each returns the errno
 * the header promises and leaves a message naming what was wrong. Prints one
 * line per check and exits non-zero if any fails.
 *
 *   errors DEVICE_DIR_0 DEVICE_DIR_1
 */
#define _GNU_SOURCE
#include <setcache.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int failures;

static void expect(const char *what, long long rc, int err, const char *word) {
    const char *msg = setcache_last_error();
    int ok = rc == -err && (word == NULL || strstr(msg, word) != NULL);
    printf("%-4s %-44s rc %lld (want -%s) message: %s\n", ok ? "ok" : "FAIL", what, rc,
           strerrorname_np(err), msg);
    if (!ok)
        failures++;
}

static void expect_ok(const char *what, long long rc) {
    printf("%-4s %-44s rc %lld\n", rc >= 0 ? "ok" : "FAIL", what, rc);
    if (rc < 0) {
        printf("     message: %s\n", setcache_last_error());
        failures++;
    }
}

static int stop_at_first(const char *name, void *ctx) {
    (void)name;
    (void)ctx;
    return 7;
}

struct other {
    setcache_queue *q;
    setcache_page *pin;
    setcache_file *file;
    int queue_rc, pin_rc, submit_rc, poll_rc;
    char queue_msg[256], pin_msg[256];
};

static void *from_other_thread(void *p) {
    struct other *o = p;
    char buf[16];
    struct setcache_completion c;
    o->submit_rc = setcache_submit_read(o->q, o->file, buf, sizeof buf, 0, 5);
    o->poll_rc = setcache_poll(o->q, &c, 1, 0);
    o->queue_rc = setcache_queue_free(o->q);
    snprintf(o->queue_msg, sizeof o->queue_msg, "%s", setcache_last_error());
    o->pin_rc = setcache_unpin(o->pin);
    snprintf(o->pin_msg, sizeof o->pin_msg, "%s", setcache_last_error());
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DEVICE_DIR_0 DEVICE_DIR_1\n", argv[0]);
        return 2;
    }
    const char *devices[] = {argv[1], argv[2]};
    const char *missing[] = {"/nonexistent/setcache-device"};
    setcache_store *store = NULL, *second = NULL;
    setcache_file *file = NULL, *other = NULL, *big_unused = NULL;
    setcache_queue *q = NULL;
    setcache_page *pin = NULL;

    expect("store_open: no devices", setcache_store_open(devices, 0, NULL, &store), EINVAL,
           "no device");
    expect("store_open: 257 devices", setcache_store_open(devices, 257, NULL, &store), EINVAL,
           "at most 256");
    expect("store_open: missing directory", setcache_store_open(missing, 1, NULL, &store),
           ENOTDIR, "does not exist");
    /* A device directory without write bits, beside the first: EACCES, as a
     * write into it would be. */
    char ro_dir[4096];
    snprintf(ro_dir, sizeof ro_dir, "%s/../read-only-device", argv[1]);
    if (mkdir(ro_dir, 0555) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", ro_dir, strerror(errno));
        return 1;
    }
    chmod(ro_dir, 0555);
    const char *read_only[] = {ro_dir};
    expect("store_open: read-only directory", setcache_store_open(read_only, 1, NULL, &store),
           EACCES, "is read-only");
    struct setcache_options bad = {.page_size = 3000};
    expect("store_open: bad page size", setcache_store_open(devices, 2, &bad, &store), EINVAL,
           "page size");
    struct setcache_options many = {.partitions = 65};
    expect("store_open: 65 partitions", setcache_store_open(devices, 2, &many, &store), EINVAL,
           "65 partitions");
    struct setcache_options odd = {.reserved = 1};
    expect("store_open: reserved field set", setcache_store_open(devices, 2, &odd, &store), EINVAL,
           "reserved");
    /* SETCACHE_TEST_PARTITIONS divides the cache's sets (CI runs it with 3). */
    const char *parts = getenv("SETCACHE_TEST_PARTITIONS");
    struct setcache_options small = {.cache_bytes = 8 << 20,
                                     .partitions = parts ? (uint32_t)atoi(parts) : 0};
    expect_ok("store_open", setcache_store_open(devices, 2, &small, &store));
    expect("store_open: the same directories again", setcache_store_open(devices, 2, NULL, &second),
           EBUSY, "in use");
    /* Refused before the directories are looked at (not "in use"). */
    expect("store_open: NULL output", setcache_store_open(devices, 2, NULL, NULL), EINVAL, "NULL");

    expect("create: NULL name", setcache_create(store, NULL, 0, &file), EINVAL, "NULL");
    expect("create: bad name", setcache_create(store, ".hidden", 0, &file), EINVAL, "starts with");
    expect_ok("create", setcache_create(store, "f", 10000, &file));
    expect("create: existing name", setcache_create(store, "f", 0, &other), EEXIST, "exists");
    expect("open: missing file", setcache_open(store, "nothing", &other), ENOENT, "not found");
    {
        /* A name with no NUL in its first 4096 bytes: refused, not read on. */
        static char endless[8192];
        memset(endless, 'n', sizeof endless - 1);
        expect("open: a name with no end", setcache_open(store, endless, &other), ENAMETOOLONG,
               "no end in its first 4096 bytes");
    }
    expect("delete: missing file", setcache_delete(store, "nothing"), ENOENT, "not found");
    expect("rename: missing file", setcache_rename(store, "nothing", "x"), ENOENT, "not found");
    expect_ok("create g", setcache_create(store, "g", 100, &other));
    expect("rename: onto an existing file", setcache_rename(store, "f", "g"), EEXIST, "exists");
    expect("list: NULL callback", setcache_list(store, NULL, NULL), EINVAL, "callback");
    expect_ok("list: stopped by the callback (7)",
              setcache_list(store, stop_at_first, NULL) == 7 ? 0 : -1);

    char buf[64];
    expect("pread: NULL buffer", setcache_pread(file, NULL, 10, 0), EINVAL, "NULL");
    expect_ok("pread: past the end reads 0", setcache_pread(file, buf, 10, 20000) == 0 ? 0 : -1);
    expect("pwrite: NULL buffer", setcache_pwrite(file, NULL, 10, 0), EINVAL, "NULL");
    expect("pread: length past the largest buffer", setcache_pread(file, buf, SIZE_MAX, 0), EINVAL,
           "largest");
    expect("pwrite: length past the largest buffer", setcache_pwrite(file, buf, SIZE_MAX, 0),
           EINVAL, "largest");
    expect("pwrite: offset overflows", setcache_pwrite(file, buf, 10, UINT64_MAX - 3), EFBIG,
           "overflow");
    /* Past the store's largest file (2^52 bytes with 4 KiB pages): EFBIG, as
     * the kernel's past a file system's largest file; nothing changes. */
    int64_t len_before = setcache_len(file);
    expect("pwrite: past the largest file", setcache_pwrite(file, buf, 1, (uint64_t)1 << 52),
           EFBIG, "largest file");
    expect("pwrite: ending past INT64_MAX", setcache_pwrite(file, buf, 2, INT64_MAX - 1), EINVAL,
           "INT64_MAX");
    expect("set_len: past the largest file", setcache_set_len(file, (uint64_t)1 << 53), EFBIG,
           "largest file");
    expect("create: past the largest file",
           setcache_create(store, "toolong", (uint64_t)1 << 53, &big_unused), EFBIG, "largest file");
    if (setcache_len(file) != len_before) {
        fprintf(stderr, "FAIL: the length moved past the largest file\n");
        failures++;
    }
    /* A negative off_t cast to the header's uint64_t: refused, as the kernel
     * refuses it, not read as past the end. */
    expect("pread: negative offset", setcache_pread(file, buf, 10, (uint64_t)(int64_t)-1), EINVAL,
           "INT64_MAX");
    expect("pwrite: negative offset", setcache_pwrite(file, buf, 1, (uint64_t)(int64_t)-2), EINVAL,
           "INT64_MAX");
    expect("pwrite: nothing at a negative offset",
           setcache_pwrite(file, buf, 0, (uint64_t)(int64_t)-2), EINVAL, "INT64_MAX");
    expect("set_len: negative length", setcache_set_len(file, (uint64_t)(int64_t)-4096), EINVAL,
           "INT64_MAX");
    expect("create: negative length",
           setcache_create(store, "neg", (uint64_t)INT64_MAX + 1, &big_unused), EINVAL, "INT64_MAX");
    expect("reserve: nothing", setcache_reserve(file, 0, 0), EINVAL, "0 bytes");
    expect("reserve: past the largest file", setcache_reserve(file, 0, (uint64_t)1 << 53), EFBIG,
           "largest file");
    expect("reserve: negative offset", setcache_reserve(file, (uint64_t)(int64_t)-1, 10), EINVAL,
           "INT64_MAX");
    expect("reserve: NULL file", setcache_reserve(NULL, 0, 10), EINVAL, "NULL");
    /* Past the end too; the length stays (checked below). */
    expect_ok("reserve", setcache_reserve(file, 4096, 1 << 20));
    expect_ok("set_len: the length kept", setcache_len(file) == 10000 ? 0 : -1);
    expect("pread: NULL file", setcache_pread(NULL, buf, 10, 0), EINVAL, "NULL");
    expect("len: NULL file", setcache_len(NULL), EINVAL, "NULL");
    expect("set_len: NULL file", setcache_set_len(NULL, 0), EINVAL, "NULL");
    expect("sync: NULL file", setcache_sync(NULL), EINVAL, "NULL");
    expect("stats: NULL buffer", setcache_stats_get(store, NULL), EINVAL, "NULL");

    expect("queue_new: depth 0", setcache_queue_new(store, 0, &q), EINVAL, "depth");
    expect_ok("queue_new", setcache_queue_new(store, 4, &q));
    expect("submit_read: past the end", setcache_submit_read(q, file, buf, 64, 9990, 1), EINVAL,
           "past the end");
    expect("submit_write: NULL buffer", setcache_submit_write(q, file, NULL, 64, 0, 1), EINVAL,
           "NULL");
    expect("submit_read: negative offset",
           setcache_submit_read(q, file, buf, 64, (uint64_t)(int64_t)-64, 1), EINVAL, "INT64_MAX");
    /* A request longer than the memory the process can have: refused with
     * ENOMEM before anything of it is touched (its buffer is not read). */
    setcache_file *big;
    expect_ok("create a file of 4 TiB (sparse)", setcache_create(store, "big", 1ULL << 42, &big));
    expect("submit_read: no memory for 4 TiB", setcache_submit_read(q, big, buf, 1ULL << 42, 0, 2),
           ENOMEM, "no memory");
    /* Past one request's limit, however much memory the process may have:
     * refused before its buffer is allocated. */
    expect("submit_read: past one request's limit",
           setcache_submit_read(q, big, buf, 3ULL << 30, 0, 3), ENOMEM, "at most");
    expect_ok("close big", setcache_close(big));
    expect_ok("delete big", setcache_delete(store, "big"));
    struct setcache_completion c[2];
    expect("poll: min above max", setcache_poll(q, c, 1, 2), EINVAL, "above");
    expect("poll: NULL array", setcache_poll(q, NULL, 2, 0), EINVAL, "NULL");

    const void *data;
    size_t len;
    expect("pin: past the end", setcache_pin(file, 10000, &data, &len, &pin), EFBIG, "past the end");
    expect("pin: negative offset", setcache_pin(file, (uint64_t)(int64_t)-1, &data, &len, &pin),
           EINVAL, "INT64_MAX");
    expect("pin_mut: past the end", setcache_pin_mut(file, 10000, (void **)&data, &len, &pin),
           EFBIG, "past the end");
    expect("pin_mut: NULL output", setcache_pin_mut(file, 0, NULL, &len, &pin), EINVAL, "NULL");
    expect("pin_mut: NULL file", setcache_pin_mut(NULL, 0, (void **)&data, &len, &pin), EINVAL,
           "NULL");
    expect("store_sync: NULL", setcache_store_sync(NULL), EINVAL, "NULL");
    expect_ok("store_sync", setcache_store_sync(store));
    expect_ok("pin_mut", setcache_pin_mut(file, 0, (void **)&data, &len, &pin));
    setcache_page *again = NULL;
    expect("pin: a page this thread holds mutably", setcache_pin(file, 0, &data, &len, &again),
           EDEADLK, "guard");
    /* Calls that would wait for this thread's own pin fail at once. */
    expect("sync: a page this thread pins for writing", setcache_sync(file), EDEADLK, NULL);
    expect("store_sync: the same", setcache_store_sync(store), EDEADLK, NULL);
    expect("set_len: a cut over the same", setcache_set_len(file, 100), EDEADLK, NULL);
    expect_ok("  the length stays", setcache_len(file) == 10000 ? 0 : -1);
    expect("delete: a file this thread pins a page of", setcache_delete(store, "f"), EDEADLK,
           "guard");
    expect_ok("  the file stays", setcache_len(file) == 10000 ? 0 : -1);
    {
        /* Queued, the same read fails in its completion, at once. */
        char one[16];
        expect_ok("submit_read: a page this thread pins for writing",
                  setcache_submit_read(q, file, one, sizeof one, 8, 99));
        struct setcache_completion done;
        expect_ok("poll it", setcache_poll(q, &done, 1, 1) == 1 ? 0 : -1);
        expect("  its completion", done.result, EDEADLK, "guard");
    }
    expect("close: a file with a pin held", setcache_close(file), EBUSY, "pins");
    expect("store_close: files open", setcache_store_close(store), EBUSY, "still open");
    expect("store_discard: files open", setcache_store_discard(store), EBUSY, "still open");
    expect("store_discard: NULL", setcache_store_discard(NULL), EINVAL, "NULL");
    /* A handle of another kind, cast: refused by its tag, not read as a file. */
    expect("len: a store handle cast to a file", setcache_len((setcache_file *)store), EBADF,
           "not a live file handle");
    expect("unpin: a file handle cast to a pin", setcache_unpin((setcache_page *)file), EBADF,
           "not a live pin handle");

    struct other o = {.q = q, .pin = pin, .file = file};
    pthread_t t;
    pthread_create(&t, NULL, from_other_thread, &o);
    pthread_join(t, NULL);
    expect("queue_free from another thread", o.queue_rc, EPERM, NULL);
    expect_ok("  its message names the other thread", strstr(o.queue_msg, "another thread") ? 0 : -1);
    expect("unpin from another thread", o.pin_rc, EPERM, NULL);
    expect("submit_read from another thread", o.submit_rc, EPERM, NULL);
    expect("poll from another thread", o.poll_rc, EPERM, NULL);
    expect_ok("  its message names the other thread", strstr(o.pin_msg, "another thread") ? 0 : -1);

    expect_ok("unpin", setcache_unpin(pin));
    {
        /* 64 pins a thread may hold; the 65th is refused, and once one goes
         * another may come. */
        setcache_page *pins[65];
        int taken = 0;
        for (int i = 0; i < 64; i++)
            if (setcache_pin(file, 0, &data, &len, &pins[i]) == 0)
                taken++;
        expect_ok("64 pins of one page", taken == 64 ? 0 : -1);
        expect("pin: the 65th", setcache_pin(file, 0, &data, &len, &pins[64]), EMFILE,
               "the most a thread may");
        expect_ok("unpin one of 64", setcache_unpin(pins[63]));
        expect_ok("pin: the 64th again", setcache_pin(file, 4096, &data, &len, &pins[63]));
        int freed = 0;
        for (int i = 0; i < 64; i++)
            if (setcache_unpin(pins[i]) == 0)
                freed++;
        expect_ok("unpin all 64", freed == 64 ? 0 : -1);
    }
    {
        /* A queue freed with reads submitted and never polled: its reads
         * end inside the free, and nothing is written to their buffers
         * after it returns. */
        static char bufs[4][512];
        for (int i = 0; i < 4; i++)
            expect_ok("submit_read, never polled",
                      setcache_submit_read(q, file, bufs[i], 512, (uint64_t)i * 2048, 10 + i));
    }
    expect_ok("queue_free", setcache_queue_free(q));
    expect_ok("delete g", setcache_delete(store, "g"));
    expect("pread: a deleted file's handle", setcache_pread(other, buf, 1, 0), ESTALE, "deleted");
    expect("len: a deleted file's handle", setcache_len(other), ESTALE, "deleted");
    expect("pwrite of nothing: a deleted file's handle", setcache_pwrite(other, NULL, 0, 0), ESTALE,
           "deleted");
    expect("set_len: a deleted file's handle", setcache_set_len(other, 0), ESTALE, "deleted");
    expect("sync: a deleted file's handle", setcache_sync(other), ESTALE, "deleted");
    expect("accept_loss: a deleted file's handle", setcache_accept_loss(other), ESTALE, "deleted");
    expect("loss_pending: a deleted file's handle", setcache_loss_pending(other), ESTALE,
           "deleted");
    expect_ok("close g", setcache_close(other));
    expect_ok("close f", setcache_close(file));
    expect_ok("delete f", setcache_delete(store, "f"));
    expect("unpin: NULL", setcache_unpin(NULL), EINVAL, "NULL");
    expect("queue_free: NULL", setcache_queue_free(NULL), EINVAL, "NULL");
    expect("close: NULL", setcache_close(NULL), EINVAL, "NULL");
    {
        /* A pin of the last, partial page: this thread still grows the file
         * past it (the growth leaves the page alone), not over it. */
        setcache_file *tail;
        setcache_page *tp;
        const void *tdata;
        size_t tlen;
        expect_ok("create tail", setcache_create(store, "tail", 6000, &tail));
        expect_ok("pin tail's last page", setcache_pin(tail, 5000, &tdata, &tlen, &tp));
        expect_ok("pwrite past the pinned last page",
                  setcache_pwrite(tail, "A", 1, 8192) == 1 ? 0 : -1);
        expect_ok("set_len: a growth past it", setcache_set_len(tail, 1 << 20));
        expect("pwrite: into the pinned page", setcache_pwrite(tail, "B", 1, 5000), EDEADLK, NULL);
        expect_ok("unpin tail", setcache_unpin(tp));
        expect_ok("close tail", setcache_close(tail));
        expect_ok("delete tail", setcache_delete(store, "tail"));
    }
    expect_ok("store_close", setcache_store_close(store));
    expect("store_close: NULL", setcache_store_close(NULL), EINVAL, "NULL");
    /* A store given up: its dirty pages are dropped, and the directories
     * can be opened again at once. */
    expect_ok("store_open again", setcache_store_open(devices, 2, &small, &store));
    expect_ok("create h", setcache_create(store, "h", 100, &file));
    expect_ok("pwrite h", setcache_pwrite(file, "dropped", 7, 0));
    expect_ok("close h", setcache_close(file));
    expect_ok("store_discard", setcache_store_discard(store));
    expect_ok("store_open after a discard", setcache_store_open(devices, 2, &small, &store));
    expect_ok("delete h", setcache_delete(store, "h"));
    expect_ok("queue_new with no file open", setcache_queue_new(store, 2, &q));
    expect("store_close: a queue open", setcache_store_close(store), EBUSY, "still open");
    expect("store_discard: a queue open", setcache_store_discard(store), EBUSY, "still open");
    expect_ok("queue_free", setcache_queue_free(q));
    expect_ok("store_close", setcache_store_close(store));
    printf("%d failures\n", failures);
    return failures != 0;
}
