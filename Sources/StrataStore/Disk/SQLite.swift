#if canImport(Glibc)
import Glibc
#endif
import CSQLite

// The one file that knows SQLite's C API. Everything else in Strata talks to these types.

/// An error from SQLite: its result code (extended) and message.
public struct SQLiteError: Error, CustomStringConvertible, Sendable {
    public let code: Int32
    public let message: String
    /// The OS error behind an I/O error (`sqlite3_system_errno`), 0 when unknown.
    public let systemErrno: Int32
    public init(code: Int32, message: String, systemErrno: Int32 = 0) {
        self.code = code; self.message = message; self.systemErrno = systemErrno
    }
    public var description: String { "sqlite error \(code): \(message)" }
    /// SQLITE_CORRUPT or SQLITE_NOTADB: the file is damaged or is not a database.
    public var isCorruption: Bool { (code & 0xFF) == SQLITE_CORRUPT || (code & 0xFF) == SQLITE_NOTADB }
    /// The disk (or a configured limit) is full: SQLITE_FULL, or an I/O error whose OS error is
    /// ENOSPC or EDQUOT (growing the `-shm` or WAL file on a full disk reports SQLITE_IOERR).
    public var isFull: Bool {
        (code & 0xFF) == SQLITE_FULL || ((code & 0xFF) == SQLITE_IOERR && (systemErrno == ENOSPC || systemErrno == EDQUOT))
    }
    public var isBusy: Bool { (code & 0xFF) == SQLITE_BUSY || (code & 0xFF) == SQLITE_LOCKED }
}

private let transientDestructor = unsafeBitCast(-1 as Int, to: sqlite3_destructor_type.self)

/// SQLite's process-wide settings, made once before the first connection opens (they take
/// effect only before SQLite initializes): no memory statistics (`CSQLite/shim.h`).
private let sqliteConfigured: Void = { _ = strata_sqlite3_disable_memstatus() }()

/// One SQLite connection. Not thread-safe: each thread (writer, each reader) owns its own,
/// opened with `SQLITE_OPEN_NOMUTEX`. Statements are prepared once and cached by SQL text.
public final class SQLiteConnection {
    public let path: String
    let handle: OpaquePointer
    private var cache: [String: SQLiteStatement] = [:]
    private var literalCache: [UInt: SQLiteStatement] = [:]
    /// What `createFunction` and the hooks handed SQLite pointers to: kept alive with the connection.
    private var retained: [AnyObject] = []

    /// Opens (creating unless `readOnly` or `mustExist`) the database at `path`. `immutable`
    /// (read-only): SQLite assumes no one changes the file and takes no locks and no `-shm`,
    /// so a file in a directory this process may not write opens — right only when no WAL
    /// file with frames lies beside it (its frames would be ignored).
    public init(path: String, readOnly: Bool = false, mustExist: Bool = false, immutable: Bool = false) throws {
        self.path = path
        sqliteConfigured
        var db: OpaquePointer?
        let create = readOnly || mustExist ? 0 : SQLITE_OPEN_CREATE
        var flags = (readOnly || immutable ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | create)) | SQLITE_OPEN_NOMUTEX
        var name = path
        if immutable {
            flags |= SQLITE_OPEN_URI
            // A URI's path: '?', '#' and '%' would end or escape it.
            var escaped = ""
            for c in path.unicodeScalars {
                switch c {
                case "?": escaped += "%3f"
                case "#": escaped += "%23"
                case "%": escaped += "%25"
                default: escaped.unicodeScalars.append(c)
                }
            }
            name = "file:\(escaped)?immutable=1"
        }
        let rc = sqlite3_open_v2(name, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            let msg = db.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            let osError = db.map { sqlite3_system_errno($0) } ?? 0
            if let db { sqlite3_close_v2(db) }
            throw SQLiteError(code: rc, message: "\(msg) (\(path))", systemErrno: osError)
        }
        handle = db
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, 5000)
    }

    deinit {
        cache.removeAll()
        literalCache.removeAll()
        sqlite3_close_v2(handle)
    }

    func error(_ rc: Int32) -> SQLiteError {
        SQLiteError(code: rc, message: String(cString: sqlite3_errmsg(handle)), systemErrno: sqlite3_system_errno(handle))
    }

    /// Runs one or more statements that return no rows we need.
    public func execute(_ sql: String) throws {
        var err: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &err)
        if rc != SQLITE_OK {
            let msg = err.map { String(cString: $0) } ?? "error"
            sqlite3_free(err)
            throw SQLiteError(code: rc, message: msg, systemErrno: sqlite3_system_errno(handle))
        }
    }

    /// Transaction control through cached statements (`execute` would parse the SQL on every
    /// call, and the writer runs these once per commit).
    public func beginImmediate() throws { try prepared("BEGIN IMMEDIATE").run() }
    public func commit() throws { try prepared("COMMIT").run() }
    /// Rolls back the open transaction, if any (SQLite may already have rolled it back).
    public func rollback() { try? prepared("ROLLBACK").run() }

    /// A cached prepared statement for the literal `sql`, reset: found by the literal's
    /// address, not by hashing its text (the upsert's ~400 characters were hashed per row).
    public func prepared(_ sql: StaticString) throws -> SQLiteStatement {
        let id = UInt(bitPattern: sql.utf8Start)
        if let s = literalCache[id] {
            s.reset()
            return s
        }
        let s = try statement(sql.description)
        literalCache[id] = s
        return s
    }

    /// A cached prepared statement for `sql`, reset and with bindings cleared.
    public func statement(_ sql: String) throws -> SQLiteStatement {
        if let s = cache[sql] {
            s.reset()
            return s
        }
        var stmt: OpaquePointer?
        let rc = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &stmt, nil)
        guard rc == SQLITE_OK, let stmt else { throw error(rc) }
        let s = SQLiteStatement(connection: self, stmt: stmt)
        cache[sql] = s
        return s
    }

    /// The first column of the first row of `sql` as an integer (for PRAGMAs and counts).
    public func scalarInt(_ sql: String) throws -> Int64? {
        let s = try statement(sql)
        defer { s.reset() }
        return try s.step() ? s.int(0) : nil
    }

    /// The first column of each row of `sql` as text (for PRAGMA quick_check).
    public func textRows(_ sql: String) throws -> [String] {
        let s = try statement(sql)
        defer { s.reset() }
        var out: [String] = []
        while try s.step() { out.append(s.text(0)) }
        return out
    }

    public var changes: Int { Int(sqlite3_changes(handle)) }
    /// The rowid of the last row this connection inserted; settable (to 0) to learn whether an
    /// upsert inserted (an upsert that updates leaves it unchanged).
    public var lastInsertRowID: Int64 {
        get { sqlite3_last_insert_rowid(handle) }
        set { sqlite3_set_last_insert_rowid(handle, newValue) }
    }

    /// Checkpoints the WAL: copies its frames into the database file. Passive (`truncate`
    /// false) never waits for readers or the writer and copies what it can; `truncate` waits
    /// for them, copies everything and shrinks the WAL file to zero bytes. Returns the frames
    /// in the WAL and how many of them are now in the database file.
    @discardableResult
    public func checkpoint(truncate: Bool) throws -> (frames: Int, copied: Int) {
        var log: Int32 = 0, done: Int32 = 0
        let rc = sqlite3_wal_checkpoint_v2(handle, nil, truncate ? SQLITE_CHECKPOINT_TRUNCATE : SQLITE_CHECKPOINT_PASSIVE, &log, &done)
        if rc != SQLITE_OK && rc != SQLITE_BUSY { throw error(rc) }
        return (Int(log), Int(done))
    }

    /// Frees the pages of this connection's cache that no transaction holds
    /// (`sqlite3_db_release_memory`): back to the heap, not necessarily to the kernel.
    public func releaseCache() {
        _ = sqlite3_db_release_memory(handle)
    }

    /// Bytes of heap this connection's page cache holds now (`SQLITE_DBSTATUS_CACHE_USED`).
    public var cacheBytes: Int {
        var current: Int32 = 0, high: Int32 = 0
        _ = sqlite3_db_status(handle, SQLITE_DBSTATUS_CACHE_USED, &current, &high, 0)
        return Int(current)
    }

    /// Frames in the WAL after this connection's last commit, once `trackWalFrames()` ran.
    public private(set) var walFrames = 0

    /// Keeps `walFrames` current with a WAL hook. This replaces SQLite's automatic checkpoint
    /// (itself a WAL hook), so whoever calls this checkpoints the WAL.
    public func trackWalFrames() {
        sqlite3_wal_hook(handle, { context, _, _, frames in
            Unmanaged<SQLiteConnection>.fromOpaque(context!).takeUnretainedValue().walFrames = Int(frames)
            return SQLITE_OK
        }, Unmanaged.passUnretained(self).toOpaque())
    }

    public static var libraryVersion: String { String(cString: sqlite3_libversion()) }

    // MARK: Functions and transaction hooks

    /// Registers the SQL function `name` taking `argc` arguments on this connection only (SQL
    /// run here — a TEMP trigger — may call it; it returns NULL). `body` runs on the thread
    /// that runs the statement, inside it: it must not use this connection.
    public func createFunction(_ name: String, argc: Int32, _ body: @escaping (SQLiteArguments) -> Void) throws {
        let box = Box(body)
        let rc = sqlite3_create_function_v2(handle, name, argc, SQLITE_UTF8, Unmanaged.passUnretained(box).toOpaque(), { context, n, argv in
            guard let context, let argv, let me = sqlite3_user_data(context) else { return }
            Unmanaged<Box<(SQLiteArguments) -> Void>>.fromOpaque(me).takeUnretainedValue().value(SQLiteArguments(argv: argv, count: Int(n)))
            sqlite3_result_null(context)
        }, nil, nil, nil)
        guard rc == SQLITE_OK else { throw error(rc) }
        retained.append(box)
    }

    /// Calls `commit` after each transaction on this connection commits and `rollback` after
    /// each one rolls back (SQLite's commit and rollback hooks; one of each per connection).
    public func onTransactionEnd(commit: @escaping () -> Void, rollback: @escaping () -> Void) {
        let c = Box(commit), r = Box(rollback)
        retained += [c, r]
        sqlite3_commit_hook(handle, { me in
            Unmanaged<Box<() -> Void>>.fromOpaque(me!).takeUnretainedValue().value()
            return 0 // 0: the commit goes ahead
        }, Unmanaged.passUnretained(c).toOpaque())
        sqlite3_rollback_hook(handle, { me in
            Unmanaged<Box<() -> Void>>.fromOpaque(me!).takeUnretainedValue().value()
        }, Unmanaged.passUnretained(r).toOpaque())
    }

    private final class Box<T> {
        let value: T
        init(_ v: T) { value = v }
    }
}

/// The arguments of one call of a function registered with `createFunction`; valid only
/// during the call.
public struct SQLiteArguments {
    let argv: UnsafeMutablePointer<OpaquePointer?>
    public let count: Int
    public func int(_ i: Int) -> Int64 { sqlite3_value_int64(argv[i]) }
    public func bytes(_ i: Int) -> [UInt8] {
        let n = Int(sqlite3_value_bytes(argv[i]))
        guard n > 0, let p = sqlite3_value_blob(argv[i]) else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: p, count: n))
    }
}

/// A prepared statement owned by one connection. Bind indexes are 1-based, column indexes 0-based.
public final class SQLiteStatement {
    unowned let connection: SQLiteConnection
    let stmt: OpaquePointer

    init(connection: SQLiteConnection, stmt: OpaquePointer) {
        self.connection = connection
        self.stmt = stmt
    }

    deinit { sqlite3_finalize(stmt) }

    public func reset() {
        sqlite3_reset(stmt)
        sqlite3_clear_bindings(stmt)
    }

    public func bind(_ i: Int32, _ v: Int64) { sqlite3_bind_int64(stmt, i, v) }
    public func bind(_ i: Int32, _ v: Int) { sqlite3_bind_int64(stmt, i, Int64(v)) }
    public func bindNull(_ i: Int32) { sqlite3_bind_null(stmt, i) }
    public func bind(_ i: Int32, _ v: String) { sqlite3_bind_text(stmt, i, v, -1, transientDestructor) }

    /// Binds bytes (copied by SQLite). An empty array binds a zero-length blob, not NULL.
    public func bind(_ i: Int32, _ bytes: [UInt8]) {
        bytes.withUnsafeBytes { bind(i, $0) }
    }

    public func bind(_ i: Int32, _ bytes: UnsafeRawBufferPointer) {
        if let base = bytes.baseAddress, bytes.count > 0 {
            sqlite3_bind_blob64(stmt, i, base, sqlite3_uint64(bytes.count), transientDestructor)
        } else {
            sqlite3_bind_zeroblob(stmt, i, 0)
        }
    }

    /// Steps once: true when a row is ready, false when done.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(stmt)
        if rc == SQLITE_ROW { return true }
        if rc == SQLITE_DONE { return false }
        let e = connection.error(rc)
        sqlite3_reset(stmt)
        throw e
    }

    /// Runs to completion (for writes).
    public func run() throws {
        defer { sqlite3_reset(stmt) }
        while try step() {}
    }

    public func int(_ col: Int32) -> Int64 { sqlite3_column_int64(stmt, col) }
    public func isNull(_ col: Int32) -> Bool { sqlite3_column_type(stmt, col) == SQLITE_NULL }

    public func text(_ col: Int32) -> String {
        guard let p = sqlite3_column_text(stmt, col) else { return "" }
        return String(cString: p)
    }

    public func bytes(_ col: Int32) -> [UInt8] {
        let n = Int(sqlite3_column_bytes(stmt, col))
        guard n > 0, let p = sqlite3_column_blob(stmt, col) else { return [] }
        return [UInt8](UnsafeRawBufferPointer(start: p, count: n))
    }

    /// Calls `body` with the blob's bytes without copying (valid only inside `body`).
    public func withBytes<T>(_ col: Int32, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        let p = sqlite3_column_blob(stmt, col)
        let n = Int(sqlite3_column_bytes(stmt, col))
        return try body(UnsafeRawBufferPointer(start: n > 0 ? p : nil, count: n))
    }
}
