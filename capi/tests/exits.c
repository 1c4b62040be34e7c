/* A program that ends without closing its store keeps what it wrote, as on a
 * local file system: at `exit` (or a return from main) the library writes
 * and syncs every store still open; when the main thread ends by
 * pthread_exit, the process ends with the program's last thread (the
 * store's threads do not keep it alive) and the same happens.
 *
 *   exits DEVICE_DIR_0 DEVICE_DIR_1 MODE
 *
 * MODE: "exit" (write, then exit(0)), "return" (write, then return from
 * main), "pthread_exit" (write; a second thread writes 200 ms later; the
 * main thread ends by pthread_exit), "pinned" (write; another thread pins a
 * page of another file for writing and never lets it go; exit(0) must not
 * wait for it), "fork" (the main thread ends by pthread_exit; a worker's
 * child opens a store of its own and works 200 ms, then exits 7: it must
 * not be ended early), or "check" (print what each file holds).
 */
#define _GNU_SOURCE
#include <setcache.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static setcache_store *store;

static void die(const char *what, long long rc) {
    fprintf(stderr, "%s: %lld: %s\n", what, rc, setcache_last_error());
    exit(2);
}

static void put(const char *name, const char *text) {
    setcache_file *f;
    int rc = setcache_create(store, name, 0, &f);
    if (rc < 0)
        die("create", rc);
    long long n = setcache_pwrite(f, text, strlen(text), 0);
    if (n != (long long)strlen(text))
        die("pwrite", n);
    if ((rc = setcache_close(f)) < 0)
        die("close", rc);
}

static void *later(void *arg) {
    (void)arg;
    struct timespec t = {0, 200 * 1000 * 1000};
    nanosleep(&t, NULL);
    put("late", "written after main ended");
    return NULL;
}

static pthread_mutex_t never = PTHREAD_MUTEX_INITIALIZER;
static volatile int pinned;

static void *hold(void *arg) {
    (void)arg;
    setcache_file *g;
    setcache_page *pin;
    void *data;
    size_t len;
    int rc = setcache_create(store, "held", 4096, &g);
    if (rc < 0)
        die("create held", rc);
    if ((rc = setcache_pin_mut(g, 0, &data, &len, &pin)) < 0)
        die("pin_mut", rc);
    memcpy(data, "dirty", 5);
    pinned = 1;
    /* Never let go (main holds the lock): the exit must not wait for this pin. */
    pthread_mutex_lock(&never);
    return NULL;
}

static const char *dev_dirs[2];

/* A worker of a process whose main thread ended: its child (made by fork)
 * opens a store of its own and works on; it must not be ended early by
 * what the parent's main thread did. The child's exit status is kept. */
static void *forker(void *arg) {
    (void)arg;
    pid_t pid = fork();
    if (pid == 0) {
        char d[2][4200];
        const char *cd[2];
        for (int i = 0; i < 2; i++) {
            snprintf(d[i], sizeof d[i], "%s/child", dev_dirs[i]);
            mkdir(d[i], 0755);
            cd[i] = d[i];
        }
        setcache_store *cs;
        if (setcache_store_open(cd, 2, NULL, &cs) < 0)
            _exit(3);
        setcache_file *f;
        if (setcache_create(cs, "c", 0, &f) < 0)
            _exit(4);
        for (int i = 0; i < 20; i++) {
            struct timespec t = {0, 10 * 1000 * 1000};
            nanosleep(&t, NULL);
            if (setcache_pwrite(f, "x", 1, (uint64_t)i) != 1)
                _exit(5);
        }
        setcache_close(f);
        _exit(setcache_store_close(cs) < 0 ? 6 : 7);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    char text[64];
    snprintf(text, sizeof text, "child exited %d", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    put("status", text);
    return NULL;
}

/* A thread that writes and syncs its own file until it is cancelled, at its
 * own cancellation point (the library's calls hold cancellation off). */
static void *writer(void *arg) {
    char name[16], buf[8192];
    snprintf(name, sizeof name, "w%ld", (long)(intptr_t)arg);
    memset(buf, 'w', sizeof buf);
    setcache_file *f;
    if (setcache_create(store, name, 0, &f) < 0 && setcache_open(store, name, &f) < 0)
        return NULL;
    for (uint64_t i = 0;; i++) {
        setcache_pwrite(f, buf, sizeof buf, (i % 64) * sizeof buf);
        setcache_sync(f);
        pthread_testcancel();
    }
    return NULL;
}

static void show(const char *name) {
    setcache_file *f;
    char buf[64] = {0};
    int rc = setcache_open(store, name, &f);
    if (rc < 0) {
        printf("%s: %s\n", name, setcache_last_error());
        return;
    }
    long long n = setcache_pread(f, buf, sizeof buf - 1, 0);
    printf("%s: %lld [%s]\n", name, n, n > 0 ? buf : "");
    setcache_close(f);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: exits DEVICE_DIR_0 DEVICE_DIR_1 MODE\n");
        return 2;
    }
    const char *devices[2] = {argv[1], argv[2]};
    int rc = setcache_store_open(devices, 2, NULL, &store);
    if (rc < 0)
        die("store_open", rc);
    const char *mode = argv[3];
    if (strcmp(mode, "check") == 0) {
        show("kept");
        show("late");
        show("held");
        show("status");
        fflush(stdout);
        return setcache_store_close(store) < 0 ? 1 : 0;
    }
    put("kept", "written before the end");
    if (strcmp(mode, "exit") == 0)
        exit(0);
    if (strcmp(mode, "return") == 0)
        return 0;
    if (strcmp(mode, "pthread_exit") == 0) {
        pthread_t t;
        pthread_create(&t, NULL, later, NULL);
        pthread_detach(t);
        pthread_exit(NULL);
    }
    if (strcmp(mode, "fork") == 0) {
        dev_dirs[0] = argv[1];
        dev_dirs[1] = argv[2];
        pthread_t t;
        pthread_create(&t, NULL, forker, NULL);
        pthread_detach(t);
        pthread_exit(NULL);
    }
    if (strcmp(mode, "cancel") == 0) {
        /* Threads cancelled while they write and sync through the library:
         * none is cancelled inside it, and the process goes on. */
        int cancelled = 0;
        for (int round = 0; round < 20; round++) {
            pthread_t t[2];
            for (long k = 0; k < 2; k++)
                pthread_create(&t[k], NULL, writer, (void *)(intptr_t)k);
            usleep(5000);
            for (int k = 0; k < 2; k++) {
                void *r;
                pthread_cancel(t[k]);
                pthread_join(t[k], &r);
                cancelled += r == PTHREAD_CANCELED;
            }
        }
        char text[64];
        snprintf(text, sizeof text, "cancelled %d", cancelled);
        put("status", text);
        exit(0);
    }
    if (strcmp(mode, "pinned") == 0) {
        pthread_mutex_lock(&never);
        pthread_t t;
        pthread_create(&t, NULL, hold, NULL);
        while (!pinned)
            usleep(1000);
        exit(0);
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
