// SQLite page size probe (issue 21, workload 6): point reads of 10 KiB rows and batched
// updates of 100 B rows, on Strata's items schema, at several page sizes.
// Build: cc -O2 -o /tmp/sqlite-pagesize bench/sqlite-pagesize.c -lsqlite3
// Run:   /tmp/sqlite-pagesize DIR [ROWS] [READS]
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
static void ok(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) { fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db)); exit(1); }
}
static unsigned long long rng = 88172645463325252ULL;
static unsigned long long next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static void run(const char *dir, int page, int rows, int reads, int valueSize, const char *label) {
    char path[512]; snprintf(path, sizeof path, "%s/p%d-%d.db", dir, page, valueSize);
    unlink(path); char w[600]; snprintf(w, sizeof w, "%s-wal", path); unlink(w); snprintf(w, sizeof w, "%s-shm", path); unlink(w);
    sqlite3 *db; ok(sqlite3_open(path, &db), db, "open");
    char sql[256]; snprintf(sql, sizeof sql, "PRAGMA page_size=%d", page); ok(sqlite3_exec(db, sql, 0, 0, 0), db, "page_size");
    ok(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA mmap_size=1073741824; PRAGMA cache_size=-65536;"
                        "CREATE TABLE items(id INTEGER PRIMARY KEY, ns INTEGER NOT NULL, key BLOB NOT NULL, gen INTEGER NOT NULL,"
                        " codec INTEGER NOT NULL, size INTEGER NOT NULL, flags INTEGER NOT NULL, ext BLOB NOT NULL, expiry INTEGER NOT NULL,"
                        " version INTEGER NOT NULL, tombstone INTEGER NOT NULL, checksum INTEGER NOT NULL, access INTEGER NOT NULL, value BLOB NOT NULL);"
                        "CREATE UNIQUE INDEX items_key ON items(ns, key);", 0, 0, 0), db, "schema");
    unsigned char *value = malloc(valueSize);
    sqlite3_stmt *ins;
    ok(sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO items(ns,key,gen,codec,size,flags,ext,expiry,version,tombstone,checksum,access,value)"
                              " VALUES(1,?,0,0,?,0,x'',0,?,0,?,0,?)", -1, &ins, 0), db, "prep ins");
    char key[32];
    double t0 = now();
    ok(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < valueSize; j += 8) { unsigned long long r = next(); memcpy(value + j, &r, valueSize - j < 8 ? valueSize - j : 8); }
        int n = snprintf(key, sizeof key, "key:%08d", i);
        sqlite3_bind_blob(ins, 1, key, n, SQLITE_STATIC); sqlite3_bind_int(ins, 2, valueSize);
        sqlite3_bind_int64(ins, 3, i); sqlite3_bind_int64(ins, 4, (long long)next());
        sqlite3_bind_blob(ins, 5, value, valueSize, SQLITE_STATIC);
        ok(sqlite3_step(ins), db, "ins"); sqlite3_reset(ins);
        if (i % 256 == 255) { ok(sqlite3_exec(db, "COMMIT; BEGIN", 0, 0, 0), db, "commit"); }
    }
    ok(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
    double load = now() - t0;
    ok(sqlite3_wal_checkpoint_v2(db, 0, SQLITE_CHECKPOINT_TRUNCATE, 0, 0), db, "ckpt");
    // Point reads by key, the value copied out (what a GET does).
    sqlite3_stmt *sel;
    ok(sqlite3_prepare_v2(db, "SELECT gen, value, codec, size, flags, ext, expiry, version, tombstone, checksum FROM items WHERE ns=1 AND key=?",
                          -1, &sel, 0), db, "prep sel");
    unsigned char *out = malloc(valueSize > 0 ? valueSize : 1);
    long long sum = 0;
    for (int i = 0; i < reads / 10; i++) { // warm
        int n = snprintf(key, sizeof key, "key:%08d", (int)(next() % rows));
        sqlite3_bind_blob(sel, 1, key, n, SQLITE_STATIC);
        if (sqlite3_step(sel) == SQLITE_ROW) sum += sqlite3_column_bytes(sel, 1);
        sqlite3_reset(sel);
    }
    t0 = now();
    for (int i = 0; i < reads; i++) {
        int n = snprintf(key, sizeof key, "key:%08d", (int)(next() % rows));
        sqlite3_bind_blob(sel, 1, key, n, SQLITE_STATIC);
        if (sqlite3_step(sel) == SQLITE_ROW) {
            int len = sqlite3_column_bytes(sel, 1);
            memcpy(out, sqlite3_column_blob(sel, 1), len); sum += out[len / 2] + len;
        }
        sqlite3_reset(sel);
    }
    double readT = now() - t0;
    // Batched updates of existing rows with a fresh value (the applier's work), 256 per commit.
    int updates = rows < 50000 ? rows : 50000;
    sqlite3_stmt *upd;
    ok(sqlite3_prepare_v2(db, "UPDATE items SET value=?, version=?, checksum=? WHERE ns=1 AND key=?", -1, &upd, 0), db, "prep upd");
    struct stat st; snprintf(w, sizeof w, "%s-wal", path);
    t0 = now();
    long long walBytes = 0;
    ok(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
    for (int i = 0; i < updates; i++) {
        for (int j = 0; j < valueSize; j += 8) { unsigned long long r = next(); memcpy(value + j, &r, valueSize - j < 8 ? valueSize - j : 8); }
        int n = snprintf(key, sizeof key, "key:%08d", (int)(next() % rows));
        sqlite3_bind_blob(upd, 1, value, valueSize, SQLITE_STATIC); sqlite3_bind_int64(upd, 2, i);
        sqlite3_bind_int64(upd, 3, (long long)next()); sqlite3_bind_blob(upd, 4, key, n, SQLITE_STATIC);
        ok(sqlite3_step(upd), db, "upd"); sqlite3_reset(upd);
        if (i % 256 == 255) {
            ok(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
            if (stat(w, &st) == 0) walBytes += st.st_size;
            ok(sqlite3_wal_checkpoint_v2(db, 0, SQLITE_CHECKPOINT_TRUNCATE, 0, 0), db, "ckpt");
            ok(sqlite3_exec(db, "BEGIN", 0, 0, 0), db, "begin");
        }
    }
    ok(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
    double updT = now() - t0;
    sqlite3_int64 pages = 0; sqlite3_stmt *pc; sqlite3_prepare_v2(db, "PRAGMA page_count", -1, &pc, 0);
    if (sqlite3_step(pc) == SQLITE_ROW) pages = sqlite3_column_int64(pc, 0); sqlite3_finalize(pc);
    printf("%-6s page %5d  value %5d B  rows %6d  load %6.2f us/row  read %6.2f us/get  update %6.2f us/row, WAL %7.0f B/row  file %5.1f MB  (%lld)\n",
           label, page, valueSize, rows, load / rows * 1e6, readT / reads * 1e6, updT / updates * 1e6,
           (double)walBytes / updates, pages * (double)page / 1e6, sum % 7);
    sqlite3_finalize(ins); sqlite3_finalize(sel); sqlite3_finalize(upd); sqlite3_close(db);
    free(value); free(out);
    unlink(path); snprintf(w, sizeof w, "%s-wal", path); unlink(w); snprintf(w, sizeof w, "%s-shm", path); unlink(w);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    int rows = argc > 2 ? atoi(argv[2]) : 10000, reads = argc > 3 ? atoi(argv[3]) : 200000;
    int pages[] = {4096, 8192, 16384, 32768};
    for (int p = 0; p < 4; p++) run(dir, pages[p], rows, reads, 10240, "10KiB");
    for (int p = 0; p < 4; p++) run(dir, pages[p], rows * 10, reads, 100, "100B");
    return 0;
}
