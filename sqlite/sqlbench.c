/* Drivers for SQLite on setcache (through the preload library) and on the
 * kernel: prepared statements, no interpreter between the loop and SQLite.
 *
 *   sqlbench load   DB ROWS            a table t(k INTEGER PRIMARY KEY, tag TEXT,
 *                                      v TEXT) of ROWS rows (about 1 KiB each),
 *                                      and an index on tag
 *   sqlbench lookup DB SECONDS DIST    point lookups by k, DIST uniform or zipf
 *                                      (theta 0.99), SQLite's cache 2 MiB;
 *                                      prints "lookups N per_s R"
 *   sqlbench commit DB SECONDS MODE    one-row updates, one per transaction,
 *                                      synchronous=FULL, journal_mode=MODE;
 *                                      prints "commits N per_s R"
 *   sqlbench crash-write DB LOG        commits numbered transactions (journal
 *                                      mode from $SQLBENCH_JOURNAL, default
 *                                      DELETE), appending each number to LOG
 *                                      (a plain file, fsynced) once COMMIT returns
 *   sqlbench crash-check DB LOG        integrity_check is ok, and every number
 *                                      in LOG is in the database
 *   sqlbench wal DB                    tries journal_mode=WAL and a write; prints
 *                                      what SQLite said
 *
 * With SQLBENCH_WARM set, lookup and commit read the whole table and index
 * once before the timed part.
 */
#define _GNU_SOURCE
#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

static void die(sqlite3 *db, const char *what) {
    fprintf(stderr, "sqlbench: %s: %s\n", what, db ? sqlite3_errmsg(db) : "?");
    exit(1);
}

static void exec(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
        fprintf(stderr, "sqlbench: %s: %s\n", sql, err ? err : "?");
        exit(1);
    }
}

static sqlite3 *open_db(const char *path, int flags) {
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK)
        die(db, "open");
    sqlite3_busy_timeout(db, 10000);
    return db;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void fill(char *s, int n) {
    for (int i = 0; i < n; i++)
        s[i] = 'a' + next() % 26;
    s[n] = 0;
}

static void load(const char *path, long rows) {
    sqlite3 *db = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    exec(db, "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;");
    exec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, tag TEXT, v TEXT)");
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(db, "INSERT INTO t(k, tag, v) VALUES(?, ?, ?)", -1, &ins, NULL))
        die(db, "prepare");
    char tag[17], v[1001];
    exec(db, "BEGIN");
    for (long k = 1; k <= rows; k++) {
        fill(tag, 16);
        fill(v, 1000);
        sqlite3_bind_int64(ins, 1, k);
        sqlite3_bind_text(ins, 2, tag, 16, SQLITE_STATIC);
        sqlite3_bind_text(ins, 3, v, 1000, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE)
            die(db, "insert");
        sqlite3_reset(ins);
        if (k % 20000 == 0) {
            exec(db, "COMMIT; BEGIN");
        }
    }
    exec(db, "COMMIT");
    sqlite3_finalize(ins);
    exec(db, "CREATE INDEX it ON t(tag)");
    exec(db, "PRAGMA journal_mode=DELETE");
    if (sqlite3_close(db) != SQLITE_OK)
        die(db, "close");
    printf("loaded %ld rows\n", rows);
}

static long max_key(sqlite3 *db) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT max(k) FROM t", -1, &st, NULL))
        die(db, "prepare");
    if (sqlite3_step(st) != SQLITE_ROW)
        die(db, "max");
    long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

/* Zipf over 1..n with theta 0.99, after Gray et al. (the YCSB generator),
 * the key scattered by a multiplicative hash so hot keys are not adjacent. */
struct zipf {
    long n;
    double theta, alpha, zetan, eta;
};

static void zipf_init(struct zipf *z, long n, double theta) {
    double zeta2 = 1 + pow(0.5, theta), zetan = 0;
    for (long i = 1; i <= n; i++)
        zetan += 1 / pow((double)i, theta);
    z->n = n;
    z->theta = theta;
    z->alpha = 1 / (1 - theta);
    z->zetan = zetan;
    z->eta = (1 - pow(2.0 / n, 1 - theta)) / (1 - zeta2 / zetan);
}

static long zipf_next(struct zipf *z) {
    double u = (next() >> 11) * (1.0 / 9007199254740992.0);
    double uz = u * z->zetan;
    long r;
    if (uz < 1)
        r = 0;
    else if (uz < 1 + pow(0.5, z->theta))
        r = 1;
    else
        r = (long)(z->n * pow(z->eta * u - z->eta + 1, z->alpha));
    if (r >= z->n)
        r = z->n - 1;
    return (long)(((uint64_t)r * 0x9e3779b97f4a7c15ull) % (uint64_t)z->n) + 1;
}

/* Read every page of the table and its index once: the runs are timed on a
 * warm cache (setcache's, or the kernel's), whichever holds it. */
static void warm(sqlite3 *db) {
    exec(db, "SELECT sum(length(v)) FROM t; SELECT count(*) FROM t INDEXED BY it WHERE tag > ''");
}

static void lookup(const char *path, double secs, const char *dist) {
    sqlite3 *db = open_db(path, SQLITE_OPEN_READONLY);
    exec(db, "PRAGMA cache_size=-2048; PRAGMA mmap_size=0;");
    if (getenv("SQLBENCH_WARM"))
        warm(db);
    long n = max_key(db);
    int zipf = strcmp(dist, "zipf") == 0;
    if (!zipf && strcmp(dist, "uniform") != 0) {
        fprintf(stderr, "sqlbench: DIST is uniform or zipf, not %s\n", dist);
        exit(2);
    }
    struct zipf z = {0};
    if (zipf)
        zipf_init(&z, n, 0.99);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT length(v) FROM t WHERE k = ?", -1, &st, NULL))
        die(db, "prepare");
    long done = 0, found = 0;
    double start = now(), end = start + secs;
    while (1) {
        for (int i = 0; i < 256; i++) {
            long k = zipf ? zipf_next(&z) : (long)(next() % n) + 1;
            sqlite3_bind_int64(st, 1, k);
            int rc = sqlite3_step(st);
            if (rc == SQLITE_ROW)
                found += sqlite3_column_int(st, 0) == 1000;
            else if (rc != SQLITE_DONE)
                die(db, "lookup");
            sqlite3_reset(st);
        }
        done += 256;
        if (now() >= end)
            break;
    }
    double t = now() - start;
    if (found != done) {
        fprintf(stderr, "sqlbench: %ld of %ld lookups found their row\n", found, done);
        exit(1);
    }
    printf("lookups %ld per_s %.0f\n", done, done / t);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void commit(const char *path, double secs, const char *mode) {
    sqlite3 *db = open_db(path, SQLITE_OPEN_READWRITE);
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s; PRAGMA synchronous=FULL; PRAGMA cache_size=-2048;", mode);
    exec(db, sql);
    if (getenv("SQLBENCH_WARM"))
        warm(db);
    long n = max_key(db);
    sqlite3_stmt *up, *begin, *end;
    if (sqlite3_prepare_v2(db, "UPDATE t SET v = ? WHERE k = ?", -1, &up, NULL) ||
        sqlite3_prepare_v2(db, "BEGIN", -1, &begin, NULL) ||
        sqlite3_prepare_v2(db, "COMMIT", -1, &end, NULL))
        die(db, "prepare");
    char v[1001];
    long done = 0;
    double start = now(), stop = start + secs;
    while (now() < stop) {
        fill(v, 1000);
        if (sqlite3_step(begin) != SQLITE_DONE)
            die(db, "begin");
        sqlite3_reset(begin);
        sqlite3_bind_text(up, 1, v, 1000, SQLITE_STATIC);
        sqlite3_bind_int64(up, 2, (long)(next() % n) + 1);
        if (sqlite3_step(up) != SQLITE_DONE)
            die(db, "update");
        sqlite3_reset(up);
        if (sqlite3_step(end) != SQLITE_DONE)
            die(db, "commit");
        sqlite3_reset(end);
        done++;
    }
    double t = now() - start;
    printf("commits %ld per_s %.1f\n", done, done / t);
    sqlite3_finalize(up);
    sqlite3_finalize(begin);
    sqlite3_finalize(end);
    sqlite3_close(db);
}

static void crash_write(const char *path, const char *log) {
    sqlite3 *db = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    const char *mode = getenv("SQLBENCH_JOURNAL");
    char sql[160];
    snprintf(sql, sizeof sql, "PRAGMA journal_mode=%s; PRAGMA synchronous=FULL;", mode ? mode : "DELETE");
    exec(db, sql);
    /* The schema and the running total's row in one transaction: a writer
       killed while setting up leaves either all of it or none. */
    exec(db, "BEGIN; "
             "CREATE TABLE IF NOT EXISTS log(n INTEGER PRIMARY KEY, sum INTEGER, v BLOB); "
             "CREATE TABLE IF NOT EXISTS total(id INTEGER PRIMARY KEY, s INTEGER); "
             "INSERT OR IGNORE INTO total VALUES(1, 0); "
             "COMMIT");
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        perror(log);
        exit(1);
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT coalesce(max(n), 0) FROM log", -1, &st, NULL) ||
        sqlite3_step(st) != SQLITE_ROW)
        die(db, "max");
    long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_stmt *ins, *add;
    if (sqlite3_prepare_v2(db, "INSERT INTO log VALUES(?, ?, randomblob(?))", -1, &ins, NULL) ||
        sqlite3_prepare_v2(db, "UPDATE total SET s = s + ? WHERE id = 1", -1, &add, NULL))
        die(db, "prepare");
    for (;;) {
        n++;
        exec(db, "BEGIN");
        sqlite3_bind_int64(ins, 1, n);
        sqlite3_bind_int64(ins, 2, n);
        sqlite3_bind_int(ins, 3, 100 + (int)(next() % 3000));
        if (sqlite3_step(ins) != SQLITE_DONE)
            die(db, "insert");
        sqlite3_reset(ins);
        sqlite3_bind_int64(add, 1, n);
        if (sqlite3_step(add) != SQLITE_DONE)
            die(db, "update");
        sqlite3_reset(add);
        exec(db, "COMMIT");
        char line[32];
        int len = snprintf(line, sizeof line, "%ld\n", n);
        if (write(fd, line, len) != len || fsync(fd) != 0) {
            perror("log");
            exit(1);
        }
    }
}

static void crash_check(const char *path, const char *log) {
    long last = 0;
    FILE *f = fopen(log, "r");
    if (f) {
        long v;
        while (fscanf(f, "%ld", &v) == 1)
            last = v;
        fclose(f);
    }
    /* A writer killed before it created the database: correct only while
       the log confirms nothing. */
    struct stat sb;
    if (last == 0 && stat(path, &sb) != 0 && errno == ENOENT) {
        printf("ok: 0 transactions (the log confirmed 0)\n");
        return;
    }
    sqlite3 *db = open_db(path, SQLITE_OPEN_READWRITE);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) ||
        sqlite3_step(st) != SQLITE_ROW)
        die(db, "integrity_check");
    const char *ok = (const char *)sqlite3_column_text(st, 0);
    if (strcmp(ok, "ok") != 0) {
        fprintf(stderr, "sqlbench: integrity_check: %s\n", ok);
        exit(1);
    }
    sqlite3_finalize(st);
    /* A writer killed before its setup committed leaves no tables: correct
       only while the log confirms nothing. */
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_master WHERE name IN ('log', 'total')", -1, &st,
                           NULL) ||
        sqlite3_step(st) != SQLITE_ROW)
        die(db, "schema");
    long tables = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (tables == 0 && last == 0) {
        sqlite3_close(db);
        printf("ok: 0 transactions (the log confirmed 0)\n");
        return;
    }
    if (sqlite3_prepare_v2(db, "SELECT count(*), coalesce(max(n), 0), coalesce(sum(sum), 0) FROM log", -1, &st, NULL) ||
        sqlite3_step(st) != SQLITE_ROW)
        die(db, "count");
    long count = sqlite3_column_int64(st, 0), max = sqlite3_column_int64(st, 1);
    long long sum = sqlite3_column_int64(st, 2);
    sqlite3_finalize(st);
    if (sqlite3_prepare_v2(db, "SELECT s FROM total WHERE id = 1", -1, &st, NULL) ||
        sqlite3_step(st) != SQLITE_ROW)
        die(db, "total");
    long long total = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (max < last || count != max || total != sum) {
        fprintf(stderr,
                "sqlbench: lost commits: log says %ld committed; the database holds %ld rows up to "
                "%ld, total %lld against %lld\n",
                last, count, max, total, sum);
        exit(1);
    }
    printf("ok: %ld transactions (the log confirmed %ld)\n", max, last);
}

static void wal(const char *path) {
    sqlite3 *db = open_db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    char *err = NULL;
    int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE IF NOT EXISTS w(x); INSERT INTO w VALUES(1);",
                          NULL, NULL, &err);
    printf("wal: rc %d (%s) extended %d: %s\n", rc, sqlite3_errstr(rc), sqlite3_extended_errcode(db),
           err ? err : "no error");
    sqlite3_close(db);
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "load") == 0)
        load(argv[2], atol(argv[3]));
    else if (argc >= 5 && strcmp(argv[1], "lookup") == 0)
        lookup(argv[2], atof(argv[3]), argv[4]);
    else if (argc >= 5 && strcmp(argv[1], "commit") == 0)
        commit(argv[2], atof(argv[3]), argv[4]);
    else if (argc >= 4 && strcmp(argv[1], "crash-write") == 0)
        crash_write(argv[2], argv[3]);
    else if (argc >= 4 && strcmp(argv[1], "crash-check") == 0)
        crash_check(argv[2], argv[3]);
    else if (argc >= 3 && strcmp(argv[1], "wal") == 0)
        wal(argv[2]);
    else {
        fprintf(stderr, "usage: sqlbench load|lookup|commit|crash-write|crash-check|wal ... (see the source)\n");
        return 2;
    }
    return 0;
}
