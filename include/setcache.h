/*
 * setcache: a user-space, set-associative, parallel page cache over files
 * striped across device directories. The C interface (libsetcache_c.so and
 * libsetcache_c.a; Linux only; link with -lsetcache_c, and -lpthread -ldl -lm
 * for the static library).
 *
 * Every call is safe to make from any thread (queues and pins belong to the
 * thread that made them, and refuse others with -EPERM), holds the thread's
 * cancellation off while it runs (pthread_cancel takes effect at the thread's
 * next cancellation point outside the library: a thread that only waits in
 * the library's calls, a queue's wait say, is not cancelled there), returns 0 (or a count
 * of bytes or items) on success and a negative errno on failure, and leaves a
 * message naming what was wrong that setcache_last_error() returns on the
 * same thread. Offsets and lengths are in bytes and need no alignment; an
 * offset or file length above INT64_MAX (a negative off_t cast to uint64_t)
 * fails -EINVAL, as the kernel refuses a negative one (a setcache_pwrite
 * whose offset plus length passes 2^64 fails -EFBIG first). A length given
 * to setcache_create or setcache_set_len past the store's largest file (2^52
 * bytes with 4 KiB pages), or a setcache_pwrite from its end on, fails
 * -EFBIG, as the kernel's past a file system's largest file; a
 * setcache_pwrite that only ends past it writes the part before it and
 * returns that count, as the kernel's. (The device directories' file system
 * may stop short of that length: ext4's largest file is 16 TiB, and a length
 * or write past what it takes fails -EFBIG.)
 *
 * A handle must not be used after the call that frees it returned 0 (or -EIO
 * with an internal error: setcache_close, setcache_queue_free,
 * setcache_store_discard and setcache_unpin have taken the handle by then; a
 * failed write of setcache_store_close keeps its store): a second close is
 * undefined, as a second free() is. Each handle begins with a word naming its
 * kind: a handle of another kind (cast), or a freed one whose memory was not
 * yet reused, fails -EBADF, which catches many such mistakes but is no
 * promise. Nor may a call on a file, or on a store and its
 * files, run in another thread while that file or store is being closed:
 * -EBUSY guards against handles still held, not against calls made at the
 * same moment (the close may free what the other call reads). The same holds
 * for a queue or a pin: another thread's call on one is refused -EPERM only
 * while its owner has not begun to free it (the free may release what that
 * call reads). Release a
 * thread's pins and free its queues before
 * the thread exits: no other thread may, and until then a file with a pin
 * cannot be closed (-EBUSY), nor the store while any pin or queue of it
 * lives, and a sync waits for a page pinned for writing.
 *
 * A child made by fork() cannot use the handles its parent made: they hold
 * the parent's store (its threads, rings and dirty pages). Every call with
 * one fails -EBADF, and setcache_close, setcache_queue_free, setcache_unpin,
 * setcache_store_close and setcache_store_discard let it go there, writing
 * nothing, and return 0. The child may open a store of its own on other
 * directories (the parent holds its own). A child made by a call that runs
 * no pthread_atfork handler (the raw clone system call, _Fork, vfork) is told
 * apart only by the calls that free handles, which return 0 there and change
 * nothing (a vfork child shares the parent's memory): it must make no other
 * call with its parent's handles.
 *
 * A program that ends with stores still open keeps what it wrote, as on a
 * local file system: when the process exits normally (exit, or a return from
 * main) the library writes and syncs every store still open, waiting at most
 * two seconds for pages another thread pins or a queue writes back (the
 * rest of such a file, and its length, are written and synced; what then
 * fails is said on stderr, and the pages held are lost; another thread's
 * sync of a file is waited for up to five seconds),
 * nor more than a minute without progress (an exit from a signal
 * handler that interrupted a call of this library, whose locks the exiting
 * thread then holds); _exit, abort or a signal that ends the process lose
 * what no sync covered. The library defines pthread_exit, passing every call
 * on to the C library's: when the main thread ends by it with a store open,
 * the process ends (by exit(0)) once only the store's threads are left, as
 * it would after its last thread, instead of never. (Not when the library is
 * loaded by dlopen, whose definitions come after the C library's; in a fully
 * static program, with no C library's pthread_exit to pass the call to, the
 * thread is cancelled instead: its cleanup handlers run, and a join gets
 * PTHREAD_CANCELED.)
 *
 * Pages in use wait for their user, up to one second: another thread's write
 * (pwrite, a queued write, pin_mut, a shrinking set_len) over a page pinned
 * fails -EBUSY after it (a pwrite
 * that grows the file may wait twice, once more to cut the length back: up
 * to two seconds). A page whose read or write-back is in flight is waited
 * for longer, as a slow device takes, up to 60 seconds (then -EBUSY; 30,
 * then -EDEADLK, for a thread whose queues hold I/O; one, then -EDEADLK,
 * for a read in of the page by this thread's own queue): a queue's read or
 * write-back ends only when its thread polls, so a thread that waits for
 * another while its queue holds I/O unpolled makes the other's calls over
 * those pages wait that long; a call that would wait for this thread's own pin (a write
 * over a page it pins, a read of a page it pins for writing, queued on this
 * thread's queue or not, a sync or delete of the file, a set_len that drops or
 * clears a page it pins (the page the shorter length ends in, or a later one;
 * after a shrink, a growth clears the old last page's tail too, so a write or
 * set_len past a page it pins there is refused until the file has grown once),
 * the store's sync),
 * or a set_len that would drop pages this thread's queue still reads or
 * writes back, fails -EDEADLK at once (a queued one in its completion). A page that needs a frame in a cache set
 * every page of which is pinned waits for a pin to go, up to one second, and
 * fails -EBUSY, whoever holds the pins (this thread too). A sync, though, waits without limit
 * for a page a queue is writing back: poll a queue until nothing is in flight
 * before a thread waits for another's sync. A sync (of a file or the store)
 * that would wait behind another thread's sync which itself waits for a page
 * this thread pins or this thread's queue reads or writes back fails -EDEADLK
 * (at once, or after a pin wait), as would a wait for itself. And a blocking read (pread,
 * pin) of a page another thread pins for writing waits until that pin goes,
 * as a reader waits for a writer's lock, with no limit, unless this thread's
 * queues hold reads or write-backs in flight (the writer may be waiting for
 * one of them): then it fails -EDEADLK after 30 pin waits. A queued read of
 * such a page fails -EBUSY after one second. A thread that holds a pin_mut
 * must not wait for a thread that reads its page.
 *
 * This header is checked against the library's Rust source by its tests.
 */
#ifndef SETCACHE_H
#define SETCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An open store: one directory per device, and a page cache in front. */
typedef struct setcache_store setcache_store;
/* An open file of a store. */
typedef struct setcache_file setcache_file;
/* A queue of asynchronous reads and writes, owned by the thread that made it. */
typedef struct setcache_queue setcache_queue;
/* A cached page held in memory (not evicted, not written) until unpinned. */
typedef struct setcache_page setcache_page;

/* How a store is opened. Zeroed fields take the defaults. */
struct setcache_options {
    /* Bytes of page cache (default 256 MiB). */
    uint64_t cache_bytes;
    /* Page size: a power of two from 512 to 1 MiB (default 4096). */
    uint32_t page_size;
    /* Pages per cache set, 4 to 32 (default 12). */
    uint32_t set_pages;
    /* Largest readahead window in bytes (default 8 MiB); UINT64_MAX: off. */
    uint64_t readahead_bytes;
    /* The partitions the cache's sets are divided into (partitioned mode: a
       page's candidate sets all in one partition, each partition's memory
       together): 0 or 1 for none (default), 2 to 64, or
       SETCACHE_PARTITIONS_PER_NODE for one per NUMA node. */
    uint32_t partitions;
    /* Zero. */
    uint32_t reserved;
};

/* setcache_options.partitions: one partition per NUMA node. */
#define SETCACHE_PARTITIONS_PER_NODE UINT32_MAX

/* One finished asynchronous request. */
struct setcache_completion {
    /* The tag it was submitted with. */
    uint64_t tag;
    /* Bytes transferred, or a negative errno (see setcache_last_error on the
     * polling thread for the message of the last failed one). */
    int64_t result;
};

/* A snapshot of a store's counters. */
struct setcache_stats {
    uint64_t hits;            /* lookups that found their page cached */
    uint64_t misses;          /* lookups that had to read their page */
    uint64_t evictions;       /* clean pages evicted to make room */
    uint64_t dirty_evictions; /* dirty pages written back to make room */
    uint64_t readahead_pages; /* pages read ahead of sequential readers */
    uint64_t dirty_pages;     /* pages written and not yet written back (a walk of the cache) */
    uint64_t cached_pages;    /* page frames of the cache */
    uint64_t bytes_read;      /* bytes read from the devices */
    uint64_t bytes_written;   /* bytes written to the devices */
};

/* This thread's message for its last failed call ("" if none). Valid until
 * this thread's next call into the library. */
const char *setcache_last_error(void);

/* Open the store on `ndevices` device directories (each must exist). `opts`
 * may be NULL. A directory in use by another open store, in this process or
 * another, is refused with -EBUSY; one missing or not a directory with
 * -ENOTDIR, one without write bits with -EACCES, one on a read-only file
 * system with -EROFS. */
int setcache_store_open(const char *const *devices, size_t ndevices,
                        const struct setcache_options *opts, setcache_store **out);
/* Write every dirty page and close the store. -EBUSY (and nothing closed)
 * while files or queues of it are open. Any other error is the final write's,
 * and the store stays open (the handle too, its pages kept): free space and
 * close again, or give the pages up with setcache_store_discard. A file with
 * a loss no handle accepted fails it every time, as in setcache_store_sync
 * (the message names the file): open that file, setcache_accept_loss, close
 * it, and close the store again. */
int setcache_store_close(setcache_store *store);
/* Close the store without writing its dirty pages (they are lost): after a
 * failed setcache_store_close. -EBUSY while files or queues of it are open. */
int setcache_store_discard(setcache_store *store);
/* Write every dirty page of every file and make it durable. Every file is
 * synced; the first error is returned. A file with a loss no handle accepted
 * fails it every time: open that file, setcache_accept_loss, and sync again
 * to hear of the next. */
int setcache_store_sync(setcache_store *store);
/* Counters of the store. */
int setcache_stats_get(setcache_store *store, struct setcache_stats *out);

/* Create a file of `len` bytes (zeros); -EEXIST if the name is taken. */
int setcache_create(setcache_store *store, const char *name, uint64_t len,
                    setcache_file **out);
/* Open an existing file; -ENOENT if there is none. A loss an earlier failed
 * fsync left (data the kernel may have dropped) stays: the file's syncs, through
 * every handle, keep failing until setcache_accept_loss. */
int setcache_open(setcache_store *store, const char *name, setcache_file **out);
/* Accept the loss an earlier failed fsync left, once some sync has reported
 * it (a loss no sync reported yet stays, for the next sync to report): this
 * handle's syncs, and those of handles already told of it, report only what
 * fails from now on; a handle open when it happened and never told fails once
 * more. 1 if this handle had one to accept, 0 if not. */
int setcache_accept_loss(setcache_file *file);
/* Whether this handle's sync would fail now on a loss an earlier failed fsync
 * left (1) or not (0): a sync's -errno is the failed fsync's (-ENOSPC, say),
 * which a retry cannot pass while the loss stands; this tells the two apart
 * without a sync. */
int setcache_loss_pending(setcache_file *file);
/* Close a file (its dirty pages stay cached and are written back later; a
 * failure then is reported by a later sync of the file or the store, not
 * here: call setcache_sync first to know). -EBUSY while pins of it are held. */
int setcache_close(setcache_file *file);
/* Delete a file; open handles of it fail with -ESTALE afterwards. An error may
 * come after the file was deleted (its cached pages could not all be dropped):
 * setcache_open tells (-ENOENT). -EDEADLK at once, the file kept, while this
 * thread pins a page of it or a queue of this thread reads or writes back one
 * of its pages (poll the queue first). */
int setcache_delete(setcache_store *store, const char *name);
/* Rename a file; -EEXIST if `to` exists. Open handles follow it. */
int setcache_rename(setcache_store *store, const char *from, const char *to);
/* Call `each(name, ctx)` for every file of the store, in name order; stops
 * early (returning what `each` returned) when `each` returns non-zero.
 * Returns the number of files otherwise (at most INT_MAX). A negative value
 * from `each` reads like this call's own -errno: stop with a positive one, or
 * note why in `ctx`. `each` should return: a C++ exception thrown through
 * this call ends the process (abort, as a throw from a noexcept function
 * does); a longjmp out of it is undefined, and so is closing or discarding
 * the store from inside it. */
int setcache_list(setcache_store *store, int (*each)(const char *name, void *ctx), void *ctx);

/* Read up to `len` bytes at `offset`: the bytes read (fewer at the end of the
 * file, 0 at or past it). */
int64_t setcache_pread(setcache_file *file, void *buf, size_t len, uint64_t offset);
/* Write `len` bytes at `offset`, growing the file if they reach past its end.
 * Readers see the longer length only once the bytes are in; a write that fails
 * leaves the length as it was (unless cutting it back fails too), though pages
 * before the one that failed may hold the new bytes (the result is the error,
 * not a count). Writes past the end of one file run one at a time. */
int64_t setcache_pwrite(setcache_file *file, const void *buf, size_t len, uint64_t offset);
/* The file's length in bytes. */
int64_t setcache_len(setcache_file *file);
/* Set the file's length (growing adds zeros). An error may come after the new
 * length took effect (shrinking, a page past the new end another thread pins
 * stays cached: -EBUSY): setcache_len tells which. */
int setcache_set_len(setcache_file *file, uint64_t len);
/* Reserve space on the devices for `len` bytes at `offset` (the whole pages
 * they touch, as pages are written back whole), inside the file or past its
 * end, so that writing them back cannot fail later for want of space (what
 * posix_fallocate promises); the length and the bytes do not change. A
 * shorter length that cuts the range off frees its space. -EINVAL for a zero
 * `len`, -EFBIG for a range past the store's largest file, -ENOSPC when a
 * device lacks the room (part of the range may be taken), -EOPNOTSUPP where a
 * device's file system cannot allocate ahead, -EBADF on a read-only handle. */
int setcache_reserve(setcache_file *file, uint64_t offset, uint64_t len);
/* Write the file's dirty pages and make them durable. After a failed fsync
 * left a loss (pages written before it had left the cache), this sync and
 * every later one through any handle fail with that fsync's -errno until
 * setcache_accept_loss. */
int setcache_sync(setcache_file *file);

/* A queue keeping up to `depth` requests in flight, for this thread.
 * -ENOMEM if its tables (less than 1 KiB a slot) cannot be allocated now. */
int setcache_queue_new(setcache_store *store, uint32_t depth, setcache_queue **out);
/* Wait for the queue's requests (their completions are dropped) and free it. */
int setcache_queue_free(setcache_queue *queue);
/* Queue a read of `len` bytes at `offset` into `buf` (which must stay valid
 * until its completion is polled); the read must lie inside the file (-EINVAL
 * past its end, or for `len` 0). A queued read or write moves at most
 * 0x7ffff000 bytes (-ENOMEM past that). The range is checked at the submit;
 * a request whose file another thread shrank below it before the request
 * started completes with -EFBIG, one given a file of another store with
 * -EINVAL, and one whose file was deleted meanwhile with -ESTALE. A queue's
 * requests run in any order: two writes in flight over the same bytes may
 * land interleaved, page by page. The pages a queue's requests use stay busy for other threads until
 * this thread polls their completions. */
int setcache_submit_read(setcache_queue *queue, setcache_file *file, void *buf, size_t len,
                         uint64_t offset, uint64_t tag);
/* Queue a write of `len` bytes from `buf` (copied at once) at `offset`,
 * inside the file. */
int setcache_submit_write(setcache_queue *queue, setcache_file *file, const void *buf,
                          size_t len, uint64_t offset, uint64_t tag);
/* Collect up to `max` completions, waiting until at least `min` are there
 * (or none is in flight). Returns how many were written to `out`. */
int setcache_poll(setcache_queue *queue, struct setcache_completion *out, size_t max,
                  size_t min);

/* Pin the page holding byte `offset`: `*data` points at its cached bytes (the
 * page starts at offset - offset % page_size) and `*len` says how many (a
 * file's last page is shorter). Reads it first on a
 * miss. A pin belongs to this thread; a thread holds at most 64 (-EMFILE past
 * that). -EFBIG at or past the end of the file. `*data` stays valid until
 * setcache_unpin, and its bytes unchanged while the pin is held. */
int setcache_pin(setcache_file *file, uint64_t offset, const void **data, size_t *len,
                 setcache_page **out);
/* As setcache_pin, for writing in place: exclusive while held, and the page
 * is dirty once unpinned. */
int setcache_pin_mut(setcache_file *file, uint64_t offset, void **data, size_t *len,
                     setcache_page **out);
/* Let the page go. */
int setcache_unpin(setcache_page *pin);

#ifdef __cplusplus
}
#endif

#endif
