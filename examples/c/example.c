/* A tour of setcache's C interface: open a store on two device directories,
 * write and read a file through the cache, keep reads in flight on a queue,
 * pin a page, and print the counters.
 *
 *   cc examples/c/example.c -Iinclude -Ltarget/release -lsetcache_c \
 *      -Wl,-rpath,$PWD/target/release -o example
 *   ./example DEVICE_DIR_0 DEVICE_DIR_1
 */
#include <setcache.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                 \
    do {                                                                            \
        long long rc_ = (call);                                                     \
        if (rc_ < 0) {                                                              \
            fprintf(stderr, "%s failed (%lld): %s\n", #call, rc_, setcache_last_error()); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static int show(const char *name, void *ctx) {
    (void)ctx;
    printf("  file %s\n", name);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DEVICE_DIR_0 DEVICE_DIR_1\n", argv[0]);
        return 2;
    }
    const char *devices[] = {argv[1], argv[2]};
    struct setcache_options opts = {.cache_bytes = 16 << 20};
    setcache_store *store;
    CHECK(setcache_store_open(devices, 2, &opts, &store));

    setcache_file *file;
    CHECK(setcache_create(store, "greetings", 0, &file));
    const char *text = "hello from C, through a set-associative page cache\n";
    /* Writes at any offset and length; past the end, the file grows. */
    CHECK(setcache_pwrite(file, text, strlen(text), 10000));
    char back[128] = {0};
    CHECK(setcache_pread(file, back, strlen(text), 10000));
    printf("read back: %s", back);
    printf("length: %lld\n", (long long)setcache_len(file));

    /* Many reads in flight from one thread. */
    static char bufs[8][512];
    setcache_queue *q;
    CHECK(setcache_queue_new(store, 8, &q));
    for (int i = 0; i < 8; i++)
        CHECK(setcache_submit_read(q, file, bufs[i], 512, (uint64_t)i * 1024, i));
    struct setcache_completion done[8];
    int got = 0;
    while (got < 8) {
        int n = setcache_poll(q, done + got, 8 - got, 1);
        CHECK(n);
        got += n;
    }
    printf("queue: %d reads done\n", got);
    CHECK(setcache_queue_free(q));

    /* A page in place, without a copy. */
    const void *page;
    size_t len;
    setcache_page *pin;
    CHECK(setcache_pin(file, 10000, &page, &len, &pin));
    /* The page holding byte 10000 starts at 10000 - 10000 % 4096 (4 KiB pages). */
    printf("pinned page: %zu bytes; at 10000: %.5s\n", len, (const char *)page + 10000 % 4096);
    CHECK(setcache_unpin(pin));

    CHECK(setcache_sync(file));
    CHECK(setcache_close(file));
    printf("files:\n");
    CHECK(setcache_list(store, show, NULL));
    struct setcache_stats st;
    CHECK(setcache_stats_get(store, &st));
    printf("hits %llu, misses %llu, bytes written %llu\n", (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.bytes_written);
    CHECK(setcache_delete(store, "greetings"));
    CHECK(setcache_store_close(store));
    return 0;
}
