#if canImport(Glibc)
import Glibc
#endif
import CLinux
import StrataCore
import Synchronization

// Opening the disk tier (with `openDatabase` in DiskTier.swift): the data directory (created,
// checked writable, locked), the writer's connection, the schema and its migrations, and
// moving a corrupt file aside.
extension DiskTier {
    func prepareDirectory() throws {
        guard !directory.isEmpty else { throw StoreError(.directory, "the data directory is an empty path: name one") }
        var st = stat()
        if stat(directory, &st) != 0 {
            // Its missing parents too (`mkdir -p`): the README's embedding example names
            // /var/lib/myapp/cache, and an outside review's fresh machine had no /var/lib/myapp.
            if let why = makeDirectories(directory) {
                throw StoreError(.directory, "cannot create data directory \(directory): \(why)")
            }
        } else if (st.st_mode & S_IFMT) != S_IFDIR {
            throw StoreError(.directory, "data directory \(directory) exists and is not a directory")
        }
        if access(directory, W_OK) != 0 {
            throw StoreError(.directory, "data directory \(directory) is not writable: \(String(cString: strerror(errno)))")
        }
        let lockPath = directory + "/LOCK"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            throw StoreError(.directory, "cannot create lock file \(lockPath): \(String(cString: strerror(errno)))")
        }
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if strata_flock_exclusive_nonblocking(fd) != 0 || (dirFD >= 0 && strata_flock_exclusive_nonblocking(dirFD) != 0) {
            Glibc.close(fd)
            if dirFD >= 0 { Glibc.close(dirFD) }
            throw StoreError(.locked, "data directory \(directory) is in use — by another process, or by another store open in this one (lock file \(lockPath))")
        }
        lockFD = fd
        directoryLockFD = dirFD
    }

    func openWriter() throws {
        // SQLite opens a file cut short without a word and fails only on the first read of a
        // missing page: found at open, the node would answer misses and I/O errors from it
        // until the start-up quick_check moved it aside (an outside review, dur13).
        if let reason = Self.cutShort(dbPath) { quarantineFiles(reason: reason) }
        do {
            writer = try openDatabase()
        } catch let e as SQLiteError where e.isCorruption {
            quarantineFiles(reason: "open failed: \(e.message)")
            writer = try openDatabase()
        } catch let e as SQLiteError {
            throw mapError(e, doing: "opening \(dbPath)")
        }
    }


    func migrate(_ db: SQLiteConnection, from version: Int64) throws {
        // Version 0 is an empty file: create everything. 1 → 2 changes no tables (the marks
        // column gains bits) and 2 → 3 adds a counters row, so one idempotent script serves all.
        // `value` is the last column (files made before 2026-12-02 have it fifth; every
        // statement names its columns, so both orders work): a row's other columns then sit
        // before its value, in the row's first page, and what reads only them — a version
        // check, the sweeps, eviction, anti-entropy's pass — does not walk a large value's
        // overflow pages to reach them.
        try db.execute("""
            BEGIN;
            CREATE TABLE IF NOT EXISTS namespaces(id INTEGER PRIMARY KEY, name BLOB NOT NULL UNIQUE, generation INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE IF NOT EXISTS items(
                id INTEGER PRIMARY KEY,
                ns INTEGER NOT NULL, key BLOB NOT NULL, gen INTEGER NOT NULL,
                codec INTEGER NOT NULL, size INTEGER NOT NULL,
                flags INTEGER NOT NULL, ext BLOB NOT NULL, expiry INTEGER NOT NULL,
                version INTEGER NOT NULL, tombstone INTEGER NOT NULL, checksum INTEGER NOT NULL,
                access INTEGER NOT NULL, value BLOB NOT NULL);
            CREATE UNIQUE INDEX IF NOT EXISTS items_key ON items(ns, key);
            DROP INDEX IF EXISTS items_access;
            CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
            INSERT OR IGNORE INTO counters(name, value) VALUES('rows', 0);
            INSERT OR IGNORE INTO counters(name, value) VALUES('log_applied', 0);
            PRAGMA user_version=3;
            COMMIT;
            """)
    }

    /// Why the database file at `path` is cut short — its header counts more pages than the
    /// file holds — or nil (no file, no valid page count, or a WAL that may still fill it: a
    /// checkpoint writes page 1 first, so a crash in one leaves a file shorter than its header
    /// until the WAL is checkpointed again). Reads the first 100 bytes (SQLite's file format:
    /// page size at 16, change counter at 24, page count at 28, valid-for at 92, big-endian).
    static func cutShort(_ path: String) -> String? {
        var st = stat()
        if stat(path + "-wal", &st) == 0 && st.st_size > 0 { return nil }
        guard stat(path, &st) == 0, st.st_size >= 100 else { return nil }
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { Glibc.close(fd) }
        var h = [UInt8](repeating: 0, count: 100)
        guard h.withUnsafeMutableBytes({ pread(fd, $0.baseAddress, 100, 0) }) == 100,
              h.prefix(16).elementsEqual(Array("SQLite format 3\0".utf8)) else { return nil }
        func be32(_ at: Int) -> UInt64 { h[at..<at + 4].reduce(0) { $0 << 8 | UInt64($1) } }
        let rawPageSize = UInt64(h[16]) << 8 | UInt64(h[17])
        let pageSize = rawPageSize == 1 ? 65_536 : rawPageSize
        let pages = be32(28)
        guard pageSize >= 512, pages > 0, be32(24) == be32(92) else { return nil }
        let size = UInt64(st.st_size)
        guard size < pages * pageSize else { return nil }
        return "the file is cut short: its header counts \(pages) pages of \(pageSize) bytes (\(pages * pageSize)), the file holds \(size)"
    }

    /// Moves the database files aside with a timestamped name and reports it.
    func quarantineFiles(reason: String) {
        let stamp = clock.nowMicros() / 1000
        let target = "\(dbPath).corrupt-\(stamp)"
        for suffix in ["", "-wal", "-shm"] {
            rename(dbPath + suffix, target + suffix)
        }
        counters.quarantines.add(1, ordering: .relaxed)
        log("level=error event=disk_quarantined path=\(dbPath) moved_to=\(target) reason=\"\(reason)\"")
    }
}
