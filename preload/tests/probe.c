/* A program that uses files the way ordinary programs do and prints what each
 * call returned, one line per call: the test runs it without the preload
 * library on a plain directory, with it on a plain directory, and with it on
 * SETCACHE_DIR, and compares the transcripts. It prints nothing that differs
 * between file systems for reasons of their own (inode numbers, times,
 * allocated blocks).
 *
 *   probe DIR            the common transcript
 *   probe DIR refused    calls a file of the store must refuse (mmap, mkdir)
 *   probe DIR fork       descriptors used by a child after fork
 *   probe DIR fork-race  children forked while a thread reads, closing
 *   probe DIR reopen     files closed, opened again, written, then a raw exit
 *   probe DIR underscore-exit _exit|_Exit  files written, left open, then that
 *   probe DIR cancel               threads cancelled while they write and sync
 *   probe DIR close-race PREFIX  the same while another thread stats each file
 *   probe DIR exit-writes  a write from an exit handler that runs late
 *   probe DIR late-dtor  writes from thread-specific values' destructors
 *   probe DIR cat NAME.. the bytes of each file named
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <limits.h>
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <termios.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <wchar.h>
#include <locale.h>

/* The C library's fortified readlink, which a program built with
 * _FORTIFY_SOURCE calls. */
extern ssize_t __readlink_chk(const char *path, char *buf, size_t len, size_t buflen);

#ifndef RWF_NOAPPEND
#define RWF_NOAPPEND 0x20
#endif

static char dir[4096];

static const char *path(const char *name) {
    static char buf[2][4200];
    static int which;
    which ^= 1;
    snprintf(buf[which], sizeof buf[which], "%s/%s", dir, name);
    return buf[which];
}

static void show(const char *what, long long rc) {
    if (rc < 0)
        printf("%-40s -1 %s\n", what, strerrorname_np(errno));
    else
        printf("%-40s %lld\n", what, rc);
}

/* The terminal calls on descriptor `fd`: a regular file is no terminal. */
static void tty_calls(int fd, const char *how) {
    char what[64], buf[64];
    struct termios t;
    errno = 0;
    int r = isatty(fd);
    snprintf(what, sizeof what, "isatty %s", how);
    printf("%-40s %d %s\n", what, r, strerrorname_np(errno));
    snprintf(what, sizeof what, "tcgetattr %s", how);
    show(what, tcgetattr(fd, &t));
    snprintf(what, sizeof what, "tcsetattr %s", how);
    memset(&t, 0, sizeof t);
    show(what, tcsetattr(fd, TCSANOW, &t));
    snprintf(what, sizeof what, "tcgetpgrp %s", how);
    show(what, tcgetpgrp(fd));
    snprintf(what, sizeof what, "tcflush %s", how);
    show(what, tcflush(fd, TCIFLUSH));
    snprintf(what, sizeof what, "tcdrain %s", how);
    show(what, tcdrain(fd));
    errno = 0;
    char *name = ttyname(fd);
    snprintf(what, sizeof what, "ttyname %s", how);
    printf("%-40s %s %s\n", what, name ? "a name" : "NULL", strerrorname_np(errno));
    r = ttyname_r(fd, buf, sizeof buf);
    snprintf(what, sizeof what, "ttyname_r %s", how);
    printf("%-40s %s\n", what, r ? strerrorname_np(r) : "0");
}

static unsigned sum(const unsigned char *p, size_t n) {
    unsigned h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void show_size(const char *what, const char *name) {
    struct stat st;
    int rc = stat(path(name), &st);
    if (rc < 0)
        show(what, rc);
    else
        printf("%-40s size %lld regular %d mode %o\n", what, (long long)st.st_size,
               S_ISREG(st.st_mode), st.st_mode & 0777);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int no_dots(const struct dirent *e) {
    return e->d_name[0] != '.';
}

static void list(const char *what) {
    DIR *d = opendir(dir);
    if (!d) {
        show(what, -1);
        return;
    }
    char *names[64];
    int n = 0, ino_differs = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 64) {
        names[n++] = strdup(e->d_name);
        /* An entry's inode number is its stat's (the parent's aside). */
        struct stat st;
        if (strcmp(e->d_name, "..") != 0 &&
            (stat(path(e->d_name), &st) != 0 || st.st_ino != e->d_ino))
            ino_differs++;
    }
    closedir(d);
    printf("%-40s %d\n", "  entries whose d_ino is not st_ino", ino_differs);
    qsort(names, n, sizeof names[0], by_name);
    printf("%-40s", what);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
    /* scandir, which the C library runs without the opendir above. */
    struct dirent **l;
    n = scandir(dir, &l, no_dots, alphasort);
    if (n < 0) {
        show("scandir", n);
        return;
    }
    printf("%-40s", "  (scandir)");
    for (int i = 0; i < n; i++) {
        printf(" %s", l[i]->d_name);
        free(l[i]);
    }
    free(l);
    printf("\n");
}

/* Edges a program meets: an open that fails for want of a descriptor,
 * fdopen's modes, a stream whose writes fail, pwritev2 with RWF_APPEND. */
static void edges(void) {
    int fd = open(path("t"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    show("write t", write(fd, "kept", 4));
    close(fd);
    /* With no descriptor number free, an open changes nothing (t is held
     * open meanwhile, so that nothing but the new number is missing). */
    int hold = open(path("t"), O_RDONLY);
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    int next = dup(0);
    close(next);
    low = old;
    low.rlim_cur = next;
    setrlimit(RLIMIT_NOFILE, &low);
    int trunc = open(path("t"), O_WRONLY | O_TRUNC);
    int errno_trunc = errno;
    int creat = open(path("new"), O_CREAT | O_WRONLY, 0644);
    int errno_creat = errno;
    setrlimit(RLIMIT_NOFILE, &old);
    close(hold);
    errno = errno_trunc;
    show("open O_TRUNC, no descriptor free", trunc);
    errno = errno_creat;
    show("open O_CREAT, no descriptor free", creat);
    show_size("stat t after", "t");
    show("access new", access(path("new"), F_OK));

    /* fdopen "a" appends, whatever the descriptor's position. */
    fd = open(path("t"), O_RDWR);
    FILE *f = fdopen(fd, "a");
    show("fdopen a", f ? 0 : -1);
    if (f) {
        show("fputs to it", fputs("more", f));
        show("fclose", fclose(f));
    }
    show_size("stat t after fdopen a", "t");
    fd = open(path("t"), O_RDONLY);
    f = fdopen(fd, "w");
    show("fdopen w of a read-only descriptor", f ? 0 : -1);
    if (f)
        fclose(f);
    else
        close(fd);

    /* A stream whose descriptor turned read-only under it: its writes fail,
     * and fwrite says so (no bytes, the error flag). */
    fd = open(path("t"), O_RDWR);
    f = fdopen(fd, "r+");
    int ro = open(path("t"), O_RDONLY);
    dup2(ro, fd);
    close(ro);
    static char big[16384];
    memset(big, 'x', sizeof big);
    size_t put = f ? fwrite(big, 1, sizeof big, f) : 0;
    printf("%-40s %zu error %d\n", "fwrite of 16 KiB that fails", put, f ? ferror(f) : -1);
    if (f)
        fclose(f);
    show_size("stat t after the failed fwrite", "t");

    /* pwritev2 at offset -1 with RWF_APPEND: at the end, and the position
     * moves past it. */
    fd = open(path("v"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    struct iovec iv = {"AAAA", 4};
    show("pwritev2 RWF_APPEND at -1", pwritev2(fd, &iv, 1, -1, RWF_APPEND));
    show("position after", lseek(fd, 0, SEEK_CUR));
    show("write after", write(fd, "BBBB", 4));
    char got[16] = "";
    show("pread", pread(fd, got, sizeof got - 1, 0));
    printf("%-40s %s\n", "  bytes", got);
    close(fd);
    /* RWF_NOAPPEND (Linux 6.9 on): at the offset or the position on a
     * descriptor open for appending; not with RWF_APPEND. */
    fd = open(path("v"), O_RDWR | O_APPEND);
    struct iovec cc = {"CC", 2}, dd = {"DD", 2}, ee = {"EE", 2};
    show("pwritev2 RWF_NOAPPEND at 1", pwritev2(fd, &cc, 1, 1, RWF_NOAPPEND));
    show("position after", lseek(fd, 0, SEEK_CUR));
    show("pwritev2 RWF_NOAPPEND at -1", pwritev2(fd, &dd, 1, -1, RWF_NOAPPEND));
    show("position after", lseek(fd, 0, SEEK_CUR));
    show("pwritev2 RWF_APPEND|RWF_NOAPPEND at 5",
         pwritev2(fd, &ee, 1, 5, RWF_APPEND | RWF_NOAPPEND));
    show("pwritev2 at 0, no flag", pwritev2(fd, &ee, 1, 0, 0));
    struct iovec back = {got, sizeof got - 1};
    memset(got, 0, sizeof got);
    show("preadv2 RWF_APPEND|RWF_NOAPPEND", preadv2(fd, &back, 1, 0, RWF_APPEND | RWF_NOAPPEND));
    show("preadv2 RWF_NOAPPEND", preadv2(fd, &back, 1, 0, RWF_NOAPPEND));
    printf("%-40s %s\n", "  bytes", got);
    close(fd);
    /* Calls a descriptor's access mode refuses, even for no bytes. */
    fd = open(path("v"), O_WRONLY);
    show("read of nothing on O_WRONLY", read(fd, got, 0));
    close(fd);
    fd = open(path("v"), O_PATH);
    show("fsync on O_PATH", fsync(fd));
    show("fdatasync on O_PATH", fdatasync(fd));
    show("lseek on O_PATH", lseek(fd, 0, SEEK_SET));
    show("ftruncate on O_PATH", ftruncate(fd, 0));
    show("posix_fadvise on O_PATH", posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED));
    show("sync_file_range on O_PATH", sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE));
    show("syncfs on O_PATH", syncfs(fd));
    show("F_SETFL on O_PATH", fcntl(fd, F_SETFL, O_APPEND));
    show("mmap on O_PATH", mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED ? -1 : 0);
    show("readahead on O_PATH", readahead(fd, 0, 4096));
    show("F_GETFL on O_PATH", fcntl(fd, F_GETFL));
    tty_calls(fd, "on O_PATH");
    close(fd);
    fd = open(path("v"), O_RDONLY);
    tty_calls(fd, "");
    close(fd);
    fd = open(path("v"), O_RDONLY);
    show("readahead", readahead(fd, 0, 4096));
    show("sync_file_range of an unknown flag", sync_file_range(fd, 0, 0, 1u << 5));
    close(fd);
    fd = open(path("v"), O_WRONLY);
    show("readahead on O_WRONLY", readahead(fd, 0, 4096));
    show("pread of nothing on O_WRONLY", pread(fd, got, 0, 0));
    struct iovec none = {got, 0};
    show("preadv of nothing on O_WRONLY", preadv(fd, &none, 1, 0));
    close(fd);
    /* Offsets lseek refuses, and an append of nothing that leaves the
     * position. */
    fd = open(path("v"), O_RDWR);
    show("fchdir to a file", fchdir(fd));
    show("lseek SEEK_HOLE at -5", lseek(fd, -5, SEEK_HOLE));
    show("lseek SEEK_DATA at -5", lseek(fd, -5, SEEK_DATA));
    show("lseek SEEK_END past the largest", lseek(fd, 0x7fffffffffffffffLL, SEEK_END));
    show("lseek to 2", lseek(fd, 2, SEEK_SET));
    show("pwritev2 of nothing, RWF_APPEND at -1", pwritev2(fd, &none, 1, -1, RWF_APPEND));
    show("position after", lseek(fd, 0, SEEK_CUR));
    close(fd);
    /* A name with a trailing slash or dot names a directory: no call acts
     * on the file of that name. */
    char slash[4200], dot[4200];
    snprintf(slash, sizeof slash, "%s/", path("v"));
    snprintf(dot, sizeof dot, "%s/.", path("v"));
    show("unlink v/", unlink(slash));
    show("open v/ O_WRONLY|O_TRUNC", open(slash, O_WRONLY | O_TRUNC));
    show("open v/. O_RDONLY", open(dot, O_RDONLY));
    struct stat sb;
    show("stat v/", stat(slash, &sb));
    show_size("stat v after", "v");
    unlink(path("t"));
    unlink(path("v"));
}

static int waiter_fd = -1;
static volatile int waiter_done;

static void *flock_waiter(void *arg) {
    (void)arg;
    int rc = flock(waiter_fd, LOCK_SH);
    waiter_done = rc == 0 ? 1 : -1;
    return NULL;
}

static pthread_t main_thread;

static void on_signal(int sig) {
    (void)sig;
}

static volatile sig_atomic_t poked_done;

/* Signals the main thread every 100 ms until it says its blocked call
   returned: one sent before the call began would be spent. */
static void *poke_main(void *arg) {
    (void)arg;
    while (!poked_done) {
        usleep(100000);
        if (!poked_done)
            pthread_kill(main_thread, SIGUSR1);
    }
    return NULL;
}

static char walk_lines[64][160];
static int walk_n, walk_root_at, walk_files_here;

static int on_walk(const char *p, const struct stat *sb, int type, struct FTW *f) {
    if (f->level == 0)
        walk_root_at = walk_n;
    if (walk_n < 64)
        snprintf(walk_lines[walk_n++], sizeof walk_lines[0], "%d %d %s %lld", type, f->level,
                 f->level == 0 ? "." : p + f->base,
                 type == FTW_F ? (long long)sb->st_size : -1LL);
    /* With FTW_CHDIR a file is reachable by its name alone. */
    if (type == FTW_F && f->level == 1 && access(p + f->base, F_OK) == 0)
        walk_files_here++;
    return 0;
}

static int stop_at_a_file(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)p, (void)sb, (void)f;
    walk_n++;
    return type == FTW_F ? FTW_STOP : FTW_CONTINUE;
}

static int skip_after_a_file(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)p, (void)sb, (void)f;
    walk_n++;
    return type == FTW_F ? FTW_SKIP_SIBLINGS : FTW_CONTINUE;
}

static int on_ftw(const char *p, const struct stat *sb, int type) {
    (void)p, (void)sb;
    walk_n += type == FTW_F ? 1 : 100;
    return 0;
}

static int by_line(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

/* Walks from the directory's parent: the entries under the directory,
 * which is `above_dir` as the walk names it. */
static char above_dir[4096];

static int under_above(const char *p) {
    size_t n = strlen(above_dir);
    return strncmp(p, above_dir, n) == 0 && (p[n] == 0 || p[n] == '/');
}

static int on_walk_above(const char *p, const struct stat *sb, int type, struct FTW *f) {
    if (!under_above(p))
        return 0;
    if (strcmp(p, above_dir) == 0)
        walk_root_at = walk_n;
    const char *name = strrchr(p, '/') + 1;
    if (walk_n < 64)
        snprintf(walk_lines[walk_n++], sizeof walk_lines[0], "%d %d %s %lld%s", type, f->level,
                 strcmp(p, above_dir) == 0 ? "." : name,
                 type == FTW_F ? (long long)sb->st_size : -1LL,
                 p + f->base == name ? "" : " (base wrong)");
    if (type == FTW_F && access(name, F_OK) == 0)
        walk_files_here++;
    return 0;
}

static int own_value_at_a_file_above(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)f;
    return under_above(p) && type == FTW_F ? 7 : 0;
}

static int stop_at_a_file_above(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)f;
    if (!under_above(p))
        return FTW_CONTINUE;
    walk_n++;
    return type == FTW_F ? FTW_STOP : FTW_CONTINUE;
}

static int on_ftw_above(const char *p, const struct stat *sb, int type) {
    (void)sb;
    if (under_above(p))
        walk_n += type == FTW_F ? 1 : 100;
    return 0;
}

/* A walk started inside another that leaves by longjmp: the outer walk,
 * with FTW_DEPTH, starts the inner one at its first file under the
 * directory, whose callback jumps back out at its own first file there; the
 * outer walk then goes on to its end. */
static jmp_buf jump_back;
static const char *walk_up;
static int inner_entries, outer_entries, inner_rc = -2;

static int inner_jumps_out(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)f;
    if (under_above(p) && type == FTW_F) {
        inner_entries++;
        longjmp(jump_back, 1);
    }
    return 0;
}

static int outer_starts_inner(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)f;
    if (!under_above(p))
        return 0;
    outer_entries += type == FTW_F ? 1 : 100;
    if (type == FTW_F && inner_rc == -2) {
        inner_rc = -1;
        if (setjmp(jump_back) == 0)
            inner_rc = nftw(walk_up, inner_jumps_out, 8, FTW_PHYS);
    }
    return 0;
}

/* Two walks on one thread, in two coroutines that hand over to each other
 * at every entry: the first with FTW_ACTIONRETVAL asks to skip the subtree
 * of each file (which goes on to the next), the second returns 0. */
static ucontext_t co_main, co_ctx[2];
static int co_turn, co_done[2], co_rc[2], co_entries[2];

static int on_walk_co(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)f;
    int me = co_turn, r = 0;
    if (under_above(p)) {
        co_entries[me] += type == FTW_F ? 1 : 100;
        if (me == 0 && type == FTW_F)
            r = FTW_SKIP_SUBTREE;
    }
    if (!co_done[1 - me]) {
        co_turn = 1 - me;
        swapcontext(&co_ctx[me], &co_ctx[1 - me]);
        co_turn = me;
    }
    return r;
}

static void co_walk(void) {
    int me = co_turn;
    co_rc[me] = nftw(walk_up, on_walk_co, 8, me == 0 ? FTW_PHYS | FTW_ACTIONRETVAL : FTW_PHYS);
    co_done[me] = 1;
    co_turn = 1 - me;
}

static void walks_that_leave_or_interleave(const char *up) {
    walk_up = up;
    int rc = nftw(up, outer_starts_inner, 8, FTW_DEPTH | FTW_PHYS);
    printf("%-40s %d, inner %d, entries %d and %d\n", "nftw left by longjmp from inside", rc, inner_rc,
           outer_entries, inner_entries);
    static char stacks[2][256 * 1024];
    for (int i = 0; i < 2; i++) {
        getcontext(&co_ctx[i]);
        co_ctx[i].uc_stack.ss_sp = stacks[i];
        co_ctx[i].uc_stack.ss_size = sizeof stacks[i];
        co_ctx[i].uc_link = &co_main;
        makecontext(&co_ctx[i], co_walk, 0);
    }
    co_turn = 0;
    swapcontext(&co_main, &co_ctx[0]);
    /* One walk ended; the other goes on to its end. */
    if (!co_done[co_turn])
        swapcontext(&co_main, &co_ctx[co_turn]);
    printf("%-40s %d %d, entries %d and %d\n", "nftw in two coroutines", co_rc[0], co_rc[1],
           co_entries[0], co_entries[1]);
    /* Flags the C library does not know. */
    show("nftw with an unknown flag", nftw(above_dir, on_walk_co, 8, 1 << 10));
}

static void show_walk(const char *what, int rc) {
    qsort(walk_lines, walk_n, sizeof walk_lines[0], by_line);
    printf("%-40s %d, the start visited %s:", what, rc,
           walk_root_at == 0 ? "first" : walk_root_at == walk_n - 1 ? "last" : "between");
    for (int i = 0; i < walk_n; i++)
        printf(" [%s]", walk_lines[i]);
    printf("\n");
    walk_n = walk_root_at = walk_files_here = 0;
}

static void show_sum(const char *what, const char *name, size_t n) {
    unsigned char back[20000];
    int fd = open(path(name), O_RDONLY);
    ssize_t got = pread(fd, back, n < sizeof back ? n : sizeof back, 0);
    close(fd);
    printf("%-40s %zd %u\n", what, got, got > 0 ? sum(back, (size_t)got) : 0);
}

/* Locks, owners and times, copies inside the kernel, ioctl and glob. */
/* Wide characters through stdio: written and read back in UTF-8, the
 * orientation of a fresh stream, a character pushed back. */
/* The fortified form, which programs built with _FORTIFY_SOURCE call. */
extern int __fwprintf_chk(FILE *f, int flag, const wchar_t *fmt, ...);

static int wide_vprint(FILE *f, const wchar_t *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vfwprintf(f, fmt, ap);
    va_end(ap);
    return n;
}

static void wide_chars(void) {
    setlocale(LC_CTYPE, "C.UTF-8");
    FILE *f = fopen(path("wide"), "w");
    show("fwide of a fresh stream", f ? fwide(f, 0) : -2);
    show("fputws", f ? (fputws(L"h\u00e9llo w\u00f6rld\n", f) >= 0 ? 0 : -1) : -2);
    show("fputwc", f ? (fputwc(L'\u20ac', f) == L'\u20ac' ? 0 : -1) : -2);
    show("putwc", f ? (putwc(L'\n', f) == L'\n' ? 0 : -1) : -2);
    if (f)
        fclose(f);
    show_size("stat wide", "wide");
    /* Formatted wide output: more arguments than the registers hold, of
     * both kinds, so that some come from the caller's stack. */
    FILE *g = fopen(path("wide-printed"), "w");
    show("fwprintf", g ? fwprintf(g, L"%d %d %d %d %d %d %d|%ls|%s|%.1f %.1f %.1f %.1f %.1f "
                                     L"%.1f %.1f %.1f %.1f %.1f\n",
                                  1, 2, 3, 4, 5, 6, 7, L"w\u00f6rld", "narrow", 0.5, 1.5, 2.5,
                                  3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5)
                       : -2);
    show("vfwprintf", g ? wide_vprint(g, L"%ls %d\n", L"\u20ac", 99) : -2);
    show("__fwprintf_chk", g ? __fwprintf_chk(g, 1, L"%5d|%-3lc|\n", 12, L'\u00e9') : -2);
    if (g)
        fclose(g);
    show_size("stat wide-printed", "wide-printed");
    g = fopen(path("wide-printed"), "r");
    char printed[256];
    while (g && fgets(printed, sizeof printed, g))
        printf("  printed: %s", printed);
    if (g)
        fclose(g);
    unlink(path("wide-printed"));
    f = fopen(path("wide"), "r");
    wchar_t line[64];
    show("fgetws", f ? (fgetws(line, 64, f) ? (long long)wcslen(line) : -1) : -2);
    show("  its third character", f ? (long long)line[2] : -2);
    wint_t c = f ? fgetwc(f) : WEOF;
    show("fgetwc", (long long)c);
    show("ungetwc", f ? (ungetwc(c, f) == c ? 0 : -1) : -2);
    show("getwc after it", f ? (long long)getwc(f) : -2);
    show("getwc the line's end", f ? (long long)getwc(f) : -2);
    show("fgetwc at the end is WEOF", f ? (fgetwc(f) == WEOF) : -2);
    show("fgetws at the end is NULL", f ? (fgetws(line, 64, f) == NULL) : -2);
    if (f)
        fclose(f);
    /* A file of the store is no program (nor one without execute bits). */
    char *no_args[] = {"x", NULL};
    show("execv of a file", execv(path("wide"), no_args));
    show("execv of a missing file", execv(path("no-such"), no_args));
    show("execve through a file", execve(path("wide/x"), no_args, environ));
    int wfd = open(path("wide"), O_RDONLY);
    show("fexecve of a file", fexecve(wfd, no_args, environ));
    close(wfd);
    show("chdir into a file", chdir(path("wide")));
    show("chdir into a missing name", chdir(path("no-such")));
    /* A link onto a name in use, and of a missing file. */
    show("link onto a name in use", link(path("wide"), path("s")));
    show("link of a missing file", link(path("no-such"), path("wide2")));
    unlink(path("wide"));
    setlocale(LC_CTYPE, "C");
}

static void more_calls(void) {
    unsigned char buf[9000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 13 + 1);
    int a = open(path("k1"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("write k1", write(a, buf, sizeof buf));
    int a2 = dup(a);
    int b = open(path("k1"), O_RDONLY);

    /* flock: locks of open file descriptions. */
    show("flock EX|NB", flock(a, LOCK_EX | LOCK_NB));
    show("flock EX|NB, same description", flock(a2, LOCK_EX | LOCK_NB));
    show("flock SH|NB, another description", flock(b, LOCK_SH | LOCK_NB));
    show("flock UN", flock(a, LOCK_UN));
    show("flock SH|NB, another description", flock(b, LOCK_SH | LOCK_NB));
    show("flock SH|NB", flock(a, LOCK_SH | LOCK_NB));
    show("flock EX|NB beside a shared lock", flock(a, LOCK_EX | LOCK_NB));
    show("flock of a bad operation", flock(a, 77));
    show("close the other description", close(b));
    show("flock EX|NB once it is closed", flock(a2, LOCK_EX | LOCK_NB));
    b = open(path("k1"), O_RDONLY);
    show("flock SH|NB held exclusively", flock(b, LOCK_SH | LOCK_NB));
    show("close one of two descriptors", close(a2));
    show("flock SH|NB, still held", flock(b, LOCK_SH | LOCK_NB));
    waiter_fd = b;
    pthread_t t;
    pthread_create(&t, NULL, flock_waiter, NULL);
    usleep(100000);
    show("  a blocking flock waits", waiter_done);
    show("flock UN", flock(a, LOCK_UN));
    pthread_join(t, NULL);
    show("  and is granted after the unlock", waiter_done);
    show("flock UN", flock(b, LOCK_UN));
    /* A signal's handler (without SA_RESTART) interrupts a blocked flock. */
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGUSR1, &sa, NULL);
    show("flock EX", flock(a, LOCK_EX));
    main_thread = pthread_self();
    poked_done = 0;
    pthread_create(&t, NULL, poke_main, NULL);
    int interrupted = flock(b, LOCK_SH);
    poked_done = 1;
    show("flock SH interrupted by a signal", interrupted);
    pthread_join(t, NULL);
    show("flock UN", flock(a, LOCK_UN));

    /* Record locks: a process never conflicts with its own. */
    show("lockf F_TLOCK", lockf(a, F_TLOCK, 100));
    show("lockf F_TEST, another description", lockf(b, F_TEST, 100));
    show("lockf F_TLOCK on O_RDONLY", lockf(b, F_TLOCK, 0));
    show("lockf F_ULOCK", lockf(a, F_ULOCK, 100));
    show("lockf of a bad command", lockf(a, 9, 0));
    lseek(a, 0, SEEK_SET);
    show("lockf before the file's start", lockf(a, F_TLOCK, -1));
    struct flock rl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    show("F_SETLK write lock on O_RDONLY", fcntl(b, F_SETLK, &rl));
    rl.l_type = F_RDLCK;
    show("F_SETLK read lock on O_RDONLY", fcntl(b, F_SETLK, &rl));
    rl.l_type = 77;
    show("F_SETLK of a bad type", fcntl(a, F_SETLK, &rl));
    rl.l_type = F_WRLCK;
    rl.l_whence = 9;
    show("F_SETLK of a bad whence", fcntl(a, F_SETLK, &rl));

    /* Owners and times, which a file of the store does not keep. */
    show("chown", chown(path("k1"), getuid(), getgid()));
    show("lchown", lchown(path("k1"), getuid(), getgid()));
    show("fchownat", fchownat(AT_FDCWD, path("k1"), getuid(), getgid(), 0));
    show("chown of a missing file", chown(path("nothing"), getuid(), getgid()));
    show("fchmodat", fchmodat(AT_FDCWD, path("k1"), 0644, 0));
    show("utimensat", utimensat(AT_FDCWD, path("k1"), NULL, 0));
    show("utimensat of a missing file", utimensat(AT_FDCWD, path("nothing"), NULL, 0));
    {
        /* Hidden from the compiler's non-null checks. */
        const char *volatile none = NULL;
        show("utimensat of a null path", utimensat(a, none, NULL, 0));
    }
    show("utimes", utimes(path("k1"), NULL));
    show("lutimes", lutimes(path("k1"), NULL));
    show("futimes", futimes(a, NULL));
    show("futimesat", futimesat(AT_FDCWD, path("k1"), NULL));
    show("futimesat of a descriptor", futimesat(a, NULL, NULL));

    /* ioctl: the bytes left to read, and close-on-exec. */
    lseek(b, 1000, SEEK_SET);
    int left = -1;
    show("ioctl FIONREAD", ioctl(b, FIONREAD, &left));
    show("  bytes left", left);
    show("ioctl FIOCLEX", ioctl(b, FIOCLEX));
    show("  F_GETFD", fcntl(b, F_GETFD));
    show("ioctl FIONCLEX", ioctl(b, FIONCLEX));
    show("  F_GETFD", fcntl(b, F_GETFD));
    struct winsize ws;
    show("ioctl TIOCGWINSZ", ioctl(b, TIOCGWINSZ, &ws));

    /* Copies inside the kernel. */
    int c = open(path("k2"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    off_t off = 100;
    lseek(a, 7, SEEK_SET);
    show("sendfile 5000 from 100", sendfile(c, a, &off, 5000));
    show("  offset after it", off);
    show("  the source's position", lseek(a, 0, SEEK_CUR));
    lseek(a, 0, SEEK_SET);
    show("sendfile from the position", sendfile(c, a, NULL, 3000));
    show("  the source's position", lseek(a, 0, SEEK_CUR));
    off = 20000;
    show("sendfile past the end", sendfile(c, a, &off, 10));
    show("sendfile into O_RDONLY", sendfile(b, a, NULL, 10));
    off = 0;
    show("sendfile of SIZE_MAX bytes", sendfile(c, a, &off, SIZE_MAX));
    off = INT64_MAX - 2;
    show("sendfile past the largest offset", sendfile(c, a, &off, 5));
    loff_t oi = 50, oo = 9000;
    show("copy_file_range 2000", copy_file_range(a, &oi, c, &oo, 2000, 0));
    show("  offsets after it", oi * 100000 + oo);
    lseek(a, 8500, SEEK_SET);
    show("copy_file_range from the position", copy_file_range(a, NULL, c, NULL, 1000, 0));
    show("  the source's position", lseek(a, 0, SEEK_CUR));
    show("  the target's position", lseek(c, 0, SEEK_CUR));
    show("copy_file_range with flags", copy_file_range(a, NULL, c, NULL, 10, 1));
    loff_t x = 0, y = 10;
    show("copy_file_range overlapping", copy_file_range(c, &x, c, &y, 100, 0));
    x = 10900, y = 11000;
    show("copy_file_range to its own end", copy_file_range(c, &x, c, &y, 500, 0));
    show("  offsets after it", x * 100000 + y);
    x = 20000, y = 0;
    show("copy_file_range past its end", copy_file_range(c, &x, c, &y, 500, 0));
    x = 0, y = INT64_MAX - 10;
    show("copy_file_range to the largest offset", copy_file_range(c, &x, c, &y, 100, 0));
    int pfd[2];
    if (pipe(pfd) == 0) {
        show("copy_file_range into a pipe", copy_file_range(a, NULL, pfd[1], NULL, 10, 0));
        show("copy_file_range into a pipe's read end", copy_file_range(a, NULL, pfd[0], NULL, 10, 0));
        close(pfd[0]);
        close(pfd[1]);
    }
    show("copy_file_range into O_RDONLY", copy_file_range(a, NULL, b, NULL, 10, 0));
    int dfd = open("/", O_RDONLY | O_DIRECTORY);
    show("copy_file_range into a directory", copy_file_range(a, NULL, dfd, NULL, 10, 0));
    close(dfd);
    show("copy_file_range into -1 with flags", copy_file_range(a, NULL, -1, NULL, 10, 1));
    /* splice between a file and a pipe, both ways; tee refuses a file. The
     * pipe does not block, so a run whose store calls fail (no store to
     * open) reads nothing from it rather than waits. */
    if (pipe2(pfd, O_NONBLOCK) == 0) {
        char got[9000];
        loff_t so = 100;
        show("splice 3000 from 100 into a pipe", splice(a, &so, pfd[1], NULL, 3000, 0));
        show("  offset after it", so);
        show("  the source's position", lseek(a, 0, SEEK_CUR));
        show("  read from the pipe", read(pfd[0], got, sizeof got));
        show("  its bytes", sum((unsigned char *)got, 3000));
        lseek(a, 10, SEEK_SET);
        show("splice from the position", splice(a, NULL, pfd[1], NULL, 500, SPLICE_F_MORE));
        show("  the source's position", lseek(a, 0, SEEK_CUR));
        show("  read from the pipe", read(pfd[0], got, sizeof got));
        show("  its bytes", sum((unsigned char *)got, 500));
        so = 0;
        show("splice more than the pipe holds", splice(a, &so, pfd[1], NULL, 100000, 0));
        show("  read from the pipe", read(pfd[0], got, sizeof got));
        show("  its bytes", sum((unsigned char *)got, 9000));
        show("a pipe of one page", fcntl(pfd[1], F_SETPIPE_SZ, 4096));
        so = 0;
        show("splice into it", splice(a, &so, pfd[1], NULL, 9000, 0));
        show("splice into it full, SPLICE_F_NONBLOCK", splice(a, &so, pfd[1], NULL, 10, SPLICE_F_NONBLOCK));
        show("  offset after it", so);
        show("  read from the pipe", read(pfd[0], got, sizeof got));
        so = 20000;
        show("splice past the end", splice(a, &so, pfd[1], NULL, 10, 0));
        so = -1;
        show("splice from a negative offset", splice(a, &so, pfd[1], NULL, 10, 0));
        show("splice with an offset for the pipe", splice(a, NULL, pfd[1], &so, 10, 0));
        show("splice with an unknown flag", splice(a, NULL, pfd[1], NULL, 10, 0x100));
        show("splice of nothing", splice(a, NULL, pfd[1], NULL, 0, 0x100));
        show("splice between two files", splice(a, NULL, c, NULL, 10, 0));
        show("splice into O_RDONLY", splice(pfd[0], NULL, b, NULL, 10, 0));
        show("splice from a pipe's write end", splice(pfd[1], NULL, c, NULL, 10, 0));
        show("splice into -1", splice(a, NULL, -1, NULL, 10, 0));
        show("write 19 into the pipe", write(pfd[1], "hello spliced bytes", 19));
        loff_t wo = 5000;
        show("splice from a pipe into the file", splice(pfd[0], NULL, c, &wo, 100, 0));
        show("  offset after it", wo);
        show("write 7 into the pipe", write(pfd[1], "and two", 7));
        lseek(c, 20, SEEK_SET);
        show("splice from a pipe at the position", splice(pfd[0], NULL, c, NULL, 3, 0));
        show("  the target's position", lseek(c, 0, SEEK_CUR));
        show("splice the rest", splice(pfd[0], NULL, c, NULL, 100, 0));
        show("  the target's position", lseek(c, 0, SEEK_CUR));
        show("splice from an empty pipe, SPLICE_F_NONBLOCK", splice(pfd[0], NULL, c, NULL, 10, SPLICE_F_NONBLOCK));
        int ap = open(path("k2"), O_WRONLY | O_APPEND);
        show("write 1 into the pipe", write(pfd[1], "x", 1));
        show("splice into O_APPEND", splice(pfd[0], NULL, ap, NULL, 10, 0));
        close(ap);
        show("  what the pipe still holds", read(pfd[0], got, sizeof got));
        show("tee of a file", tee(a, pfd[1], 10, 0));
        show("tee into a file", tee(pfd[0], c, 10, 0));
        show("tee into O_RDONLY", tee(pfd[0], b, 10, 0));
        close(pfd[1]);
        show("splice from a pipe no one writes", splice(pfd[0], NULL, c, NULL, 10, 0));
        close(pfd[0]);
    }
    /* splice from an O_DIRECT file into a pipe that holds bytes (the room is
     * whole buffers); into a blocking FIFO, whose writes take no flag not to
     * wait; at the file's end into a pipe no one reads. */
    {
        static char got[70000];
        loff_t so = 0;
        int dfd2 = open(path("k1"), O_RDONLY | O_DIRECT);
        int q[2];
        if (dfd2 >= 0 && pipe2(q, O_NONBLOCK) == 0) {
            show("write 100 into a pipe", write(q[1], buf, 100));
            show("splice O_DIRECT into it", splice(dfd2, &so, q[1], NULL, 65536, 0));
            show("  offset after it", so);
            show("  read from the pipe", read(q[0], got, sizeof got));
            close(q[0]);
            close(q[1]);
        }
        if (dfd2 >= 0)
            close(dfd2);
        char fifo[64];
        snprintf(fifo, sizeof fifo, "/tmp/setcache-probe-fifo-%d", (int)getpid());
        unlink(fifo);
        /* Written through a blocking descriptor, read through one that does
         * not block (a run with no store reads nothing rather than waits). */
        int ff = mkfifo(fifo, 0600) == 0 ? open(fifo, O_RDWR) : -1;
        int fr = ff >= 0 ? open(fifo, O_RDONLY | O_NONBLOCK) : -1;
        if (ff >= 0 && fr >= 0) {
            show("a FIFO of one page", fcntl(ff, F_SETPIPE_SZ, 4096));
            so = 0;
            show("splice into the FIFO", splice(a, &so, ff, NULL, 9000, 0));
            show("splice into it full, SPLICE_F_NONBLOCK", splice(a, &so, ff, NULL, 10, SPLICE_F_NONBLOCK));
            show("  read 100 from it", read(fr, got, 100));
            show("splice beside its buffer, SPLICE_F_NONBLOCK", splice(a, &so, ff, NULL, 10, SPLICE_F_NONBLOCK));
            show("  read the rest", read(fr, got, sizeof got));
            show("splice into it again", splice(a, &so, ff, NULL, 9000, 0));
            show("  offset after it", so);
        }
        if (fr >= 0)
            close(fr);
        if (ff >= 0)
            close(ff);
        unlink(fifo);
        int r2[2];
        if (pipe(r2) == 0) {
            close(r2[0]);
            void (*before)(int) = signal(SIGPIPE, SIG_IGN);
            so = 9000;
            show("splice at the end into a pipe no reader", splice(a, &so, r2[1], NULL, 10, 0));
            show("  offset after it", so);
            signal(SIGPIPE, before);
            close(r2[1]);
        }
    }
    struct stat st;
    fstat(c, &st);
    show("  size of the copy", st.st_size);
    show_sum("  its bytes", "k2", sizeof buf + 2100);
    close(a);
    close(b);
    close(c);

    /* glob lists the directory. */
    glob_t g;
    int rc = glob(path("k*"), 0, NULL, &g);
    printf("%-40s %d", "glob k*", rc);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++)
        printf(" %s", strrchr(g.gl_pathv[i], '/') + 1);
    printf("\n");
    if (rc == 0)
        globfree(&g);
    rc = glob(path("k2"), 0, NULL, &g);
    show("glob of one name", rc == 0 ? (long long)g.gl_pathc : -rc);
    if (rc == 0)
        globfree(&g);
    show("glob of no match", glob(path("zz*"), 0, NULL, &g));

    /* nftw and ftw walk the directory. */
    show_walk("nftw", nftw(dir, on_walk, 4, FTW_PHYS));
    show_walk("nftw FTW_DEPTH", nftw(dir, on_walk, 4, FTW_DEPTH | FTW_PHYS));
    show_walk("nftw of one file", nftw(path("k2"), on_walk, 4, 0));
    char before[4096] = "", after[4096] = "";
    if (!getcwd(before, sizeof before))
        strcpy(before, "?");
    int rc2 = nftw(dir, on_walk, 4, FTW_CHDIR);
    int here = walk_files_here;
    show_walk("nftw FTW_CHDIR", rc2);
    show("  files found from their directory", here);
    if (!getcwd(after, sizeof after))
        strcpy(after, "?");
    show("  working directory back", strcmp(before, after) == 0);
    /* The same from the directory's parent, by a relative path with a
     * trailing slash. */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        char rel[4096];
        snprintf(rel, sizeof rel, "%s/", slash + 1);
        if (chdir(parent) == 0) {
            rc2 = nftw(rel, on_walk, 4, FTW_CHDIR | FTW_DEPTH);
            here = walk_files_here;
            show_walk("nftw FTW_CHDIR, relative", rc2);
            show("  files found from their directory", here);
            if (chdir(before) != 0)
                printf("cannot go back to %s\n", before);
        }
    }
    show("nftw FTW_ACTIONRETVAL, stop at a file", nftw(dir, stop_at_a_file, 4, FTW_ACTIONRETVAL));
    show("  entries visited", walk_n);
    walk_n = 0;
    show("nftw FTW_ACTIONRETVAL, skip after a file",
         nftw(dir, skip_after_a_file, 4, FTW_ACTIONRETVAL | FTW_DEPTH));
    show("  entries visited", walk_n);
    walk_n = 0;
    show("ftw", ftw(dir, on_ftw, 4));
    show("  files and directories (x100)", walk_n);
    walk_n = 0;
    show("nftw of a missing path", nftw(path("nothing"), on_walk, 4, 0));
    walk_n = 0;

    /* Walks from the directory's parent pass through it. */
    char up[4096];
    snprintf(up, sizeof up, "%s", dir);
    char *cut = strrchr(up, '/');
    if (cut && cut != up) {
        *cut = 0;
        snprintf(above_dir, sizeof above_dir, "%s", dir);
        show_walk("nftw from the parent", nftw(up, on_walk_above, 8, FTW_PHYS));
        show_walk("nftw FTW_DEPTH from the parent", nftw(up, on_walk_above, 8, FTW_DEPTH | FTW_PHYS));
        rc2 = nftw(up, on_walk_above, 8, FTW_CHDIR);
        here = walk_files_here;
        show_walk("nftw FTW_CHDIR from the parent", rc2);
        show("  files found from their directory", here);
        if (!getcwd(after, sizeof after))
            strcpy(after, "?");
        show("  working directory back", strcmp(before, after) == 0);
        show("nftw from the parent, a value of its own", nftw(up, own_value_at_a_file_above, 8, 0));
        show("nftw from the parent, FTW_STOP", nftw(up, stop_at_a_file_above, 8, FTW_ACTIONRETVAL));
        show("  entries visited under the directory", walk_n);
        walk_n = 0;
        show("ftw from the parent", ftw(up, on_ftw_above, 8));
        show("  files and directories (x100)", walk_n);
        walk_n = 0;
        walks_that_leave_or_interleave(up);
    }
    unlink(path("k1"));
    unlink(path("k2"));
}

/* What the kernel checks before it looks at a path or moves a byte: unknown
 * flags and modes, an empty path without AT_EMPTY_PATH, a path through a file,
 * and a pipe as sendfile's source. */
static void flag_checks(void) {
    int fd = open(path("fc"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("write fc", write(fd, "0123456789", 10));
    struct stat st;
    show("fstatat flag 0x1", fstatat(AT_FDCWD, path("fc"), &st, 0x1));
    show("fstatat AT_REMOVEDIR", fstatat(AT_FDCWD, path("fc"), &st, AT_REMOVEDIR));
    show("fstatat AT_STATX_DONT_SYNC", fstatat(AT_FDCWD, path("fc"), &st, AT_STATX_DONT_SYNC));
    show("fstatat empty path, no AT_EMPTY_PATH", fstatat(fd, "", &st, 0));
    struct statx sx;
    show("statx flag 0x1", statx(AT_FDCWD, path("fc"), 0x1, STATX_SIZE, &sx));
    show("statx both sync types", statx(AT_FDCWD, path("fc"),
                                        AT_STATX_FORCE_SYNC | AT_STATX_DONT_SYNC, STATX_SIZE, &sx));
    show("statx reserved mask bit", statx(AT_FDCWD, path("fc"), 0, 0x80000000u, &sx));
    show("statx empty path, no AT_EMPTY_PATH", statx(fd, "", 0, STATX_SIZE, &sx));
    show("access mode 8", access(path("fc"), 8));
    show("faccessat mode 8", faccessat(AT_FDCWD, path("fc"), 8, 0));
    show("faccessat flag 0x1", faccessat(AT_FDCWD, path("fc"), F_OK, 0x1));
    show("faccessat AT_EACCESS", faccessat(AT_FDCWD, path("fc"), R_OK, AT_EACCESS));
    show("open fc/x", open(path("fc/x"), O_RDONLY));
    show("open fc/x O_CREAT", open(path("fc/x"), O_CREAT | O_WRONLY, 0644));
    show("open nothing/x O_CREAT", open(path("nothing/x"), O_CREAT | O_WRONLY, 0644));
    show("fstatat fc/x", fstatat(AT_FDCWD, path("fc/x"), &st, 0));
    show("fstatat nothing/x", fstatat(AT_FDCWD, path("nothing/x"), &st, 0));
    int p[2];
    if (pipe(p) == 0) {
        show("sendfile from an idle pipe", sendfile(fd, p[0], NULL, 10));
        show("write the pipe", write(p[1], "abc", 3));
        show("sendfile from a pipe with bytes", sendfile(fd, p[0], NULL, 3));
        off_t at = 0;
        show("sendfile from a pipe at an offset", sendfile(fd, p[0], &at, 3));
        close(p[0]);
        close(p[1]);
    }
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = -1, .l_len = 0};
    show("F_SETLK from -1", fcntl(fd, F_SETLK, &fl));
    fl.l_start = 0;
    fl.l_len = -5;
    show("F_SETLK 5 bytes before 0", fcntl(fd, F_SETLK, &fl));
    fl.l_start = INT64_MAX;
    fl.l_len = 10;
    show("F_SETLK past the largest offset", fcntl(fd, F_SETLK, &fl));
    show("F_GETLK past the largest offset", fcntl(fd, F_GETLK, &fl));
    fl.l_whence = SEEK_END;
    fl.l_start = -100;
    fl.l_len = 1;
    show("F_SETLK 100 before the end of 10 bytes", fcntl(fd, F_SETLK, &fl));
    fl.l_start = -3;
    fl.l_len = -2;
    fl.l_type = F_WRLCK;
    show("F_SETLK the 2 bytes before the last 3", fcntl(fd, F_SETLK, &fl));
    fl.l_whence = 7;
    show("F_SETLK whence 7", fcntl(fd, F_SETLK, &fl));
    fl.l_type = 9;
    show("F_GETLK type 9 whence 7", fcntl(fd, F_GETLK, &fl));
    char small[16];
    /* (Through volatiles: the compiler refuses these sizes and the NULLs
     * below where it sees them.) */
    volatile size_t most = SSIZE_MAX, top = (size_t)1 << 63;
    void *volatile none = NULL;
    show("pread SSIZE_MAX bytes", pread(fd, small, most, 0));
    show("read 2^63 bytes", read(fd, small, top));
    show("write 2^63 bytes", write(fd, small, top));
    show("pread 10 ending past the largest offset", pread(fd, small, 10, INT64_MAX - 9));
    show("pwrite 10 ending past the largest offset", pwrite(fd, small, 10, INT64_MAX - 9));
    int ap = open(path("fc"), O_WRONLY | O_APPEND);
    show("pwrite O_APPEND at the largest offset", pwrite(ap, "CD", 2, INT64_MAX));
    close(ap);
    int ro = open(path("fc"), O_RDONLY);
    show("write O_RDONLY, NULL buffer", write(ro, none, 10));
    show("pwrite O_RDONLY, NULL buffer", pwrite(ro, none, 10, 0));
    close(ro);
    show("posix_fadvise WILLNEED at -1", posix_fadvise(fd, -1, 10, POSIX_FADV_WILLNEED));
    show("posix_fadvise SEQUENTIAL at -1", posix_fadvise(fd, -1, 10, POSIX_FADV_SEQUENTIAL));
    show("posix_fadvise a negative length", posix_fadvise(fd, 0, -1, POSIX_FADV_WILLNEED));
    show("readahead at -1", readahead(fd, -1, 10));
    show("readahead of SIZE_MAX bytes", readahead(fd, 0, SIZE_MAX));
    show("flock LOCK_MAND|LOCK_READ", flock(fd, 32 | 64));
    show("open O_DIRECTORY|O_CREAT", open(path("fc"), O_RDWR | O_DIRECTORY | O_CREAT, 0644));
    show("F_GETOWN", fcntl(fd, F_GETOWN));
    show("F_GETSIG", fcntl(fd, F_GETSIG));
    show("F_GETLEASE", fcntl(fd, F_GETLEASE));
    uint64_t hint = 7;
    show("F_GET_RW_HINT", fcntl(fd, F_GET_RW_HINT, &hint));
    show("  the hint", (long long)hint);
    hint = 2;
    show("F_SET_RW_HINT 2", fcntl(fd, F_SET_RW_HINT, &hint));
    hint = 9;
    show("F_SET_RW_HINT 9", fcntl(fd, F_SET_RW_HINT, &hint));
    int fd2 = open(path("fc"), O_RDONLY);
    hint = 7;
    show("F_GET_RW_HINT on another description", fcntl(fd2, F_GET_RW_HINT, &hint));
    show("  the hint set before", (long long)hint);
    close(fd2);
    show("open fc/ O_DIRECTORY|O_CREAT", open(path("fc/"), O_RDWR | O_DIRECTORY | O_CREAT, 0644));
    show("F_NOTIFY 0", fcntl(fd, F_NOTIFY, 0));
    show("F_NOTIFY DN_MODIFY", fcntl(fd, F_NOTIFY, DN_MODIFY));
    show("F_GETPIPE_SZ", fcntl(fd, F_GETPIPE_SZ));
    /* The owner and signal for I/O events: kept and read back. */
    show("F_SETOWN this process", fcntl(fd, F_SETOWN, getpid()));
    show("  F_GETOWN is it", fcntl(fd, F_GETOWN) == getpid());
    show("F_SETOWN a missing process", fcntl(fd, F_SETOWN, 0x3ffffff0));
    struct f_owner_ex ox = {F_OWNER_TID, (pid_t)syscall(SYS_gettid)};
    show("F_SETOWN_EX this thread", fcntl(fd, F_SETOWN_EX, &ox));
    struct f_owner_ex back = {0, 0};
    show("F_GETOWN_EX", fcntl(fd, F_GETOWN_EX, &back));
    show("  the same", back.type == ox.type && back.pid == ox.pid);
    ox.type = 7;
    show("F_SETOWN_EX of a bad type", fcntl(fd, F_SETOWN_EX, &ox));
    show("F_SETOWN none", fcntl(fd, F_SETOWN, 0));
    show("F_SETSIG SIGUSR1", fcntl(fd, F_SETSIG, SIGUSR1));
    show("  F_GETSIG", fcntl(fd, F_GETSIG));
    show("F_SETSIG 65", fcntl(fd, F_SETSIG, 65));
    show("F_SETSIG 0", fcntl(fd, F_SETSIG, 0));
    int one = 1, zero = 0;
    show("FIONBIO on", ioctl(fd, FIONBIO, &one));
    show("  O_NONBLOCK", (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    show("FIONBIO off", ioctl(fd, FIONBIO, &zero));
    show("  O_NONBLOCK", (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    show("FIOASYNC off", ioctl(fd, FIOASYNC, &zero));
    show("FIOASYNC on", ioctl(fd, FIOASYNC, &one));
    /* The directory itself beside its files. */
    show("rename a file to the directory", rename(path("fc"), dir));
    show("rename the directory into itself", rename(dir, path("fc")));
    show("renameat2 NOREPLACE to the directory",
         renameat2(AT_FDCWD, path("fc"), AT_FDCWD, dir, RENAME_NOREPLACE));
    show("rename a missing file to the directory", rename(path("nothing"), dir));
    show("rename the directory to itself", rename(dir, dir));
    show("rmdir the directory with files", rmdir(dir));
    show("unlinkat AT_REMOVEDIR the same", unlinkat(AT_FDCWD, dir, AT_REMOVEDIR));
    show("rename a file to itself", rename(path("fc"), path("fc")));
    {
        /* The directory by other forms of its path. */
        char up[4200], dot[4200], slash[4200];
        const char *base = strrchr(dir, '/') + 1;
        snprintf(up, sizeof up, "../%s", base);
        snprintf(dot, sizeof dot, "%s/.", dir);
        snprintf(slash, sizeof slash, "%s/", dir);
        char here[4200];
        if (getcwd(here, sizeof here) && chdir(dir) == 0) {
            show("rmdir of it through ..", rmdir(up));
            show("rename of it through ..", rename(up, "fc2-none"));
            show("rmdir .", rmdir("."));
            show("chdir back", chdir(here));
        }
        show("rename it/. to it", rename(dot, dir));
        show("rename a file to it/.", rename(path("fc"), dot));
        show("rename a file to it/", rename(path("fc"), slash));
        show("rmdir it/.", rmdir(dot));
        int dfd = open(dir, O_RDONLY | O_DIRECTORY);
        show("unlinkat of \"\" AT_REMOVEDIR", unlinkat(dfd, "", AT_REMOVEDIR));
        show("renameat to \"\"", renameat(dfd, "fc", dfd, ""));
        show("rename a file to \"\"", rename(path("fc"), ""));
        show("link a file to \"\"", link(path("fc"), ""));
        show("open a file's ..", open(path("fc/.."), O_RDONLY));
        show("open a file's .. O_CREAT", open(path("fc/.."), O_WRONLY | O_CREAT, 0644));
        show("linkat of \"\" to a name", linkat(dfd, "", dfd, "h", 0));
        show("unlinkat of \"\"", unlinkat(dfd, "", 0));
        show("mkdirat of \"\"", mkdirat(dfd, "", 0755));
        show("symlinkat to \"\"", symlinkat("x", dfd, ""));
        show("symlink of \"\"", symlink("", path("h")));
        show("access below a file's ..", access(path("fc/../fc"), F_OK));
        show("rename through a missing name's ..", rename(path("fc"), path("nx/../fd")));
        show("rename from a missing name's ..", rename(path("nx/../fc"), path("fd")));
        show("link through a missing name's ..", link(path("fc"), path("nx/../fd")));
        show("open through a missing name's ..", open(path("nx/../fc"), O_RDONLY));
        show("mknodat of \"\"", mknodat(dfd, "", S_IFREG | 0644, 0));
        close(dfd);
    }
    {
        /* Owners as the kernel looks them up: any task by its number. */
        int not_leader = getpgrp() != getpid();
        show("F_SETOWN -getpid()", fcntl(fd, F_SETOWN, -getpid()));
        show("  F_GETOWN", fcntl(fd, F_GETOWN) == (not_leader ? 0 : -getpid()));
        struct f_owner_ex neg = {F_OWNER_PID, -5};
        show("F_SETOWN_EX of a negative pid", fcntl(fd, F_SETOWN_EX, &neg));
        show("F_SETSIG with high bits", fcntl(fd, F_SETSIG, 0x100000005L));
        show("  F_GETSIG", fcntl(fd, F_GETSIG));
        fcntl(fd, F_SETSIG, 0);
        int fresh = open(path("fc"), O_RDONLY);
        struct f_owner_ex fo = {9, 9};
        show("F_GETOWN_EX of a new description", fcntl(fresh, F_GETOWN_EX, &fo));
        show("  its type and pid", fo.type * 1000 + fo.pid);
        close(fresh);
    }
    {
        char longname[300];
        memset(longname, 'n', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        show("unlink of a 299-byte name", unlink(path(longname)));
        show("open of a 299-byte name", open(path(longname), O_RDONLY));
        char buf[8];
        struct iovec two[1] = {{buf, 8}};
        show("preadv past the largest offset", preadv(fd, two, 1, INT64_MAX - 5));
        show("pwritev past the largest offset", pwritev(fd, two, 1, INT64_MAX - 5));
    }
    /* Calls the C library answers by its own calls to the kernel. */
    show("euidaccess R_OK", euidaccess(path("fc"), R_OK));
    show("eaccess W_OK", eaccess(path("fc"), W_OK));
    show("euidaccess of a missing file", euidaccess(path("nothing"), F_OK));
    show("mkdir over a file", mkdir(path("fc"), 0755));
    show("mkfifo over a file", mkfifo(path("fc"), 0644));
    struct statvfs sv;
    show("statvfs", statvfs(path("fc"), &sv));
    show("  its longest name at least 200", sv.f_namemax >= 200);
    show("statvfs of a missing file", statvfs(path("nothing"), &sv));
    struct statfs sf;
    show("statfs", statfs(path("fc"), &sf));
    show("  its longest name at least 200", sf.f_namelen >= 200);
    show("pathconf _PC_NAME_MAX at least 200", pathconf(path("fc"), _PC_NAME_MAX) >= 200);
    show("pathconf of a missing file", pathconf(path("nothing"), _PC_NAME_MAX));
    show("lchmod", lchmod(path("fc"), 0644));
    struct stat before, after, named;
    fstat(fd, &before);
    show("rename fc fc2", rename(path("fc"), path("fc2")));
    fstat(fd, &after);
    stat(path("fc2"), &named);
    show("  the inode kept", before.st_ino == after.st_ino && after.st_ino == named.st_ino);
    show("rename fc2 fc", rename(path("fc2"), path("fc")));
    /* An open file keeps its inode number when its name is replaced or
     * deleted before it is asked for. */
    close(open(path("ia"), O_CREAT | O_WRONLY, 0644));
    close(open(path("ib"), O_CREAT | O_WRONLY, 0644));
    struct stat ia, ib, held;
    stat(path("ia"), &ia);
    stat(path("ib"), &ib);
    int ifd = open(path("ia"), O_RDONLY);
    show("rename ib over ia", rename(path("ib"), path("ia")));
    fstat(ifd, &held);
    show("  the open file's inode, not the new one's",
         held.st_ino == ia.st_ino && held.st_ino != ib.st_ino);
    show("unlink ia", unlink(path("ia")));
    fstat(ifd, &held);
    show("  the inode after the unlink", held.st_ino == ia.st_ino);
    close(ifd);
    /* Attribute calls' arguments, checked before the file is. */
    show("setxattr flags 4", setxattr(path("fc"), "user.k", "v", 1, 4));
    show("setxattr of an empty name", setxattr(path("fc"), "", "v", 1, 0));
    static char big_value[70000];
    show("fsetxattr of 70000 bytes", fsetxattr(fd, "user.k", big_value, sizeof big_value, 0));
    show("removexattr of an empty name", removexattr(path("fc"), ""));
    /* A regular file is always ready; epoll takes none. */
    int rp[2];
    /* (Short waits: a file that is ready ends them at once.) */
    if (fd >= 0 && pipe(rp) == 0) {
        struct pollfd pf[3] = {{fd, POLLIN | POLLOUT, 0}, {rp[0], POLLIN, 0}, {fd, POLLPRI, 0}};
        show("poll a file, an idle pipe, POLLPRI", poll(pf, 3, 200));
        show("  the file's events", pf[0].revents);
        show("  the pipe's", pf[1].revents);
        show("  POLLPRI alone", pf[2].revents);
        struct timespec ts = {0, 200000000};
        pf[0].revents = pf[1].revents = 0;
        show("ppoll the file and the pipe", ppoll(pf, 2, &ts, NULL));
        show("  the file's events", pf[0].revents);
        fd_set rs, ws, es;
        FD_ZERO(&rs);
        FD_ZERO(&ws);
        FD_ZERO(&es);
        FD_SET(fd, &rs);
        FD_SET(fd, &ws);
        FD_SET(fd, &es);
        FD_SET(rp[0], &rs);
        struct timeval tv = {0, 200000};
        int top = (fd > rp[0] ? fd : rp[0]) + 1;
        show("select a file and an idle pipe", select(top, &rs, &ws, &es, &tv));
        show("  read, write, exception", FD_ISSET(fd, &rs) * 100 + FD_ISSET(fd, &ws) * 10 +
                                             FD_ISSET(fd, &es));
        show("  the pipe readable", FD_ISSET(rp[0], &rs));
        int ep = epoll_create1(0);
        struct epoll_event ev = {.events = EPOLLIN};
        show("epoll_ctl ADD a file", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
        show("epoll_ctl DEL a file", epoll_ctl(ep, EPOLL_CTL_DEL, fd, &ev));
        close(ep);
        close(rp[0]);
        close(rp[1]);
    }
    show("fc's size still", lseek(fd, 0, SEEK_END));
    /* Ranges past 2^64 and past the largest offset: the same on every file
     * system (the largest file's own lines are in largest_file()). */
    int cf = open(path("cf"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    off64_t ci = -1, co = 0;
    show("copy_file_range from -1", copy_file_range(fd, &ci, cf, &co, 5, 0));
    ci = 0, co = -1;
    show("copy_file_range to -1", copy_file_range(fd, &ci, cf, &co, 5, 0));
    ci = -1, co = 0;
    show("copy_file_range from -1, 0 bytes", copy_file_range(fd, &ci, cf, &co, 0, 0));
    ci = 5, co = 0;
    show("copy_file_range SIZE_MAX from 5", copy_file_range(fd, &ci, cf, &co, SIZE_MAX, 0));
    ci = INT64_MAX - 2, co = 0;
    show("copy_file_range 5 from the largest-2", copy_file_range(fd, &ci, cf, &co, 5, 0));
    show("  its offsets", (long long)(ci - (INT64_MAX - 2) + co));
    ci = 20, co = 0;
    show("copy_file_range from past the end", copy_file_range(fd, &ci, cf, &co, 5, 0));
    show("sync_file_range 5 from the largest-2",
         sync_file_range(fd, INT64_MAX - 2, 5, SYNC_FILE_RANGE_WRITE));
    show("sync_file_range 1 from the largest",
         sync_file_range(fd, INT64_MAX, 1, SYNC_FILE_RANGE_WRITE));
    show("sync_file_range to the end from the largest",
         sync_file_range(fd, INT64_MAX, 0, SYNC_FILE_RANGE_WRITE));
    char four[4];
    struct iovec then_null[2] = {{four, 4}, {none, 10}};
    show("preadv into 4 bytes, then NULL", preadv(fd, then_null, 2, 0));
    show("pwritev from 4 bytes, then NULL", pwritev(cf, then_null, 2, 0));
    struct iovec empty_then_null[2] = {{four, 0}, {none, 10}};
    show("preadv into 0 bytes, then NULL", preadv(fd, empty_then_null, 2, 0));
    show("pwritev from 0 bytes, then NULL", pwritev(cf, empty_then_null, 2, 0));
    int ap2 = open(path("cf"), O_RDWR | O_APPEND);
    struct iovec two = {"ab", 2}, nothing = {four, 0};
    show("pwritev2 O_APPEND at -2", pwritev2(ap2, &two, 1, -2, 0));
    show("pwritev2 of nothing, RWF_APPEND|RWF_NOAPPEND",
         pwritev2(ap2, &nothing, 1, 0, RWF_APPEND | RWF_NOAPPEND));
    close(ap2);
    int ro2 = open(path("cf"), O_RDONLY);
    show("pwritev2 RWF_APPEND|RWF_NOAPPEND, O_RDONLY",
         pwritev2(ro2, &two, 1, 0, RWF_APPEND | RWF_NOAPPEND));
    close(ro2);
    show("ftruncate cf to 4 GiB", ftruncate(cf, (off_t)4 << 30));
    ci = 0, co = (off64_t)3 << 30;
    show("copy_file_range 4 GiB over itself",
         copy_file_range(cf, &ci, cf, &co, (size_t)4 << 30, 0));
    show("ftruncate cf to 4", ftruncate(cf, 4));
    show("cf's size", lseek(cf, 0, SEEK_END));
    close(cf);
    unlink(path("cf"));
    close(fd);
    show("unlink fc", unlink(path("fc")));
}

/* Offsets and lengths past the largest file a file system takes (2^60 is
 * past ext4's and the store's, not tmpfs's): asserted by the test that runs
 * this, not compared with a local directory. */
static void largest_file(void) {
    const off64_t big = (off64_t)1 << 60;
    int fd = open(path("lg"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    int fo = open(path("lg2"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("write lg", write(fd, "0123456789", 10));
    show("ftruncate 2^60", ftruncate(fd, big));
    show("truncate 2^60", truncate(path("lg"), big));
    show("fallocate 1 at 2^60", fallocate(fd, 0, big, 1));
    show("fallocate 2^60 at 0", fallocate(fd, 0, 0, big));
    show("fallocate KEEP_SIZE 1 at 2^60", fallocate(fd, FALLOC_FL_KEEP_SIZE, big, 1));
    show("fallocate PUNCH_HOLE 1 at 2^60",
         fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, big, 1));
    show("lseek to 2^60", lseek(fd, big, SEEK_SET));
    show("lseek to the end + 2^60", lseek(fd, big, SEEK_END));
    show("lseek to the largest offset", lseek(fd, INT64_MAX, SEEK_SET));
    show("pwrite 2 at 2^60", pwrite(fd, "ab", 2, big));
    show("pwrite 0 at 2^60", pwrite(fd, "ab", 0, big));
    off64_t ci = 0, co = big;
    show("copy_file_range to 2^60", copy_file_range(fd, &ci, fo, &co, 5, 0));
    ci = 0, co = big;
    show("copy_file_range 0 bytes to 2^60", copy_file_range(fd, &ci, fo, &co, 0, 0));
    show("sync_file_range 5 from 2^60", sync_file_range(fd, big, 5, SYNC_FILE_RANGE_WRITE));
    show("lg's size", lseek(fd, 0, SEEK_END));
    show("lg2's size", lseek(fo, 0, SEEK_END));
    close(fo);
    close(fd);
    unlink(path("lg"));
    unlink(path("lg2"));
}

/* Writes cut at the largest file, wherever that is: found with ftruncate,
 * which takes every length up to it and none past it. */
static void at_largest(void) {
    int fd = open(path("al"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    long long lo = 0, hi = INT64_MAX;
    while (lo < hi) {
        long long mid = lo + (long long)(((unsigned long long)hi - lo + 1) / 2);
        if (ftruncate(fd, mid) == 0)
            lo = mid;
        else
            hi = mid - 1;
    }
    show("the largest length past 2^40", lo > (1LL << 40));
    show("ftruncate to it", ftruncate(fd, lo));
    show("ftruncate past it", ftruncate(fd, lo + 1));
    show("ftruncate 0", ftruncate(fd, 0));
    show("pwrite 2 ending one past it", pwrite(fd, "ab", 2, lo - 1));
    show("  the size is the largest", lseek(fd, 0, SEEK_END) == lo);
    char b[4] = {0};
    show("  pread its last byte", pread(fd, b, 4, lo - 1));
    show("  the byte written", b[0] == 'a');
    show("pwrite 2 at it", pwrite(fd, "ab", 2, lo));
    show("lseek to one before it", lseek(fd, lo - 1, SEEK_SET) == lo - 1);
    show("write 3 from there", write(fd, "xyz", 3));
    show("  the position is the largest", lseek(fd, 0, SEEK_CUR) == lo);
    show("write 3 from it", write(fd, "xyz", 3));
    struct iovec v[2] = {{"12", 2}, {"34", 2}};
    show("pwritev 2+2 ending one past it", pwritev(fd, v, 2, lo - 3));
    show("  the bytes written", pread(fd, b, 4, lo - 3) == 3 && memcmp(b, "123", 3) == 0);
    show("ftruncate 0 again", ftruncate(fd, 0));
    close(fd);
    unlink(path("al"));
}

/* A directory asked for where a file is, or where nothing is; blocks shared
   with another file; an O_DIRECT vectored read whose second buffer is not
   aligned (refused whole, before anything is read). */
static void directory_errnos(void) {
    close(open(path("de"), O_CREAT | O_RDWR | O_TRUNC, 0644));
    errno = 0;
    DIR *d = opendir(path("de-missing"));
    show("opendir of a missing name", d ? 0 : -1);
    if (d)
        closedir(d);
    d = opendir(path("de"));
    show("opendir of a file", d ? 0 : -1);
    if (d)
        closedir(d);
    show("open O_DIRECTORY of a missing name", open(path("de-missing"), O_RDONLY | O_DIRECTORY));
    show("open O_DIRECTORY of a file", open(path("de"), O_RDONLY | O_DIRECTORY));
    /* A name and a trailing slash: a file so named, or nothing. */
    show("open of a missing name/", open(path("de-missing/"), O_RDONLY));
    show("open O_CREAT of a missing name/", open(path("de-missing/"), O_CREAT | O_WRONLY, 0644));
    show("open of a file/", open(path("de/"), O_RDONLY));
    show("open O_CREAT of a file/", open(path("de/"), O_CREAT | O_WRONLY, 0644));
    struct stat sst;
    show("stat of a missing name/", stat(path("de-missing/"), &sst));
    show("stat of a file/", stat(path("de/"), &sst));
    show("unlink of a missing name/", unlink(path("de-missing/")));
    show("unlink of a file/", unlink(path("de/")));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    show("unlinkat AT_REMOVEDIR of a missing name", unlinkat(dfd, "de-missing", AT_REMOVEDIR));
    show("unlinkat AT_REMOVEDIR of a file", unlinkat(dfd, "de", AT_REMOVEDIR));
    close(dfd);
    int a = open(path("de"), O_RDONLY), b = open(path("de2"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    show("ioctl FICLONE", ioctl(b, 0x40049409, a));
    close(a);
    close(b);
    static char space[16384] __attribute__((aligned(4096)));
    int od = open(path("de"), O_RDWR | O_DIRECT);
    if (od >= 0) {
        struct iovec w[2] = {{space, 512}, {space + 4096, 512}};
        show("pwritev O_DIRECT", pwritev(od, w, 2, 0));
        struct iovec r[2] = {{space, 512}, {space + 8193, 512}};
        show("preadv O_DIRECT, second buffer unaligned", preadv(od, r, 2, 0));
        struct iovec r2[2] = {{space, 512}, {space + 8192, 4}};
        show("preadv O_DIRECT, second length unaligned", preadv(od, r2, 2, 0));
        close(od);
    }
    unlink(path("de"));
    unlink(path("de2"));
}

/* Formatted output straight to a descriptor: dprintf formats inside the C
 * library, whose write is out of a preloaded library's reach. More arguments
 * than the registers hold, of both kinds; the fortified form too. */
extern int __dprintf_chk(int fd, int flag, const char *fmt, ...);

static int fd_vprint(int fd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vdprintf(fd, fmt, ap);
    va_end(ap);
    return n;
}

static void fd_printing(void) {
    int fd = open(path("printed"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("dprintf", fd >= 0 ? dprintf(fd, "%d %d %d %d %d %d %d|%s|%.1f %.1f %.1f %.1f %.1f "
                                          "%.1f %.1f %.1f %.1f %.1f\n",
                                      1, 2, 3, 4, 5, 6, 7, "many", 0.5, 1.5, 2.5, 3.5, 4.5, 5.5,
                                      6.5, 7.5, 8.5, 9.5)
                            : -2);
    show("vdprintf", fd >= 0 ? fd_vprint(fd, "%s=%ld\n", "long", 1234567890123L) : -2);
    show("__dprintf_chk", fd >= 0 ? __dprintf_chk(fd, 1, "%5d|%-3c|\n", 12, 'x') : -2);
    show("dprintf of nothing", fd >= 0 ? dprintf(fd, "%s", "") : -2);
    show("the position after them", fd >= 0 ? (long long)lseek(fd, 0, SEEK_CUR) : -2);
    /* At the position, over bytes written before. */
    show("lseek back", fd >= 0 ? (long long)lseek(fd, 2, SEEK_SET) : -2);
    show("dprintf over them", fd >= 0 ? dprintf(fd, "<%c>", 'o') : -2);
    if (fd >= 0)
        close(fd);
    show_size("stat printed", "printed");
    FILE *g = fopen(path("printed"), "r");
    char line[256];
    while (g && fgets(line, sizeof line, g))
        printf("  printed: %s", line);
    if (g)
        fclose(g);
    int ro = open(path("printed"), O_RDONLY);
    errno = 0;
    int r = ro >= 0 ? dprintf(ro, "refused %d\n", 1) : -2;
    printf("%-40s %d %s\n", "dprintf to a read-only descriptor", r, r < 0 ? strerror(errno) : "");
    if (ro >= 0)
        close(ro);
    show_size("stat printed after it", "printed");
    unlink(path("printed"));
}

/* The standard streams made copies of a file's descriptor by dup2, as a
   shell's builtins redirected in its own process are: what stdout and
   stderr write goes to the file, stdin reads it. */
static void std_streams(void) {
    fflush(stdout);
    int saved_in = dup(0), saved_out = dup(1), saved_err = dup(2);
    int fd = open(path("so"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int rc = dup2(fd, 1);
    close(fd);
    printf("printf %d\n", 42);
    puts("puts");
    putchar('c');
    putchar('\n');
    fwrite("fwrite\n", 1, 7, stdout);
    printf("fileno %d\n", fileno(stdout));
    int flushed = fflush(stdout);
    int err = ferror(stdout);
    dup2(saved_out, 1);
    show("dup2 of a file onto 1", rc);
    show("fflush of stdout over it", flushed);
    show("ferror of stdout over it", err);
    fd = open(path("se"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    rc = dup2(fd, 2);
    close(fd);
    fprintf(stderr, "to stderr\n");
    int again = dup2(2, 1);
    printf("to stdout after 1>&2\n");
    fflush(stdout);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    show("dup2 of a file onto 2", rc);
    show("dup2 of 2 onto 1", again);
    fd = open(path("so"), O_RDONLY);
    rc = dup2(fd, 0);
    close(fd);
    char line[100];
    int lines = 0;
    unsigned h = 0;
    while (fgets(line, sizeof line, stdin)) {
        lines++;
        h = h * 31 + sum((const unsigned char *)line, strlen(line));
    }
    int eof = feof(stdin);
    clearerr(stdin);
    dup2(saved_in, 0);
    /* 1 closed, then a file's descriptor lands on it by dup, then by open. */
    fd = open(path("sd"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    fflush(stdout);
    close(1);
    int got = dup(fd);
    printf("via dup at %d\n", got);
    fflush(stdout);
    close(1);
    int at = open(path("sd2"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    printf("via open at %d\n", at);
    fflush(stdout);
    dup2(saved_out, 1);
    close(fd);
    close(saved_in);
    close(saved_out);
    close(saved_err);
    show("dup2 of a file onto 0", rc);
    printf("%-40s %d lines, eof %d, sum %u\n", "stdin over a file", lines, eof, h);
    show_sum("what stdout wrote", "so", 100);
    show_sum("what stderr and 1>&2 wrote", "se", 100);
    show_sum("what a dup onto a closed 1 wrote", "sd", 100);
    show_sum("what an open onto a closed 1 wrote", "sd2", 100);
    unlink(path("so"));
    unlink(path("se"));
    unlink(path("sd"));
    unlink(path("sd2"));
}

static void common(void) {
    unsigned char buf[20000], back[20000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 7 + 3);

    int fd = open(path("p1"), O_CREAT | O_RDWR | O_EXCL, 0644);
    show("open O_CREAT|O_EXCL", fd >= 0 ? 0 : -1);
    show("open O_CREAT|O_EXCL again", open(path("p1"), O_CREAT | O_RDWR | O_EXCL, 0644));
    show("pwrite 10000 at 100", pwrite(fd, buf, 10000, 100));
    struct stat st;
    fstat(fd, &st);
    show("fstat size", st.st_size);
    memset(back, 0xee, sizeof back);
    show("pread 200 at 0", pread(fd, back, 200, 0));
    printf("%-40s %u %u\n", "  zeros then data", sum(back, 100), sum(back + 100, 100) == sum(buf, 100));
    show("pread at the end", pread(fd, back, 10, 10100));
    show("pread past the end", pread(fd, back, 10, 20000));
    {
        /* Hidden from the compiler's non-null checks. */
        char *volatile nul = NULL;
        show("pread into NULL", pread(fd, nul, 10, 0));
        show("write from NULL", write(fd, nul, 10));
        struct iovec bad[1] = {{nul, 10}};
        show("preadv into NULL", preadv(fd, bad, 1, 0));
        /* At or past the end there is nothing to copy: no fault. */
        show("pread into NULL at the end", pread(fd, nul, 10, 10100));
        off_t here = lseek(fd, 0, SEEK_CUR);
        lseek(fd, 0, SEEK_END);
        show("read into NULL at the end", read(fd, nul, 10));
        struct iovec bad2[2] = {{nul, 10}, {back, 5}};
        show("readv into NULL at the end", readv(fd, bad2, 2));
        show("preadv into NULL past the end", preadv(fd, bad2, 2, 20000));
        show("preadv2 into NULL at the end", preadv2(fd, bad2, 2, 10100, 0));
        lseek(fd, here, SEEK_SET);
    }
    {
        /* A regular file by mknod, and what it refuses, type first. */
        struct stat ms;
        show("mknod S_IFREG", mknod(path("mk"), S_IFREG | 0644, 0));
        show("  a regular file of 0 bytes",
             stat(path("mk"), &ms) == 0 && S_ISREG(ms.st_mode) && ms.st_size == 0);
        show("mknod S_IFREG again", mknod(path("mk"), S_IFREG | 0644, 0));
        show("mknodat of no type", mknodat(AT_FDCWD, path("mk2"), 0644, 0));
        show("  a regular file", stat(path("mk2"), &ms) == 0 && S_ISREG(ms.st_mode));
        show("mknod of a bad type over a file", mknod(path("mk"), 0170000 | 0644, 0));
        show("mknod S_IFDIR", mknod(path("mk3"), S_IFDIR | 0755, 0));
        show("mknod S_IFDIR over a file", mknod(path("mk"), S_IFDIR | 0755, 0));
        unlink(path("mk"));
        unlink(path("mk2"));
    }
    {
        /* A name the store cannot hold (a leading '.') names no file. */
        struct stat hs;
        show("stat of a missing .name", stat(path(".hid"), &hs));
        show("unlink of a missing .name", unlink(path(".hid")));
        show("open of a missing .name", open(path(".hid"), O_RDONLY));
    }
    show("lseek end", lseek(fd, 0, SEEK_END));
    show("write 4 at the end", write(fd, "tail", 4));
    show("lseek cur", lseek(fd, 0, SEEK_CUR));
    show("lseek negative", lseek(fd, -1, SEEK_SET));

    struct iovec v[3] = {{buf, 100}, {buf + 1000, 3000}, {buf + 5000, 1}};
    show("pwritev 3 buffers at 20000", pwritev(fd, v, 3, 20000));
    memset(back, 0, sizeof back);
    struct iovec r[2] = {{back, 50}, {back + 50, 4000}};
    show("preadv 2 buffers at 20000", preadv(fd, r, 2, 20000));
    printf("%-40s %d %d\n", "  same bytes", memcmp(back, buf, 100) == 0,
           memcmp(back + 100, buf + 1000, 3000) == 0);
    show("lseek 0", lseek(fd, 0, SEEK_SET));
    show("writev 2 buffers", writev(fd, v, 2));
    show("lseek cur after writev", lseek(fd, 0, SEEK_CUR));
    show("lseek 0", lseek(fd, 0, SEEK_SET));
    show("readv", readv(fd, r, 2));
    show("read 10", read(fd, back, 10));
    show("lseek cur after reads", lseek(fd, 0, SEEK_CUR));

    show("ftruncate 5000", ftruncate(fd, 5000));
    fstat(fd, &st);
    show("fstat size", st.st_size);
    show("pread 100 at 4990", pread(fd, back, 100, 4990));
    show("ftruncate 6000", ftruncate(fd, 6000));
    show("pread 20 at 4990", pread(fd, back, 20, 4990));
    printf("%-40s %u\n", "  zeros past the old end", sum(back + 10, 10));

    int d2 = dup(fd);
    show("dup", d2 >= 0 ? 0 : -1);
    lseek(fd, 123, SEEK_SET);
    show("dup shares the position", lseek(d2, 0, SEEK_CUR));
    int d3 = fcntl(fd, F_DUPFD_CLOEXEC, 50);
    show("F_DUPFD_CLOEXEC >= 50", d3 >= 50);
    show("F_GETFD of it", fcntl(d3, F_GETFD));
    show("F_GETFL access mode", fcntl(fd, F_GETFL) & O_ACCMODE);
    show("F_GETFL", fcntl(fd, F_GETFL));
    show("F_SETFL O_APPEND", fcntl(fd, F_SETFL, O_APPEND));
    show("F_GETFL has O_APPEND", (fcntl(fd, F_GETFL) & O_APPEND) != 0);
    show("pwrite with O_APPEND (appends)", pwrite(fd, "xy", 2, 0));
    fstat(fd, &st);
    show("fstat size", st.st_size);
    struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 100};
    show("F_SETLK write lock", fcntl(fd, F_SETLK, &lk));
    lk.l_type = F_WRLCK;
    show("F_GETLK", fcntl(fd, F_GETLK, &lk));
    show("  lock type found", lk.l_type == F_UNLCK);
    show("fsync", fsync(fd));
    show("fdatasync", fdatasync(fd));
    show("close dup", close(d2));
    show("close dup", close(d3));
    show("close", close(fd));
    show("close again", close(fd));

    show_size("stat p1", "p1");
    show("access F_OK", access(path("p1"), F_OK));
    show("access R_OK|W_OK", access(path("p1"), R_OK | W_OK));
    show("access missing", access(path("nothing"), F_OK));
    show("rename p1 p2", rename(path("p1"), path("p2")));
    show_size("stat p1", "p1");
    show_size("stat p2", "p2");
    fd = open(path("p3"), O_CREAT | O_WRONLY, 0644);
    show("write p3", write(fd, buf, 3000));
    close(fd);
    show("rename p2 over p3", rename(path("p2"), path("p3")));
    show_size("stat p3", "p3");
    fd = open(path("p4"), O_CREAT | O_WRONLY, 0644);
    close(fd);
    show("renameat2 NOREPLACE over p4",
         renameat2(AT_FDCWD, path("p3"), AT_FDCWD, path("p4"), RENAME_NOREPLACE));
    show("renameat2 an unknown flag",
         renameat2(AT_FDCWD, path("p3"), AT_FDCWD, path("p5"), 1u << 7));
    show("renameat2 NOREPLACE|EXCHANGE",
         renameat2(AT_FDCWD, path("p3"), AT_FDCWD, path("p5"), RENAME_NOREPLACE | RENAME_EXCHANGE));
    show("renameat2 NOREPLACE p4 p5",
         renameat2(AT_FDCWD, path("p4"), AT_FDCWD, path("p5"), RENAME_NOREPLACE));
    show("renameat2 NOREPLACE p5 p5",
         renameat2(AT_FDCWD, path("p5"), AT_FDCWD, path("p5"), RENAME_NOREPLACE));
    show_size("stat p4", "p4");
    show("unlink p5", unlink(path("p5")));
    list("list");

    fd = open(path("p3"), O_RDONLY | O_TRUNC);
    fstat(fd, &st);
    show("O_RDONLY|O_TRUNC size", st.st_size);
    close(fd);
    fd = open(path("p3"), O_WRONLY);
    show("write p3 again", write(fd, buf, 3000));
    close(fd);
    fd = open(path("p3"), O_RDWR | O_TRUNC);
    fstat(fd, &st);
    show("O_TRUNC size", st.st_size);
    show("posix_fallocate 8192", posix_fallocate(fd, 0, 8192));
    fstat(fd, &st);
    show("size", st.st_size);
    show("fallocate KEEP_SIZE", fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, 100000));
    fstat(fd, &st);
    show("size", st.st_size);
    show("posix_fadvise SEQUENTIAL", posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL));
    show("posix_fadvise DONTNEED", posix_fadvise(fd, 0, 4096, POSIX_FADV_DONTNEED));
    close(fd);

    fd = open(path("a"), O_CREAT | O_WRONLY | O_APPEND, 0644);
    show("append 5", write(fd, "hello", 5));
    show("append 6", write(fd, " world", 6));
    show("seek to 2", lseek(fd, 2, SEEK_SET));
    show("append nothing", write(fd, "", 0));
    show("  position after it", lseek(fd, 0, SEEK_CUR));
    close(fd);
    fd = open(path("a"), O_RDONLY);
    memset(back, 0, 32);
    show("read appended", read(fd, back, 32));
    printf("%-40s %s\n", "  bytes", back);
    show("write on O_RDONLY", write(fd, "x", 1));
    show("ftruncate on O_RDONLY", ftruncate(fd, 0));
    close(fd);
    fd = open(path("a"), O_WRONLY);
    show("read on O_WRONLY", read(fd, back, 1));
    close(fd);
    fd = creat(path("c"), 0644);
    show("creat then write", write(fd, "abc", 3));
    close(fd);
    show_size("stat c", "c");

    fd = open(path("d"), O_CREAT | O_RDWR | O_DIRECT, 0644);
    void *al = NULL;
    if (posix_memalign(&al, 4096, 8192) != 0)
        abort();
    memcpy(al, buf, 8192);
    show("O_DIRECT aligned pwrite", pwrite(fd, al, 8192, 0));
    show("O_DIRECT misaligned pwrite", pwrite(fd, al, 100, 0));
    show("O_DIRECT misaligned offset", pread(fd, al, 4096, 100));
    show("O_DIRECT aligned pread", pread(fd, al, 4096, 4096));
    printf("%-40s %d\n", "  same bytes", memcmp(al, buf + 4096, 4096) == 0);
    struct iovec halves[2] = {{al, 4096}, {(char *)al + 4096, 4096}};
    show("O_DIRECT pwritev of two buffers", pwritev(fd, halves, 2, 0));
    struct iovec odd[2] = {{al, 4096}, {(char *)al + 4096, 100}};
    show("O_DIRECT pwritev, one misaligned", pwritev(fd, odd, 2, 0));
    close(fd);
    /* An O_DIRECT append is aligned at the file's end, not at offset 0. */
    fd = open(path("da"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    show("write 100 to da", write(fd, buf, 100));
    close(fd);
    fd = open(path("da"), O_WRONLY | O_APPEND | O_DIRECT);
    show("O_DIRECT append at an unaligned end", write(fd, al, 4096));
    close(fd);
    show_size("stat da", "da");
    unlink(path("da"));
    free(al);

    FILE *f = fopen(path("s"), "w");
    show("fopen w", f ? 0 : -1);
    if (f) {
        fprintf(f, "line one\nline two\n");
        show("fflush", fflush(f));
        show("fileno is a descriptor", fileno(f) >= 0);
        show("fsync of fileno", fsync(fileno(f)));
        show("fclose", fclose(f));
    }
    f = fopen(path("s"), "r");
    show("fopen r", f ? 0 : -1);
    if (f) {
        char line[64] = "";
        char *got = fgets(line, sizeof line, f);
        got = fgets(line, sizeof line, f);
        printf("%-40s %s", "  second line", got ? line : "(none)\n");
        fclose(f);
    }
    /* Opened to append only, a stream starts at the end; "a+" reads from
     * the start. */
    f = fopen(path("s"), "a");
    show("fopen a, ftell", f ? ftell(f) : -2);
    if (f)
        fclose(f);
    f = fopen(path("s"), "a+");
    show("fopen a+, ftell", f ? ftell(f) : -2);
    if (f)
        fclose(f);
    /* A '+' past the second letter still opens for both. */
    f = fopen(path("s"), "rbe+");
    show("fopen rbe+, fputs", f ? fputs("x", f) : -2);
    show("  fflush", f ? fflush(f) : -2);
    if (f)
        fclose(f);
    fd = open(path("s"), O_WRONLY);
    f = fdopen(fd, "a");
    show("fdopen a, ftell", f ? ftell(f) : -2);
    if (f)
        fclose(f);

    edges();
    wide_chars();
    more_calls();
    flag_checks();
    show("open missing", open(path("missing"), O_RDONLY));
    show("unlink p3", unlink(path("p3")));
    show("unlink p3 again", unlink(path("p3")));
    show_size("stat p3", "p3");
    list("list");
    /* rewinddir shows the directory as it is now. */
    DIR *rd = opendir(dir);
    if (rd) {
        int made = open(path("made-later"), O_CREAT | O_WRONLY, 0644);
        close(made);
        rewinddir(rd);
        int seen = 0;
        struct dirent *e;
        while ((e = readdir(rd)))
            seen |= strcmp(e->d_name, "made-later") == 0;
        printf("%-40s %d\n", "rewinddir shows a file made since", seen);
        closedir(rd);
        unlink(path("made-later"));
    }
    directory_errnos();
    std_streams();
    fd_printing();
    const char *names[] = {"a", "c", "d", "s"};
    for (int i = 0; i < 4; i++)
        unlink(path(names[i]));
    list("list after unlinking all");
}

/* Files closed once, opened again, written and closed while another thread
 * looks the same file up by name; then an exit that runs no exit handler:
 * each last close must have synced its file all the same. */
static const char *volatile race_name;
static volatile int stat_stop;

static void *stat_loop(void *arg) {
    (void)arg;
    struct stat st;
    while (!stat_stop) {
        const char *n = race_name;
        if (n)
            stat(n, &st);
    }
    return NULL;
}

static void close_race(const char *prefix) {
    static char names[64][4200];
    pthread_t t;
    pthread_create(&t, NULL, stat_loop, NULL);
    for (int i = 0; i < 64; i++) {
        char name[64];
        snprintf(name, sizeof name, "%.40s%d", prefix, i);
        snprintf(names[i], sizeof names[i], "%s", path(name));
        int fd = open(names[i], O_CREAT | O_RDWR, 0644);
        close(fd);
        race_name = names[i];
        fd = open(names[i], O_RDWR);
        if (write(fd, "synced", 6) != 6)
            abort();
        close(fd);
    }
    stat_stop = 1;
    pthread_join(t, NULL);
    fflush(stdout);
    _exit(0);
}

static void refused(void) {
    int fd = open(path("m"), O_CREAT | O_RDWR, 0644);
    show("write", write(fd, "data", 4));
    void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    show("mmap", p == MAP_FAILED ? -1 : 0);
    char c;
    show("read after refused mmap", pread(fd, &c, 1, 0));
    show("mkdir inside", mkdir(path("sub"), 0755));
    show("mkdirat inside", mkdirat(AT_FDCWD, path("sub2"), 0755));
    show("mknod inside", mknod(path("fifo"), S_IFIFO | 0644, 0));
    show("symlink inside", symlink("/tmp", path("sym")));
    show("link inside", link(path("m"), path("m2")));
    char outside[] = "/tmp/setcache-probe-linkXXXXXX";
    int o = mkstemp(outside);
    show("link from outside", link(outside, path("ln")));
    close(o);
    unlink(outside);
    show("mkfifo inside", mkfifo(path("fifo2"), 0644));
    show("mkfifoat inside", mkfifoat(AT_FDCWD, path("fifo3"), 0644));
    char tmpl[4200];
    snprintf(tmpl, sizeof tmpl, "%s", path("tdXXXXXX"));
    show("mkdtemp inside", mkdtemp(tmpl) ? 0 : -1);
    show("setxattr", setxattr(path("m"), "user.k", "v", 1, 0));
    show("fsetxattr", fsetxattr(fd, "user.k", "v", 1, 0));
    show("removexattr", removexattr(path("m"), "user.k"));
    show("fremovexattr", fremovexattr(fd, "user.k"));
    show("setxattr of a missing file", setxattr(path("nothing"), "user.k", "v", 1, 0));
    /* An unnamed file in the store's directory itself, and inside it. */
    int t = open(dir, O_RDWR | O_TMPFILE, 0600);
    show("O_TMPFILE in the store's directory", t);
    if (t >= 0)
        close(t);
    close(fd);
    unlink(path("m"));
}

/* After fork, the child's descriptors of the store's files fail: the store
 * (its cache and its I/O threads) lives in the parent. */
static void after_fork(void) {
    int fd = open(path("f"), O_CREAT | O_RDWR, 0644);
    show("write", write(fd, "data", 4));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char c;
        show("child: pread", pread(fd, &c, 1, 0));
        show("child: open", open(path("f"), O_RDONLY));
        /* What the kernel would answer of the placeholder is not the
         * store file's: refused too. */
        struct stat st;
        show("child: fstat", fstat(fd, &st));
        show("child: fstatat empty path", fstatat(fd, "", &st, AT_EMPTY_PATH));
        show("child: faccessat empty path", faccessat(fd, "", F_OK, AT_EMPTY_PATH));
        show("child: fchownat empty path", fchownat(fd, "", getuid(), (gid_t)-1, AT_EMPTY_PATH));
        show("child: fcntl F_GETFL", fcntl(fd, F_GETFL));
        show("child: fcntl F_GETFD", fcntl(fd, F_GETFD));
        show("child: fchdir", fchdir(fd));
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    char back[4];
    show("parent: pread", pread(fd, back, 4, 0));
    struct stat st;
    memset(&st, 0, sizeof st);
    /* Through a pointer: the header declares the path non-null. */
    int (*statat)(int, const char *, struct stat *, int) = fstatat;
    const char *volatile none = NULL;
    int rc = statat(fd, none, &st, AT_EMPTY_PATH);
    printf("%-40s %d size %lld\n", "parent: fstatat null path", rc, (long long)st.st_size);
    show("parent: faccessat empty path R_OK", faccessat(fd, "", R_OK, AT_EMPTY_PATH));
    show("parent: faccessat empty path X_OK", faccessat(fd, "", X_OK, AT_EMPTY_PATH));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    printf("%-40s %d\n", "parent: spawn action opening a store file",
           posix_spawn_file_actions_addopen(&fa, 1, path("spawned"), O_WRONLY | O_CREAT, 0644));
    printf("%-40s %d\n", "parent: spawn action opening /dev/null",
           posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0));
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    unlink(path("f"));
}

/* A file written, closed, opened again, written and closed; a file looked
 * up by name before it is opened and written; then an exit that runs no exit
 * handler: what the last closes synced is all that is left. */
static void reopen(void) {
    int fd = open(path("r"), O_CREAT | O_RDWR, 0644);
    show("write first", write(fd, "first", 5));
    show("close", close(fd));
    fd = open(path("r"), O_RDWR);
    show("pwrite again", pwrite(fd, "again", 5, 0));
    show("close again", close(fd));
    fd = open(path("j"), O_CREAT | O_RDWR, 0644);
    show("close j", close(fd));
    show("access j", access(path("j"), F_OK));
    fd = open(path("j"), O_RDWR);
    show("write j", write(fd, "journal", 7));
    show("close j again", close(fd));
    fflush(stdout);
    /* The raw system call, which no library sees (as a kill would end the
     * process): only what the calls above made durable is kept. */
    syscall(SYS_exit_group, 0);
}

/* Files written, not closed, then `_exit` or `_Exit`, which run no exit
 * handler: what was written is kept, as a local file system keeps it. */
/* An at_quick_exit handler that writes a file of the store. */
static void quick_exit_writer(void) {
    int fd = open(path("uq"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    write(fd, "by at_quick_exit", 16);
}

static void underscore_exit(const char *how) {
    if (strcmp(how, "quick_exit") == 0)
        at_quick_exit(quick_exit_writer);
    int fd = open(path("ue"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("write ue", write(fd, "kept at _exit", 13));
    int g = open(path("ug"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("ftruncate ug", ftruncate(g, 5000));
    fflush(stdout);
    if (strcmp(how, "_Exit") == 0)
        _Exit(0);
    if (strcmp(how, "quick_exit") == 0)
        quick_exit(0);
    _exit(0);
}

/* A thread that writes and syncs a file of the store until it is
 * cancelled: at one of those calls, which are cancellation points. */
static void *cancelled_writer(void *arg) {
    int fd = open(path((const char *)arg), O_CREAT | O_RDWR, 0644);
    for (;;) {
        pwrite(fd, "x", 1, 0);
        fsync(fd);
    }
    return NULL;
}

/* Threads cancelled while they write and sync files of the store: each is
 * cancelled (at a call it makes, not inside the library, where an unwind
 * would end the process), and the process goes on. */
static void cancel_writers(void) {
    close(open(path("cw"), O_CREAT | O_RDWR, 0644));
    int cancelled = 0, r = 0;
    time_t start = time(NULL);
    for (; r < 40 && time(NULL) - start < 20; r++) {
        pthread_t t;
        void *res;
        pthread_create(&t, NULL, cancelled_writer, (void *)(r % 2 ? "cw" : "cv"));
        usleep(5000);
        pthread_cancel(t);
        pthread_join(t, &res);
        cancelled += res == PTHREAD_CANCELED;
    }
    printf("%-40s %d of %d\n", "threads cancelled", cancelled, r);
}

static int late_fd = -1, late_grown = -1, late_allocated = -1;

static void late_write(void) {
    if (pwrite(late_fd, "two", 3, 3) != 3)
        abort();
    if (ftruncate(late_grown, 5) != 0 || posix_fallocate(late_allocated, 0, 7) != 0)
        abort();
}

/* An exit handler registered before the store is first used runs after the
 * library's own, which syncs: its write, and the lengths it grows files to,
 * must not be lost. */
static void exit_writes(void) {
    atexit(late_write);
    late_fd = open(path("x"), O_CREAT | O_RDWR, 0644);
    late_grown = open(path("xg"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    late_allocated = open(path("xa"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("write one", write(late_fd, "one", 3));
}

/* A thread that writes a store file after the main thread has ended. */
static void *late_thread(void *arg) {
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int fd = open(path((const char *)arg), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "late", 4) != 4 || close(fd) != 0)
        abort();
    return NULL;
}

/* The main thread ends with pthread_exit while another thread still works:
 * the process must end once that thread does, with what it wrote kept. With
 * `touch`, the main thread uses the store first (the store's threads are
 * running when it ends); without, the other thread opens it later. */
static void main_ends_first(int touch) {
    static char name[8];
    snprintf(name, sizeof name, "%s", touch ? "pt" : "pu");
    if (touch) {
        int fd = open(path("pm"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        show("write pm", write(fd, "main", 4));
        show("close pm", close(fd));
    }
    pthread_t t;
    if (pthread_create(&t, NULL, late_thread, name) != 0)
        abort();
    pthread_exit(NULL);
}

/* The bytes of each file named. */
static void cat(int argc, char **argv) {
    for (int i = 3; i < argc; i++) {
        char b[64] = "";
        int fd = open(path(argv[i]), O_RDONLY);
        long long n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
        printf("%s: %lld %s\n", argv[i], n, n > 0 ? b : "");
        if (fd >= 0)
            close(fd);
    }
}

/* Stats each of argv[3..]: its size, or the errno. */
static void stat_names(int argc, char **argv) {
    for (int i = 3; i < argc; i++)
        show_size(argv[i], argv[i]);
}

/* linkat of argv[3] (a name in the probe's directory) to argv[4] (a path)
 * following a link argv[3] ends in, then with a flag linkat does not know. */
/* Paths with `..` below a name of the directory (a file of it, and a name
 * it does not have), given a path to the directory through a symbolic link
 * (the kernel follows the link, then stops at the name). */
static void dot_dots(void) {
    int fd = open(path("dd"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    show("create dd", fd < 0 ? -1 : 0);
    if (fd >= 0)
        close(fd);
    struct stat st;
    show("open a file's ..", open(path("dd/.."), O_RDONLY));
    show("open a file's .. O_CREAT", open(path("dd/.."), O_WRONLY | O_CREAT, 0644));
    show("stat a file's ..", stat(path("dd/.."), &st));
    show("access below a file's ..", access(path("dd/../dd"), F_OK));
    show("rename to below a file's ..", rename(path("dd"), path("dd/../de")));
    show("rename from below a file's ..", rename(path("dd/../dd"), path("de")));
    show("link to below a file's ..", link(path("dd"), path("dd/../de")));
    show("unlink below a file's ..", unlink(path("dd/../dd")));
    show("open below a missing name's ..", open(path("nx/../dd"), O_RDONLY));
    show("rename to below a missing name's ..", rename(path("dd"), path("nx/../de")));
    show("rename from below a missing name's ..", rename(path("nx/../dd"), path("de")));
    show("link to below a missing name's ..", link(path("dd"), path("nx/../de")));
    show("stat de", stat(path("de"), &st));
    show("unlink dd", unlink(path("dd")));
}

static void link_names(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: probe DIR link NAME TO\n");
        exit(2);
    }
    show("linkat AT_SYMLINK_FOLLOW",
         linkat(AT_FDCWD, path(argv[3]), AT_FDCWD, argv[4], AT_SYMLINK_FOLLOW));
    show("linkat unknown flag", linkat(AT_FDCWD, path(argv[3]), AT_FDCWD, argv[4], 0x40000));
    int fd = open(path(argv[3]), O_RDONLY);
    show("linkat AT_EMPTY_PATH", linkat(fd, "", AT_FDCWD, argv[4], AT_EMPTY_PATH));
    close(fd);
}

/* Opens file argv[3], then opens it again through /proc/self/fd/N and
 * /dev/fd/N, reading each. */
static void reopen_by_fd(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: probe DIR reopen-fd NAME\n");
        exit(2);
    }
    int fd = open(path(argv[3]), O_RDONLY);
    const char *forms[] = {"/proc/self/fd/%d", "/dev/fd/%d"};
    for (int i = 0; i < 2; i++) {
        char p[64], b[64] = "";
        snprintf(p, sizeof p, forms[i], fd);
        int again = open(p, O_RDONLY);
        long long n = again < 0 ? -1 : read(again, b, sizeof b - 1);
        printf("reopen %s: %lld %s\n", forms[i], n, n > 0 ? b : "");
        if (again >= 0)
            close(again);
    }
    /* Through the thread's own directory, and /dev/stdin once 0 is a copy. */
    char t[96], tb[64] = "";
    snprintf(t, sizeof t, "/proc/self/task/%d/fd/%d", (int)gettid(), fd);
    int again = open(t, O_RDONLY);
    long long tn = again < 0 ? -1 : read(again, tb, sizeof tb - 1);
    printf("reopen /proc/self/task/T/fd/N: %lld %s\n", tn, tn > 0 ? tb : "");
    if (again >= 0)
        close(again);
    int saved = dup(0);
    dup2(fd, 0);
    memset(tb, 0, sizeof tb);
    again = open("/dev/stdin", O_RDONLY);
    tn = again < 0 ? -1 : read(again, tb, sizeof tb - 1);
    printf("reopen /dev/stdin: %lld %s\n", tn, tn > 0 ? tb : "");
    if (again >= 0)
        close(again);
    dup2(saved, 0);
    close(saved);
    /* Below the descriptor's link: a file has nothing below it. */
    char below[80];
    snprintf(below, sizeof below, "/proc/self/fd/%d/x", fd);
    show("open /proc/self/fd/N/x O_CREAT", open(below, O_CREAT | O_WRONLY, 0644));
    snprintf(below, sizeof below, "/proc/self/fd/%d/../%d", fd, fd);
    show("open /proc/self/fd/N/../N", open(below, O_RDONLY));
    show_size("x after", "x");
    /* What the descriptor's link says: the file's path, as for any file. */
    char said[PATH_MAX + 32] = "", lp[64];
    snprintf(lp, sizeof lp, "/proc/self/fd/%d", fd);
    ssize_t sn = readlink(lp, said, sizeof said - 1);
    printf("readlink /proc/self/fd/N: %zd %s|\n", sn, sn > 0 ? said : "");
    memset(said, 0, sizeof said);
    sn = readlink(lp, said, 3);
    printf("readlink /proc/self/fd/N into 3 bytes: %zd %s|\n", sn, sn > 0 ? said : "");
    /* As a program built with _FORTIFY_SOURCE calls it, and as the C
     * library's canonicalize_file_name and realpath see it. */
    memset(said, 0, sizeof said);
    sn = __readlink_chk(lp, said, sizeof said - 1, sizeof said);
    printf("__readlink_chk /proc/self/fd/N: %zd %s|\n", sn, sn > 0 ? said : "");
    char *canon = canonicalize_file_name(lp);
    printf("canonicalize_file_name /proc/self/fd/N: %s|\n", canon ? canon : "(null)");
    free(canon);
    canon = realpath(path(argv[3]), NULL);
    printf("realpath NAME: %s|\n", canon ? canon : "(null)");
    free(canon);
    /* The file deleted and another made under its name: the descriptor's
     * link is not the new file. */
    unlink(path(argv[3]));
    memset(said, 0, sizeof said);
    sn = readlink(lp, said, sizeof said - 1);
    printf("readlink /proc/self/fd/N after the delete: %zd %s|\n", sn, sn > 0 ? said : "");
    int other = open(path(argv[3]), O_CREAT | O_WRONLY, 0644);
    show("write the new file", write(other, "other", 5));
    close(other);
    char p[64], b[64] = "";
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    again = open(p, O_RDONLY);
    long long n = again < 0 ? -1 : read(again, b, sizeof b - 1);
    if (again < 0)
        show("reopen after the delete", -1);
    else
        printf("reopen after the delete: %lld %s\n", n, b);
    close(fd);
}

static int on_walk_print(const char *p, const struct stat *sb, int type, struct FTW *f) {
    (void)sb, (void)type, (void)f;
    printf("walked %s\n", p);
    return 0;
}

/* Walks from argv[3] (the directory argument is not used), printing each path. */
static void walk_from(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: probe DIR walk START\n");
        exit(2);
    }
    show("walk", nftw(argv[3], on_walk_print, 8, FTW_PHYS));
}

/* Writes argv[4] to file argv[3], made anew, then syncs and closes it. */
static void put(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: probe DIR put NAME TEXT\n");
        exit(2);
    }
    int fd = open(path(argv[3]), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ssize_t w = fd < 0 ? -1 : write(fd, argv[4], strlen(argv[4]));
    int s = fd < 0 ? -1 : fsync(fd);
    int c = fd < 0 ? -1 : close(fd);
    printf("%s: put %zd sync %d close %d\n", argv[3], w, s, c);
}

/* Writes from a thread-specific value's destructor, which the C library runs
 * after the thread's other thread-locals (C++'s, Rust's) are gone. */
static pthread_key_t late_key;

static void late_dtor(void *arg) {
    char name[32], text[32];
    snprintf(name, sizeof name, "dt%ld", (long)arg);
    snprintf(text, sizeof text, "dtor %ld", (long)arg);
    int fd = open(path(name), O_CREAT | O_RDWR | O_TRUNC, 0644);
    ssize_t w = write(fd, text, strlen(text));
    char back[32] = "";
    ssize_t r = pread(fd, back, sizeof back - 1, 0);
    int s = fsync(fd), c = close(fd);
    printf("%s: write %zd read %zd %s sync %d close %d\n", name, w, r, back, s, c);
}

static void *late_thread_body(void *arg) {
    /* The thread's thread-locals are made (and so destroyed) before. */
    char name[32];
    snprintf(name, sizeof name, "dt%ld", (long)arg);
    int fd = open(path(name), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (write(fd, "early", 5) != 5 || pread(fd, name, 5, 0) != 5)
        printf("early write failed\n");
    close(fd);
    pthread_setspecific(late_key, arg);
    return NULL;
}

static void late_destructors(void) {
    pthread_key_create(&late_key, late_dtor);
    for (long i = 1; i <= 4; i++) {
        pthread_t t;
        pthread_create(&t, NULL, late_thread_body, (void *)i);
        pthread_join(t, NULL);
    }
}

static int race_fd = -1;
static volatile int race_stop;

static FILE *race_stream;
static DIR *race_dir;

static void *hammer(void *arg) {
    char b[64];
    (void)arg;
    while (!race_stop) {
        if (pread(race_fd, b, sizeof b, 0) < 0)
            abort();
        /* The library's lists of streams and listings, locked a moment
         * each. */
        if (fileno(race_stream) < 0)
            abort();
        DIR *d = opendir(dir);
        if (!d)
            abort();
        closedir(d);
    }
    return NULL;
}

/* Children forked while another thread reads a store descriptor, each
 * closing that descriptor: none may hang on a lock the reader held at the
 * fork. */
static void fork_race(void) {
    race_fd = open(path("f"), O_CREAT | O_RDWR, 0644);
    show("write", write(race_fd, "data", 4));
    race_stream = fopen(path("f"), "r");
    race_dir = opendir(dir);
    if (!race_stream || !race_dir)
        abort();
    fflush(stdout);
    pthread_t t;
    if (pthread_create(&t, NULL, hammer, NULL) != 0)
        abort();
    int hung = 0;
    for (int i = 0; i < 300; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(race_fd);
            fileno(race_stream);
            readdir(race_dir);
            _exit(0);
        }
        /* A child not ended in 10 s (a loaded machine ends it in far
           less) is stuck on a lock held at the fork: one is enough. */
        int st;
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (waitpid(pid, &st, WNOHANG) == 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - t0.tv_sec > 10) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                hung++;
                break;
            }
            usleep(1000);
        }
        if (hung)
            break;
    }
    race_stop = 1;
    pthread_join(t, NULL);
    printf("%-40s %d\n", "children hung", hung);
    close(race_fd);
    unlink(path("f"));
}

/* Writes, then replaces itself with the probe printing the file: the new
 * image reads what the old one wrote, as on a local file system. */
static void exec_write(char **argv) {
    int fd = open(path("e"), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    show("write e", write(fd, "data", 4));
    fflush(stdout);
    char *args[] = {argv[0], argv[1], "cat", "e", NULL};
    execv(argv[0], args);
    abort();
}

/* Markers in a directory outside the store, for the test that runs these
 * modes side by side. */
static void mark(const char *outside, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", outside, name);
    int fd = open(p, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
}

/* Waits (up to 60 s) for marker `name`; 0 when it came. */
static int await_mark(const char *outside, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", outside, name);
    for (int i = 0; i < 3000; i++) {
        if (access(p, F_OK) == 0)
            return 0;
        usleep(20000);
    }
    return -1;
}

/* Holds the store (a file of it open) from marker "held" until the marker
 * "release" appears. */
static void hold(const char *outside) {
    int fd = open(path("holder"), O_CREAT | O_WRONLY, 0644);
    show("holder open", fd);
    mark(outside, "held");
    show("holder released", await_mark(outside, "release"));
    close(fd);
}

/* Opens a file of the store, writes to it and execs itself with the
 * descriptor open; the new image uses it only after another process took
 * the store (its take-up and an open are refused: EBADF, EBUSY), and again
 * after that process let the store go (both work then). */
static void inherit_busy(char **argv, const char *outside) {
    int fd = open(path("inh"), O_CREAT | O_RDWR, 0644);
    show("write before the exec", write(fd, "one\n", 4));
    show("its descriptor", fd);
    fflush(stdout);
    char *args[] = {argv[0], argv[1], "inherit-busy-2", (char *)outside, NULL};
    execv(argv[0], args);
    abort();
}

static void inherit_busy_2(const char *outside) {
    mark(outside, "execd");
    show("another process holds the store", await_mark(outside, "held"));
    show("write while it holds it", write(3, "two\n", 4));
    show("open while it holds it", open(path("other"), O_CREAT | O_WRONLY, 0644));
    mark(outside, "tried");
    show("the other process is gone", await_mark(outside, "released"));
    show("write once it is gone", write(3, "two\n", 4));
    int fd = open(path("other"), O_CREAT | O_WRONLY, 0644);
    show("open once it is gone", fd);
    show("write the new file", fd >= 0 ? write(fd, "new\n", 4) : -1);
    if (fd >= 0)
        close(fd);
    close(3);
    show_size("stat inh", "inh");
}

/* Writes more than the store's devices have room for, then execs: the sync
 * before the exec fails, and the exec is refused with its error. */
static void exec_full(void) {
    int fd = open(path("full"), O_CREAT | O_RDWR, 0644);
    static char chunk[65536];
    memset(chunk, 0x5A, sizeof chunk);
    int failed = 0;
    /* Into a file grown first, on a file system that cannot allocate
     * ahead (its holes take no space until written back): elsewhere, writes
     * into holes and past the end take their space at once, and fail
     * there. */
    show("grow", ftruncate(fd, 32 * (off_t)sizeof chunk));
    for (int i = 0; i < 32; i++)
        if (pwrite(fd, chunk, sizeof chunk, i * (off_t)sizeof chunk) != (ssize_t)sizeof chunk)
            failed++;
    printf("%-40s %d\n", "writes failed", failed);
    fflush(stdout);
    char *args[] = {"true", NULL};
    show("exec after a failed sync", execv("/bin/true", args));
}

/* Write `ballast` (outside the store, on the devices' small file system)
 * until the file system is full; its descriptor, still open. */
static int fill_up(const char *ballast) {
    static char chunk[65536];
    memset(chunk, 0x77, sizeof chunk);
    int b = open(ballast, O_CREAT | O_WRONLY, 0644);
    long filled = 0;
    ssize_t n;
    while ((n = write(b, chunk, sizeof chunk)) > 0)
        filled += n;
    printf("%-40s %d %s\n", "ballast filled the rest", filled > 0, strerrorname_np(errno));
    return b;
}

/* On devices on a small file system (the test mounts it): a reservation
 * larger than the room fails; one that fits holds once the rest of the file
 * system is taken (`ballast`, outside the store), so that the range's writes
 * reach the devices at fsync and close. */
static void fallocate_full(const char *ballast) {
    int fd = open(path("pre"), O_CREAT | O_RDWR, 0644);
    int rc = posix_fallocate(fd, 0, 64 << 20);
    errno = rc;
    show("reserve past the room", rc ? -1 : 0);
    rc = posix_fallocate(fd, 0, 1 << 20);
    errno = rc;
    show("reserve 1 MiB", rc ? -1 : 0);
    show("size", lseek(fd, 0, SEEK_END));
    static char chunk[65536];
    memset(chunk, 0x5A, sizeof chunk);
    close(fill_up(ballast));
    int failed = 0;
    for (int i = 0; i < 16; i++)
        if (pwrite(fd, chunk, sizeof chunk, (off_t)i * (off_t)sizeof chunk) != (ssize_t)sizeof chunk)
            failed++;
    printf("%-40s %d\n", "writes failed", failed);
    show("fsync", fsync(fd));
    show("close", close(fd));
}

/* Whether the first `total` bytes of `fd` are 64 KiB runs of 'a', 'b', ...
 * 'z', 'a', ... as the writers below write them. */
static int lettered(int fd, long total) {
    static char chunk[65536];
    int same = 1;
    ssize_t n;
    for (long at = 0; at < total; at += n) {
        n = pread(fd, chunk, sizeof chunk, at);
        if (n <= 0)
            return 0;
        for (ssize_t j = 0; j < n; j++)
            same &= chunk[j] == 'a' + (int)((at + j) / 65536 % 26);
    }
    return same;
}

/* Appends of 64 KiB to a store file on a small file system until one fails
 * (at most 1024): the failure is the write's, ENOSPC, as a local file
 * system's, not the write-back's at fsync or close; what was written stays,
 * whole, and reads back in a new open after fsync and close succeed. */
static void append_full(void) {
    static char chunk[65536];
    int fd = open(path("grown"), O_CREAT | O_WRONLY | O_APPEND, 0644);
    long total = 0;
    ssize_t n = 0;
    for (int i = 0; i < 1024; i++) {
        memset(chunk, 'a' + i % 26, sizeof chunk);
        n = write(fd, chunk, sizeof chunk);
        if (n <= 0)
            break;
        total += n;
    }
    printf("%-40s %d %s\n", "a write failed", n < 0, n < 0 ? strerrorname_np(errno) : "-");
    printf("%-40s %d\n", "some were written", total > 0);
    show("fsync", fsync(fd));
    show("close", close(fd));
    fd = open(path("grown"), O_RDONLY);
    printf("%-40s %d\n", "read back as long", lseek(fd, 0, SEEK_END) == total);
    printf("%-40s %d\n", "read back the same", lettered(fd, total));
    show("close again", close(fd));
}

/* A store file on a small file system grown by ftruncate far past the
 * room, then written inside its length: once far in, then 64 KiB at a time
 * from the start until a write fails (at most 1024). The failure is the
 * write's, ENOSPC, as a local file system's write into a hole, not the
 * write-back's at fsync or close; what was written reads back in a new open,
 * the rest as zeros. */
static void hole_full(void) {
    static char chunk[65536];
    int fd = open(path("holes"), O_CREAT | O_RDWR, 0644);
    show("grow past the room", ftruncate(fd, 64 << 20));
    memset(chunk, 'Z', sizeof chunk);
    show("a write far in", pwrite(fd, chunk, sizeof chunk, 48 << 20));
    long total = 0;
    ssize_t n = 0;
    for (int i = 0; i < 1024; i++) {
        memset(chunk, 'a' + i % 26, sizeof chunk);
        n = pwrite(fd, chunk, sizeof chunk, total);
        if (n <= 0)
            break;
        total += n;
    }
    printf("%-40s %d %s\n", "a write failed", n < 0, n < 0 ? strerrorname_np(errno) : "-");
    printf("%-40s %d\n", "some were written", total > 0);
    show("fsync", fsync(fd));
    show("close", close(fd));
    fd = open(path("holes"), O_RDONLY);
    show("size", lseek(fd, 0, SEEK_END));
    int same = lettered(fd, total);
    n = pread(fd, chunk, sizeof chunk, 48 << 20);
    for (ssize_t j = 0; j < n; j++)
        same &= chunk[j] == 'Z';
    n = pread(fd, chunk, sizeof chunk, total);
    for (ssize_t j = 0; j < n; j++)
        same &= chunk[j] == 0;
    printf("%-40s %d\n", "read back the same", same);
    show("close again", close(fd));
}

/* Two store files on a small file system: the first appended to and left
 * open (it keeps space reserved past its end for its next appends), the
 * second appended to until a write fails. The failure comes only once the
 * first file's reservation went to the second, as a local file system's
 * preallocation yields: closing the first then frees no more room. */
static void yield_full(void) {
    static char chunk[65536];
    memset(chunk, 'y', sizeof chunk);
    int a = open(path("first"), O_CREAT | O_WRONLY | O_APPEND, 0644);
    int failed = 0;
    for (int i = 0; i < 24; i++)
        failed += write(a, chunk, sizeof chunk) != (ssize_t)sizeof chunk;
    printf("%-40s %d\n", "writes of the first failed", failed);
    int b = open(path("second"), O_CREAT | O_WRONLY | O_APPEND, 0644);
    long total = 0;
    ssize_t n;
    while ((n = write(b, chunk, 4096)) > 0)
        total += n;
    printf("%-40s %d %s\n", "the second took the rest", total > 0, strerrorname_np(errno));
    show("close the first", close(a));
    printf("%-40s %d\n", "room after the first closed", write(b, chunk, 4096) > 0);
    show("fsync", fsync(b));
    show("close", close(b));
}

/* Space reserved past the end with FALLOC_FL_KEEP_SIZE outlives the last
 * close, as on a local file system: after a new open and the rest of the
 * file system taken (`ballast`), writes into the range succeed and reach
 * the devices. (The last close cut each backing file to its size, which gave
 * the range back: the writes failed ENOSPC.) */
static void kept_full(const char *ballast) {
    static char chunk[65536];
    memset(chunk, 0x4B, sizeof chunk);
    int fd = open(path("kept"), O_CREAT | O_RDWR, 0644);
    show("write", write(fd, chunk, 4096));
    show("reserve past the end", fallocate(fd, FALLOC_FL_KEEP_SIZE, 4096, 1 << 20));
    show("close", close(fd));
    fd = open(path("kept"), O_RDWR);
    close(fill_up(ballast));
    int failed = 0;
    for (int i = 0; i < 16; i++)
        if (pwrite(fd, chunk, sizeof chunk, 4096 + (off_t)i * (off_t)sizeof chunk) != (ssize_t)sizeof chunk)
            failed++;
    printf("%-40s %d\n", "writes into the range failed", failed);
    show("fsync", fsync(fd));
    show("close again", close(fd));
}

/* A sparse store file cut, on a full file system (`ballast` takes the
 * rest), to a length inside a hole and not on a page's edge: the cut
 * succeeds, as the kernel's, and so do the fsync and close after it. (The
 * cut loaded the page the new end falls in, cleared its tail and left it
 * dirty: its write-back needed space the hole never had.) */
static void cut_hole_full(const char *ballast) {
    int fd = open(path("sparse"), O_CREAT | O_RDWR, 0644);
    show("grow past the room", ftruncate(fd, 50 << 20));
    close(fill_up(ballast));
    show("cut inside a hole", ftruncate(fd, 20000001));
    show("size", lseek(fd, 0, SEEK_END));
    show("fsync", fsync(fd));
    show("close", close(fd));
}

/* A store file cut inside a block, then written at its new end with room on
 * the file system (`ballast` takes the rest) for that write's pages alone,
 * the rest then taken: the write's growth clears the block past the old end,
 * and with it gave back the pages the write had reserved, whose write-back
 * then failed ENOSPC at fsync. Every step succeeds, and the write reads
 * back in a new open. */
static void regrow_full(const char *ballast) {
    static char chunk[65536];
    memset(chunk, 0x44, sizeof chunk);
    int fd = open(path("regrow"), O_CREAT | O_RDWR, 0644);
    int failed = 0;
    for (int i = 0; i < 16; i++)
        failed += write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk;
    printf("%-40s %d\n", "writes failed", failed);
    show("fsync", fsync(fd));
    show("cut inside a block", ftruncate(fd, 520 << 10));
    int b = fill_up(ballast);
    off_t full = lseek(b, 0, SEEK_END);
    show("room for three pages", ftruncate(b, full - 3 * 4096));
    memset(chunk, 0x55, 5000);
    show("a write at the end", pwrite(fd, chunk, 5000, 520 << 10));
    lseek(b, 0, SEEK_END);
    while (write(b, chunk, 4096) > 0)
        ;
    show("fsync after the rest was taken", fsync(fd));
    close(b);
    show("close", close(fd));
    fd = open(path("regrow"), O_RDONLY);
    memset(chunk, 0, 5000);
    int same = pread(fd, chunk, 5000, 520 << 10) == 5000;
    for (int j = 0; j < 5000; j++)
        same &= chunk[j] == 0x55;
    printf("%-40s %d\n", "read back the same", same);
    show("close again", close(fd));
}

/* The wide calls on the standard streams with 1 and 0 copies of a store
 * file's descriptor (as a shell's redirection leaves them), the fortified
 * fgetws, and a wide scan. Results go to stderr, whose stream stays narrow;
 * the files' bytes are read back at the end. */
extern int __wprintf_chk(int flag, const wchar_t *fmt, ...);
extern wchar_t *__fgetws_chk(wchar_t *buf, size_t size, int n, FILE *f);

/*
 * The longest name of the file system of file `name` (made if missing), as
 * each call that tells it says: by path and by descriptor.
 */
static void name_limits(const char *name) {
    int fd = open(path(name), O_RDWR | O_CREAT, 0644);
    struct statvfs sv;
    struct statfs sf;
    int rc = statvfs(path(name), &sv);
    printf("statvfs %d %lu\n", rc, (unsigned long)sv.f_namemax);
    rc = statfs(path(name), &sf);
    printf("statfs %d %ld\n", rc, (long)sf.f_namelen);
    printf("pathconf %ld\n", pathconf(path(name), _PC_NAME_MAX));
    rc = fstatvfs(fd, &sv);
    printf("fstatvfs %d %lu\n", rc, (unsigned long)sv.f_namemax);
    rc = fstatfs(fd, &sf);
    printf("fstatfs %d %ld\n", rc, (long)sf.f_namelen);
    printf("fpathconf %ld\n", fpathconf(fd, _PC_NAME_MAX));
    printf("pathconf of the directory %ld\n", pathconf(dir, _PC_NAME_MAX));
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    rc = fstatvfs(dfd, &sv);
    printf("fstatvfs of the directory %d %lu\n", rc, (unsigned long)sv.f_namemax);
    close(dfd);
    close(fd);
}

/*
 * Second names by descriptor (AT_EMPTY_PATH) where one end is the store's:
 * `outside` is a file outside it, `name` a file of it.
 */
static void link_fds(const char *outside, const char *name) {
    int out = open(outside, O_RDWR | O_CREAT, 0644);
    int in = open(path(name), O_RDWR | O_CREAT, 0644);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    char other[4200];
    snprintf(other, sizeof other, "%s-2", outside);
    show("outside file to a new store name", linkat(out, "", AT_FDCWD, path("new"), AT_EMPTY_PATH));
    show("outside file to a store name in use", linkat(out, "", AT_FDCWD, path(name), AT_EMPTY_PATH));
    show("the store's directory to outside", linkat(dfd, "", AT_FDCWD, other, AT_EMPTY_PATH));
    show("store file to outside", linkat(in, "", AT_FDCWD, other, AT_EMPTY_PATH));
    unlink(path(name));
    show("deleted store file to outside", linkat(in, "", AT_FDCWD, other, AT_EMPTY_PATH));
    close(in);
    close(out);
    close(dfd);
}

static void wide_std(void) {
    setlocale(LC_CTYPE, "C.UTF-8");
    int o = open(path("wide-out"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    int keep = dup(1);
    dup2(o, 1);
    wint_t a = putwchar(L'\u00e9');
    int b = wprintf(L"|%d|%ls|\n", 42, L"\u20ac");
    int c = __wprintf_chk(1, L"%5d\n", 7);
    int d = fflush(stdout);
    dup2(keep, 1);
    close(keep);
    fprintf(stderr, "putwchar %d wprintf %d __wprintf_chk %d fflush %d\n", a == L'\u00e9', b, c,
            d);
    char got[64] = {0};
    ssize_t n = pread(o, got, sizeof got - 1, 0);
    fprintf(stderr, "written %zd: %s", n, got);
    close(o);
    int i = open(path("wide-in"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (write(i, "\xc3\xa9x\n12 ab\n", 10) != 10)
        fprintf(stderr, "write wide-in failed\n");
    lseek(i, 0, SEEK_SET);
    dup2(i, 0);
    wint_t g1 = getwchar();
    wint_t g2 = getwchar();
    fprintf(stderr, "getwchar %u %u\n", (unsigned)g1, (unsigned)g2);
    close(i);
    FILE *f = fopen(path("wide-in"), "r");
    wchar_t line[16];
    volatile size_t room = 16; /* unknown to the compiler: the fortified call */
    wchar_t *r = f ? __fgetws_chk(line, room, 16, f) : NULL;
    fprintf(stderr, "__fgetws_chk %s %zu\n", r ? "line" : "null", r ? wcslen(line) : 0);
    int num = 0;
    wchar_t word[8] = {0};
    errno = 0;
    int scanned = f ? fwscanf(f, L"%d %ls", &num, word) : -2;
    fprintf(stderr, "fwscanf %d errno %s %d\n", scanned, scanned < 0 ? strerror(errno) : "-",
            num);
    if (f)
        fclose(f);
}

/* A file of the store cut on a full file system (`ballast`, outside the
 * store, takes the rest of it): the cut succeeds, as the kernel's, and
 * gives its space back, which a write outside then takes. */
static void cut_full(const char *ballast) {
    static char chunk[65536];
    memset(chunk, 0x33, sizeof chunk);
    int fd = open(path("cut"), O_CREAT | O_RDWR, 0644);
    for (int i = 0; i < 16; i++)
        if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk)
            show("write", -1);
    show("fsync", fsync(fd));
    int b = fill_up(ballast);
    show("cut on a full file system", ftruncate(fd, 4096));
    show("size after the cut", lseek(fd, 0, SEEK_END));
    show("fsync after the cut", fsync(fd));
    printf("%-40s %d\n", "the space came back", write(b, chunk, sizeof chunk) > 0);
    close(b);
    show("close", close(fd));
}

extern char **environ;

/* As exec_write, through execl, execlp or execle (`how`), with a list long
 * enough that some of it travels on the stack. */
static void execl_write(char **argv, const char *how) {
    const char *name = how[5] == 'p' ? "lp" : how[5] == 'e' ? "le" : "l";
    int fd = open(path(name), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    show("write", write(fd, how, strlen(how)));
    fflush(stdout);
    if (how[5] == 'p')
        execlp(argv[0], argv[0], argv[1], "cat", name, name, name, name, name, name, name,
               (char *)NULL);
    else if (how[5] == 'e')
        execle(argv[0], argv[0], argv[1], "cat", name, name, name, name, name, name, name,
               (char *)NULL, environ);
    else
        execl(argv[0], argv[0], argv[1], "cat", name, name, name, name, name, name, name,
              (char *)NULL);
    abort();
}

/* Files written and then left without a close or an fsync but by a
 * descriptor replaced by dup2, by sync() and by syncfs(), before _exit. */
static void implicit_syncs(void) {
    int fd = open(path("k"), O_CREAT | O_RDWR, 0644);
    show("write k", write(fd, "first", 5));
    show("close k", close(fd));
    fd = open(path("k"), O_RDWR | O_TRUNC);
    show("write k again", write(fd, "dup2", 4));
    int null = open("/dev/null", O_RDONLY);
    show("dup2 over k", dup2(null, fd) == fd ? 0 : -1);
    int s = open(path("s"), O_CREAT | O_RDWR, 0644);
    show("write s", write(s, "synced", 6));
    sync();
    int y = open(path("y"), O_CREAT | O_RDWR, 0644);
    show("write y", write(y, "fs", 2));
    show("syncfs y", syncfs(y));
    fflush(stdout);
    /* As in `reopen`: an end no library sees. */
    syscall(SYS_exit_group, 0);
}

/* The stat entry points of C libraries before 2.33, as programs built
 * against them call them (looked up by name: they cannot be linked now). */
static void old_stat(void) {
    typedef int (*fx_t)(int, int, struct stat *);
    typedef int (*x_t)(int, const char *, struct stat *);
    fx_t fx = (fx_t)dlsym(RTLD_DEFAULT, "__fxstat64");
    x_t x = (x_t)dlsym(RTLD_DEFAULT, "__xstat64");
    if (fx == NULL || x == NULL) {
        printf("no old stat functions\n");
        return;
    }
    int fd = open(path("o"), O_CREAT | O_RDWR, 0644);
    static char b[10000];
    memset(b, 'o', sizeof b);
    show("write o", write(fd, b, sizeof b));
    struct stat st;
    int rc = fx(1, fd, &st);
    printf("%-40s %d %d %lld\n", "__fxstat64", rc, S_ISREG(st.st_mode), (long long)st.st_size);
    rc = x(1, path("o"), &st);
    printf("%-40s %d %d %lld\n", "__xstat64", rc, S_ISREG(st.st_mode), (long long)st.st_size);
    close(fd);
}

/* A child made by vfork closes a store descriptor and execs, as subprocess
 * modules do: the parent's descriptor and data are untouched. */
static void vfork_exec(void) {
    int fd = open(path("v"), O_CREAT | O_RDWR, 0644);
    show("write v", write(fd, "parent", 6));
    fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
        close(fd);
        char *args[] = {"/bin/true", NULL};
        execv(args[0], args);
        _exit(127);
    }
    int st = 0;
    show("waitpid", waitpid(pid, &st, 0) == pid ? 0 : -1);
    show("child exit status", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    char b[16] = "";
    show("pread v in the parent", pread(fd, b, sizeof b - 1, 0));
    printf("%-40s %s\n", "  bytes", b);
    show("close v", close(fd));
}

static volatile int tail_done;

static void *appender(void *arg) {
    int fd = *(int *)arg;
    static char rec[1 << 20];
    memset(rec, 'x', sizeof rec);
    for (int i = 0; i < 64; i++)
        if (write(fd, rec, sizeof rec) != (ssize_t)sizeof rec)
            abort();
    tail_done = 1;
    return NULL;
}

/* One thread appends records of 'x' while another reads the file's last
 * bytes up to the length fstat gives: a length is shown only with the bytes
 * before it in, so no read finds a zero. */
static void tail_race(void) {
    int wfd = open(path("t"), O_CREAT | O_WRONLY | O_APPEND, 0644);
    int rfd = open(path("t"), O_RDONLY);
    if (wfd < 0 || rfd < 0)
        abort();
    pthread_t t;
    if (pthread_create(&t, NULL, appender, &wfd) != 0)
        abort();
    static char b[1 << 16];
    long reads = 0, zeros = 0;
    while (!tail_done) {
        struct stat st;
        if (fstat(rfd, &st) != 0)
            abort();
        if (st.st_size < (off_t)sizeof b)
            continue;
        ssize_t n = pread(rfd, b, sizeof b, st.st_size - (off_t)sizeof b);
        if (n != (ssize_t)sizeof b)
            abort();
        reads++;
        if (memchr(b, 0, sizeof b) != NULL)
            zeros++;
    }
    pthread_join(t, NULL);
    printf("%-40s %ld\n", "tail reads", reads);
    printf("%-40s %ld\n", "tail reads with zeros", zeros);
    close(wfd);
    close(rfd);
}

static volatile int dup_done;

static void *dup_writer(void *arg) {
    int fd = *(int *)arg;
    long bad = 0;
    char b[512];
    memset(b, 'w', sizeof b);
    while (!dup_done)
        if (pwrite(fd, b, sizeof b, 0) != (ssize_t)sizeof b)
            bad++;
    printf("%-40s %ld\n", "dup2 race: failed writes", bad);
    return NULL;
}

/* One thread writes to a descriptor while another makes it, again and
 * again, a copy of one file of the store or of another's: each write goes
 * to one file or the other, as the kernel's would, and none fails. */
static void dup2_race(void) {
    int a = open(path("da"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    int b = open(path("db"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    int x = dup(a);
    if (a < 0 || b < 0 || x < 0)
        abort();
    pthread_t t;
    if (pthread_create(&t, NULL, dup_writer, &x) != 0)
        abort();
    long failed = 0;
    for (int i = 0; i < 100000; i++)
        if (dup2(i % 2 ? a : b, x) != x)
            failed++;
    dup_done = 1;
    pthread_join(t, NULL);
    printf("%-40s %ld\n", "dup2 race: failed dup2", failed);
    close(x);
    close(a);
    close(b);
}

static volatile int replace_done;

static void *replacer(void *arg) {
    (void)arg;
    /* Paths of its own: `path` keeps two, for one thread. */
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/rt", dir);
    snprintf(to, sizeof to, "%s/ra", dir);
    static char b[1000];
    memset(b, 'y', sizeof b);
    while (!replace_done) {
        int fd = open(from, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || write(fd, b, sizeof b) != (ssize_t)sizeof b || close(fd) != 0 ||
            rename(from, to) != 0)
            abort();
    }
    return NULL;
}

/* Calls by name, and the close of a descriptor opened read-only, while
 * another thread again and again replaces the file by a rename: each is
 * done on the old file or the new one, as the kernel's would be, and none
 * fails for finding the old file replaced under it. */
static void replace_race(void) {
    char ra[4200];
    snprintf(ra, sizeof ra, "%s/ra", dir);
    int fd = open(ra, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || close(fd) != 0)
        abort();
    pthread_t t;
    if (pthread_create(&t, NULL, replacer, NULL) != 0)
        abort();
    long truncates = 0, closes = 0;
    for (int i = 0; i < 3000; i++) {
        struct stat st;
        if (truncate(ra, 500) != 0)
            truncates++;
        if (stat(ra, &st) != 0)
            abort();
        fd = open(ra, O_RDONLY);
        if (fd < 0)
            abort();
        /* The rename's moment, between the open and the close's sync. */
        sched_yield();
        if (close(fd) != 0)
            closes++;
    }
    replace_done = 1;
    pthread_join(t, NULL);
    printf("%-40s %ld\n", "replace race: failed truncates", truncates);
    printf("%-40s %ld\n", "replace race: failed closes", closes);
}

/* Creates files until the process runs out of descriptors (a limit of 64):
 * the create that fails says EMFILE, as the kernel's would, whatever the
 * store's own bookkeeping met on the way. */
static void create_until_emfile(void) {
    struct rlimit rl = {64, 64};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        abort();
    int opened = 0, err = 0;
    for (int i = 0; i < 200; i++) {
        char name[32];
        snprintf(name, sizeof name, "em%d", i);
        int fd = open(path(name), O_CREAT | O_RDWR, 0644);
        if (fd < 0) {
            err = errno;
            break;
        }
        opened++;
    }
    printf("%-40s %s\n", "create past the descriptors", err ? strerrorname_np(err) : "none");
    printf("%-40s %s\n", "opened before", opened > 8 ? "some" : "few");
}

static int shrink_fd;
static volatile int shrink_done;

static void *shrinker(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        if (ftruncate(shrink_fd, 0) != 0 || ftruncate(shrink_fd, 65536) != 0)
            abort();
    }
    shrink_done = 1;
    return NULL;
}

/* Writes inside a file while another thread cuts it and grows it again: a
 * write the cut reaches grows the file, as the kernel's does, and none
 * fails. Then a path relative to a working directory longer than 512 bytes
 * leaves errno as it was. */
static void shrink_race(void) {
    shrink_fd = open(path("sr"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (shrink_fd < 0 || ftruncate(shrink_fd, 65536) != 0)
        abort();
    pthread_t t;
    if (pthread_create(&t, NULL, shrinker, NULL) != 0)
        abort();
    static char b[4096];
    memset(b, 'w', sizeof b);
    long writes = 0, failed = 0;
    while (!shrink_done) {
        if (pwrite(shrink_fd, b, sizeof b, (off_t)(writes % 16) * 4096) != (ssize_t)sizeof b)
            failed++;
        writes++;
    }
    pthread_join(t, NULL);
    printf("%-40s %d\n", "writes made", writes > 0);
    printf("%-40s %ld\n", "writes failed", failed);
    close(shrink_fd);

    char deep[8192];
    snprintf(deep, sizeof deep, "%s/../outside", dir);
    size_t len = strlen(deep);
    while (len < 700) {
        len += (size_t)snprintf(deep + len, sizeof deep - len,
                                "/a-directory-with-a-long-name-to-make-the-path-long");
        mkdir(deep, 0755);
    }
    if (chdir(deep) != 0)
        abort();
    int fd = open("here", O_CREAT | O_WRONLY, 0644);
    close(fd);
    struct stat st;
    errno = 0;
    int rc = stat("here", &st);
    printf("%-40s %d %s\n", "stat in a long working directory", rc, strerrorname_np(errno));
}

/* Walks from the directory's parent left by longjmp, one after another:
 * with the library each keeps its slot, and the walk after the last one
 * fails when none is left. */
static void walk_slots(void) {
    char up[4096];
    snprintf(up, sizeof up, "%s", dir);
    char *cut = strrchr(up, '/');
    if (!cut || cut == up)
        return;
    *cut = 0;
    snprintf(above_dir, sizeof above_dir, "%s", dir);
    int fd = open(path("w1"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    show("write a file to walk to", write(fd, "walk", 4));
    close(fd);
    int left = 0;
    for (int i = 0; i < 16; i++) {
        inner_entries = 0;
        if (setjmp(jump_back) == 0)
            nftw(up, inner_jumps_out, 8, FTW_PHYS);
        left += inner_entries;
    }
    show("walks left by longjmp", left);
    walk_n = 0;
    show("a walk after them", nftw(up, on_walk_above, 8, FTW_PHYS));
    show("  entries under the directory", walk_n);
    unlink(path("w1"));
}

/* The C library's own calls on names: `remove` calls `unlink` (then
 * `rmdir`) inside the C library, and the `mkstemp` family opens its file
 * there too. A temporary file made, written, synced and renamed into place,
 * then files removed; the made names masked (their six letters vary). */
static int made_ok(const char *t, const char *prefix, const char *suffix) {
    size_t n = strlen(t), p = strlen(prefix), s = strlen(suffix);
    if (n != p + 6 + s || strncmp(t, prefix, p) != 0 || strcmp(t + p + 6, suffix) != 0)
        return 0;
    if (strncmp(t + p, "XXXXXX", 6) == 0)
        return 0;
    return access(t, F_OK) == 0;
}

static void temp_files(void) {
    char prefix[4200], t[4300];
    snprintf(prefix, sizeof prefix, "%s", path("tmp."));
    snprintf(t, sizeof t, "%sXXXXXX", prefix);
    int fd = mkstemp(t);
    printf("mkstemp %d made %d\n", fd >= 0, fd >= 0 && made_ok(t, prefix, ""));
    ssize_t w = fd < 0 ? -1 : write(fd, "temp", 4);
    int s = fd < 0 ? -1 : fsync(fd), c = fd < 0 ? -1 : close(fd);
    printf("write %zd sync %d close %d\n", w, s, c);
    printf("rename %d\n", rename(t, path("final")));
    char back[16] = "";
    fd = open(path("final"), O_RDONLY);
    ssize_t r = fd < 0 ? -1 : read(fd, back, sizeof back - 1);
    if (fd >= 0)
        close(fd);
    printf("final %zd %s\n", r, back);
    snprintf(t, sizeof t, "%sXXXXXX.db", prefix);
    fd = mkostemps(t, 3, O_CLOEXEC);
    int fl = fd < 0 ? -1 : fcntl(fd, F_GETFD);
    printf("mkostemps %d made %d cloexec %d\n", fd >= 0, fd >= 0 && made_ok(t, prefix, ".db"),
           fl >= 0 && (fl & FD_CLOEXEC) != 0);
    if (fd >= 0)
        close(fd);
    errno = 0;
    int rm = remove(t);
    int e = rm ? errno : 0;
    errno = 0;
    int a = access(t, F_OK);
    printf("remove made %d %s access %d %s\n", rm, strerror(e), a, strerror(a ? errno : 0));
    errno = 0;
    rm = remove(path("final"));
    e = errno;
    errno = 0;
    fd = open(path("final"), O_RDONLY);
    printf("remove final %d %s open %d %s\n", rm, strerror(rm ? e : 0), fd >= 0,
           strerror(fd >= 0 ? 0 : errno));
    errno = 0;
    rm = remove(path("never"));
    printf("remove never %d %s\n", rm, strerror(errno));
    snprintf(t, sizeof t, "%sXXXXX", prefix);
    errno = 0;
    fd = mkstemp(t);
    printf("mkstemp short %d %s\n", fd, strerror(errno));
}

static int open_count(int from, int below) {
    int n = 0;
    for (int fd = from; fd < below; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            n++;
    return n;
}

/* Descriptors closed wholesale (close_range, closefrom) and replaced (dup2)
 * while a store file is written: the store's own stay open, so what was
 * written reaches the devices. */
static void close_all(void) {
    /* What the process inherited goes first: besides the file's
     * descriptor there are then only the store's (which it keeps above the
     * numbers programs count on). */
    closefrom(3);
    int top = (int)sysconf(_SC_OPEN_MAX);
    int a = open(path("ca"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    show("write first", write(a, "first", 5));
    int ours = open_count(3, top) - 1;
    printf("%-40s %d\n", "store descriptors besides the file", ours > 0);
    show("close_range above the file", close_range((unsigned)a + 1, ~0u, 0));
    printf("%-40s %d\n", "store descriptors left open", open_count(3, top) - 1 == ours);
    int some = 3;
    while (some < top && (some == a || fcntl(some, F_GETFD) < 0))
        some++;
    show("dup2 onto one of the store's", dup2(0, some));
    show("dup3 onto one of the store's", dup3(0, some, O_CLOEXEC));
    show("close one of the store's", close(some));
    show("pwrite second", pwrite(a, "second", 6, 5));
    show("fsync", fsync(a));
    show("close_range, unknown flag", close_range((unsigned)a, (unsigned)a, 1 << 30));
    show("close_range, first past last", close_range((unsigned)a, (unsigned)a - 1, 0));
    show("close_range, unshare", close_range((unsigned)a, (unsigned)a, CLOSE_RANGE_UNSHARE));
    show("pwrite after the refused ones", pwrite(a, "+", 1, 11));
    show("close_range, cloexec", close_range(3, ~0u, CLOSE_RANGE_CLOEXEC));
    show("pwrite third", pwrite(a, "third", 5, 12));
    /* Its last close is closefrom's: the sync there needs the store's. */
    closefrom(3);
    show("fcntl of the file after closefrom", fcntl(a, F_GETFD));
    printf("%-40s %d\n", "store descriptors after closefrom", open_count(3, top) > 0);
    char buf[32] = "";
    int b = open(path("ca"), O_RDONLY);
    show("pread", pread(b, buf, sizeof buf - 1, 0));
    printf("%-40s %s\n", "the file holds", buf);
}

/* A child made by fork (or by the raw system call, `raw`) outlives its
 * parent: it must not keep the roots locked. */
static void fork_outlive(int raw) {
    /* What the process inherited goes first: below the file's descriptor
     * there are then only the store's. */
    closefrom(3);
    int fd = open(path("fo"), O_CREAT | O_RDWR, 0644);
    show("write", write(fd, "parent", 6));
    fflush(stdout);
    pid_t pid = raw ? (pid_t)syscall(SYS_fork) : fork();
    if (pid == 0) {
        /* A raw child is told apart at its first call into the library. */
        int o = open(path("fo"), O_RDONLY);
        /* The parent's store is not the child's: its numbers (the open
         * ones past the file's) are free to take over. */
        int top = (int)sysconf(_SC_OPEN_MAX), n = fd + 1;
        while (n < top && fcntl(n, F_GETFD) < 0)
            n++;
        int r = dup2(0, n);
        printf("%-40s %d\n", "child: dup2 onto a store number", r == n);
        printf("%-40s %d\n", "child: close of it", close(n));
        int dev = open("/dev/null", O_WRONLY);
        dup2(dev, 1);
        dup2(dev, 2);
        (void)o;
        sleep(4);
        _exit(0);
    }
    show("forked", pid > 0);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: probe DIR [refused]\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2 && strcmp(argv[2], "refused") == 0)
        refused();
    else if (argc > 2 && strcmp(argv[2], "fork") == 0)
        after_fork();
    else if (argc > 2 && strcmp(argv[2], "fork-race") == 0)
        fork_race();
    else if (argc > 2 && strcmp(argv[2], "reopen") == 0)
        reopen();
    else if (argc > 2 && strcmp(argv[2], "close-race") == 0)
        close_race(argc > 3 ? argv[3] : "cr");
    else if (argc > 2 && strcmp(argv[2], "exit-writes") == 0)
        exit_writes();
    else if (argc > 2 && strcmp(argv[2], "exec-write") == 0)
        exec_write(argv);
    else if (argc > 2 && strcmp(argv[2], "close-all") == 0)
        close_all();
    else if (argc > 2 && strcmp(argv[2], "fork-outlive") == 0)
        fork_outlive(argc > 3 && strcmp(argv[3], "raw") == 0);
    else if (argc > 2 && strcmp(argv[2], "exec-full") == 0)
        exec_full();
    else if (argc > 3 && strcmp(argv[2], "fallocate-full") == 0)
        fallocate_full(argv[3]);
    else if (argc > 3 && strcmp(argv[2], "cut-full") == 0)
        cut_full(argv[3]);
    else if (argc > 3 && strcmp(argv[2], "regrow-full") == 0)
        regrow_full(argv[3]);
    else if (argc > 3 && strcmp(argv[2], "cut-hole-full") == 0)
        cut_hole_full(argv[3]);
    else if (argc > 3 && strcmp(argv[2], "kept-full") == 0)
        kept_full(argv[3]);
    else if (argc > 2 && strcmp(argv[2], "yield-full") == 0)
        yield_full();
    else if (argc > 2 && strcmp(argv[2], "append-full") == 0)
        append_full();
    else if (argc > 2 && strcmp(argv[2], "hole-full") == 0)
        hole_full();
    else if (argc > 3 && strcmp(argv[2], "hold") == 0)
        hold(argv[3]);
    else if (argc > 3 && strcmp(argv[2], "inherit-busy") == 0)
        inherit_busy(argv, argv[3]);
    else if (argc > 3 && strcmp(argv[2], "inherit-busy-2") == 0)
        inherit_busy_2(argv[3]);
    else if (argc > 2 && strncmp(argv[2], "execl", 5) == 0)
        execl_write(argv, argv[2]);
    else if (argc > 2 && strcmp(argv[2], "implicit-syncs") == 0)
        implicit_syncs();
    else if (argc > 3 && strcmp(argv[2], "underscore-exit") == 0)
        underscore_exit(argv[3]);
    else if (argc > 2 && strcmp(argv[2], "cancel") == 0)
        cancel_writers();
    else if (argc > 2 && strcmp(argv[2], "vfork-exec") == 0)
        vfork_exec();
    else if (argc > 2 && strcmp(argv[2], "old-stat") == 0)
        old_stat();
    else if (argc > 2 && strcmp(argv[2], "shrink-race") == 0)
        shrink_race();
    else if (argc > 2 && strcmp(argv[2], "tail-race") == 0)
        tail_race();
    else if (argc > 2 && strcmp(argv[2], "dup2-race") == 0)
        dup2_race();
    else if (argc > 2 && strcmp(argv[2], "replace-race") == 0)
        replace_race();
    else if (argc > 2 && strcmp(argv[2], "emfile") == 0)
        create_until_emfile();
    else if (argc > 2 && strcmp(argv[2], "main-ends-first") == 0)
        main_ends_first(1);
    else if (argc > 2 && strcmp(argv[2], "main-ends-untouched") == 0)
        main_ends_first(0);
    else if (argc > 2 && strcmp(argv[2], "late-dtor") == 0)
        late_destructors();
    else if (argc > 2 && strcmp(argv[2], "walk-slots") == 0)
        walk_slots();
    else if (argc > 2 && strcmp(argv[2], "cat") == 0)
        cat(argc, argv);
    else if (argc > 2 && strcmp(argv[2], "put") == 0)
        put(argc, argv);
    else if (argc > 2 && strcmp(argv[2], "stat") == 0)
        stat_names(argc, argv);
    else if (argc > 2 && strcmp(argv[2], "ls") == 0)
        list("ls");
    else if (argc > 2 && strcmp(argv[2], "link") == 0)
        link_names(argc, argv);
    else if (argc > 2 && strcmp(argv[2], "dot-dots") == 0)
        dot_dots();
    else if (argc > 2 && strcmp(argv[2], "reopen-fd") == 0)
        reopen_by_fd(argc, argv);
    else if (argc > 2 && strcmp(argv[2], "temp") == 0)
        temp_files();
    else if (argc > 2 && strcmp(argv[2], "walk") == 0)
        walk_from(argc, argv);
    else if (argc > 2 && strcmp(argv[2], "largest") == 0)
        largest_file();
    else if (argc > 2 && strcmp(argv[2], "at-largest") == 0)
        at_largest();
    else if (argc > 4 && strcmp(argv[2], "link-fds") == 0)
        link_fds(argv[3], argv[4]);
    else if (argc > 3 && strcmp(argv[2], "names") == 0)
        name_limits(argv[3]);
    else if (argc > 2 && strcmp(argv[2], "wide-std") == 0)
        wide_std();
    else
        common();
    return 0;
}
