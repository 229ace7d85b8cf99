#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import StrataCore
import StrataStore

/// Versioned flushes on a cluster node (PROTOCOL.md §7.12 and §7.19): a FLUSH leaves a *flush
/// mark* — the namespace and a node version F taken just before it ran (newer than every item
/// it removed) — so that the flush reaches the nodes that missed it and nothing it removed
/// comes back from a replica. A mark *supersedes* every write of the namespace older than F.
///
/// - A write carrying a caller version < F in that namespace (a replica's copy, a hint, an
///   anti-entropy copy, a client's replica write) is refused as SUPERSEDED.
/// - SYNC_CHECK counts a write < F as held (the flush superseded it).
/// - Sync digests and SYNC_KEYS leave out entries < F (and the tombstones at F the sweep
///   leaves) and list the mark itself as the entry (namespace, empty key, F, tombstone) —
///   shared by every pair of nodes, so anti-entropy copies the newest mark across like a
///   tombstone: the receiving node records it and removes its own entries < F of that
///   namespace (`Dispatcher.takeFlushMark`; the copy is a FLUSH with a version).
/// - FLUSH ALL marks every namespace the node knows, and keeps a floor for every namespace: a
///   write < it to a namespace without a mark is refused and gives that namespace a mark, so
///   the peer that sent it learns of the flush.
///
/// Marks live as long as tombstones (`tombstoneTTL`, 24 h by default: a node away longer may
/// bring flushed items back, as with deletes), at most one per namespace and `maxMarks` in all.
/// A mark is never dropped before its lifetime: one that ended is dropped to make room, and
/// with `maxMarks` marks in force a FLUSH that needs a new one is refused (BUSY) — dropping the
/// oldest instead let one tenant's 10,000 flushes of its own namespaces push out another's
/// mark, whose flushed items then came back from a node that missed the flush (an outside
/// review). And no user other than admin holds more than `maxMarksPerUser` of them
/// (`--max-flush-marks-per-user`, 10,000): a mark records the user whose FLUSH made it, so one
/// tenant cannot fill the table for all (peers' marks and admins' count only toward `maxMarks`).
/// The marks are kept in
/// `DIR/flush-marks` (a line appended and fsynced per new mark, the file rewritten once it is
/// twice the marks; read at start). Cost: nothing on
/// a node without marks; a dictionary probe per synced entry and per versioned write with them.
final class FlushMarks: @unchecked Sendable {
    /// A snapshot of the marks, for one pass over the entries (no copy: the dictionary is shared).
    struct Floors {
        var marks: [[UInt8]: UInt64] = [:]
        var all: UInt64 = 0
        /// Marks at or below this version have outlived the tombstone lifetime.
        var expired: UInt64 = 0

        var isEmpty: Bool { all == 0 && marks.isEmpty }

        /// The version of the newest flush of `namespace` in force (0: none).
        func floor(_ namespace: [UInt8]) -> UInt64 {
            let v = max(marks[namespace] ?? 0, all)
            return v > expired ? v : 0
        }

        /// The mark in force for `namespace`, or for FLUSH ALL (nil): 0 when none.
        func held(_ namespace: [UInt8]?) -> UInt64 {
            guard let ns = namespace else { return all > expired ? all : 0 }
            return floor(ns)
        }

        /// True for an entry the flush of its namespace superseded, or a tombstone the sweep
        /// left at the flush's version (never a mark itself).
        func hides(_ e: SyncEntry) -> Bool {
            guard !isEmpty && !e.key.isEmpty else { return false }
            let f = floor(e.namespace)
            return e.version < f || (e.tombstone && e.version == f)
        }

        /// The marks in force, by namespace.
        var live: [([UInt8], UInt64)] { marks.filter { $0.value > expired }.map { ($0.key, $0.value) } }
    }

    /// The most marks kept (one per namespace, ~100 B each).
    static let defaultMaxMarks = 100_000
    let maxMarks: Int
    /// The most marks in force one user (other than admin) may have made.
    static let defaultMaxMarksPerUser = 10_000
    let maxMarksPerUser: Int

    let store: TieredCache
    let path: String
    let log: Logger
    private let lock = Lock()
    private var marks: [[UInt8]: UInt64] = [:]
    private var all: UInt64 = 0
    /// The user whose FLUSH made a namespace's mark (admins' and peers' marks have none), and
    /// how many marks each such user has made (expired ones included until they are dropped).
    private var owners: [[UInt8]: String] = [:]
    private var owned: [String: Int] = [:]
    /// No mark is older than this (0: none held): expired marks are looked for only past it.
    private var oldest: UInt64 = 0

    init(store: TieredCache, directory: String, log: Logger, maxMarks: Int = FlushMarks.defaultMaxMarks,
         maxMarksPerUser: Int = FlushMarks.defaultMaxMarksPerUser) {
        self.store = store; self.log = log; self.maxMarks = max(1, maxMarks)
        self.maxMarksPerUser = max(1, maxMarksPerUser)
        path = directory + "/flush-marks"
        load()
    }

    private var lifetimeMicros: UInt64 { UInt64(store.configuration.tombstoneTTL * 1e6) }

    private func live(_ v: UInt64, now: UInt64) -> Bool { v != 0 && v &+ lifetimeMicros > now }

    /// The marks now.
    func floors() -> Floors {
        let now = UInt64(max(0, store.clock.nowMicros()))
        return lock.withLock { Floors(marks: marks, all: all, expired: now > lifetimeMicros ? now - lifetimeMicros : 0) }
    }

    /// The version of the newest flush of `namespace` in force (0: none).
    func floor(_ namespace: [UInt8]) -> UInt64 { floors().floor(namespace) }

    /// The version of the flush that supersedes a write of `version` to `namespace` (one newer
    /// than the write), or nil.
    /// A write superseded by FLUSH ALL's floor alone gives its namespace a mark.
    func superseding(_ namespace: [UInt8], _ version: UInt64) -> UInt64? {
        let f = floors()
        let v = f.floor(namespace)
        guard version < v else { return nil }
        if (f.marks[namespace] ?? 0) < v { record(namespace, v) }
        return v
    }

    /// Records a flush of `namespace` (nil: every namespace, and each one in `known`) at
    /// `version`, made by `owner` (a user other than admin; nil: an admin or a peer); false
    /// when an equal or newer mark is already held, or there is no room (`hasRoom`).
    /// Persisted before it returns.
    @discardableResult
    func record(_ namespace: [UInt8]?, _ version: UInt64, known: [[UInt8]] = [], owner: String? = nil) -> Bool {
        lock.withLock {
            var lines: [String] = []
            func mark(_ ns: [UInt8], _ owner: String?) {
                guard (marks[ns] ?? 0) < version else { return }
                // A namespace's mark stays its first maker's until it is dropped.
                let by = marks[ns] != nil ? owners[ns] : owner
                setLocked(ns, version, owner: by)
                lines.append(Self.line(ns, version, owner: by))
            }
            if let ns = namespace {
                guard roomLocked(for: ns, owner: owner) else { return false }
                mark(ns, owner)
            } else {
                if all < version { all = version; lines.append("* \(version)") }
                // Namespaces past the room keep FLUSH ALL's floor, which lives as long.
                for ns in known where roomLocked(for: ns, owner: nil) { mark(ns, nil) }
            }
            guard !lines.isEmpty else { return false }
            persist(lines)
            return true
        }
    }

    /// Marks held (in force or not yet dropped).
    var count: Int { lock.withLock { marks.count } }

    /// Marks `user` made that are held.
    func count(by user: String) -> Int { lock.withLock { owned[user] ?? 0 } }

    /// Why a mark of `namespace` by `owner` (nil: an admin or a peer) cannot be recorded now, or
    /// nil when it can: it has one, or fewer than `maxMarks` are in force and `owner` has made
    /// fewer than `maxMarksPerUser` of them (marks whose lifetime ended are dropped to make room).
    func refusal(for namespace: [UInt8], owner: String? = nil) -> String? {
        lock.withLock {
            if roomLocked(for: namespace, owner: owner) { return nil }
            if let owner, (owned[owner] ?? 0) >= maxMarksPerUser {
                return "user '\(owner)' has made \(maxMarksPerUser) flush marks younger than the tombstone lifetime, the most one user may (--max-flush-marks-per-user)"
            }
            return "this node holds \(maxMarks) flush marks younger than the tombstone lifetime"
        }
    }

    /// True when `refusal` is nil.
    func hasRoom(for namespace: [UInt8], owner: String? = nil) -> Bool { refusal(for: namespace, owner: owner) == nil }

    private func roomLocked(for ns: [UInt8], owner: String?) -> Bool {
        if marks[ns] != nil { return true }
        func fits() -> Bool { marks.count < maxMarks && (owner.map { (owned[$0] ?? 0) < maxMarksPerUser } ?? true) }
        if fits() { return true }
        let now = UInt64(max(0, store.clock.nowMicros()))
        dropExpiredLocked(now: now)
        return fits()
    }

    private func setLocked(_ ns: [UInt8], _ v: UInt64, owner: String?) {
        if marks[ns] == nil, let owner { owners[ns] = owner; owned[owner, default: 0] += 1 }
        marks[ns] = v
        oldest = oldest == 0 ? v : min(oldest, v)
    }

    /// Drops the marks whose lifetime ended. O(marks), and only when one may have ended.
    private func dropExpiredLocked(now: UInt64) {
        let expired = now > lifetimeMicros ? now - lifetimeMicros : 0
        guard oldest != 0 && oldest <= expired else { return }
        marks = marks.filter { $0.value > expired }
        owners = owners.filter { marks[$0.key] != nil }
        owned = [:]
        for (_, o) in owners { owned[o, default: 0] += 1 }
        oldest = marks.values.min() ?? 0
    }

    /// Sweeps run here, one at a time, off the request's thread.
    private let sweeper = DispatchQueue(label: "strata-flush-sweep")

    /// `sweep(namespace)` in the background; `removed` is told the keys it removed. A FLUSH
    /// answers once its mark is recorded: from then on what it supersedes is refused and left
    /// out of anti-entropy, and the sweep removes it from this node's tiers within about a
    /// second per million keys.
    func sweepLater(_ namespace: [UInt8]?, removed: @escaping @Sendable ([ItemKey]) -> Void) {
        sweeper.async { [self] in
            do { removed(try sweep(namespace)) } catch {
                log.warn("flush_sweep_failed", [("error", "\(error)")])
            }
        }
    }

    /// Removes this node's items of `namespace` (nil: of every namespace) older than their
    /// namespace's flush (writes that raced a local flush, or everything a peer's flush covers);
    /// each leaves a tombstone at the flush's version, already expired (the mark hides it and
    /// refuses the older writes it would have). Returns the keys
    /// removed. O(entries on disk) — one pass like a sync digest.
    func sweep(_ namespace: [UInt8]?) throws -> [ItemKey] {
        let f = floors()
        guard !f.isEmpty else { return [] }
        var doomed: [(ItemKey, UInt64)] = []
        try store.forEachSyncEntry(include: { ns, _ in namespace == nil || ns == namespace! }) { e in
            if !e.tombstone && f.hides(e) { doomed.append((ItemKey(namespace: e.namespace, key: e.key), f.floor(e.namespace))) }
        }
        var removed: [ItemKey] = []
        for (id, v) in doomed {
            // The mark refuses older writes itself, so the tombstone need not outlive this: one
            // kept 24 h was hidden from passes by the mark but counted by the maintained digests
            // (an outside review: ~400 buckets differing every round after a one-node flush).
            if case .removed = try store.remove(id.key, namespace: id.namespace, tiers: .all, version: v, tombstoneLifetime: 0) {
                removed.append(id)
            }
        }
        return removed
    }

    /// Every synced entry `store.forEachSyncEntry` lists, less those a flush superseded, then
    /// the marks as entries (namespace, empty key, version, tombstone) — what SYNC_DIGEST and
    /// SYNC_KEYS compare (`include` sees a mark's namespace with an empty key).
    func forEachSyncEntry(maxVersion: UInt64, include: ([UInt8], [UInt8]) -> Bool, _ body: (SyncEntry) -> Void) throws {
        let f = floors()
        try store.forEachSyncEntry(maxVersion: maxVersion, include: include) { e in
            if !f.hides(e) { body(e) }
        }
        for (ns, v) in f.live where v <= maxVersion && include(ns, []) {
            body(SyncEntry(namespace: ns, key: [], version: v, tombstone: true))
        }
    }

    // MARK: The file

    /// One line per mark: `HEX-NAMESPACE VERSION [HEX-USER]` (`*` for FLUSH ALL's floor; `-`
    /// for the default namespace; the user who made it, when not an admin or a peer); a
    /// namespace's newest line wins, its first owner stays. Unreadable lines are skipped.
    private func load() {
        guard let f = fopen(path, "r") else { return }
        defer { fclose(f) }
        var buf = [CChar](repeating: 0, count: 512)
        while fgets(&buf, Int32(buf.count), f) != nil {
            let line = String(decoding: buf.prefix { $0 != 0 && $0 != 10 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = line.split(separator: " ")
            guard parts.count == 2 || parts.count == 3, let v = UInt64(parts[1]) else { continue }
            if parts[0] == "*" { all = max(all, v); continue }
            guard let ns = parts[0] == "-" ? [] : [UInt8](hex: String(parts[0])) else { continue }
            let owner = parts.count == 3 ? [UInt8](hex: String(parts[2])).map { String(decoding: $0, as: UTF8.self) } : nil
            if v > (marks[ns] ?? 0) { setLocked(ns, v, owner: owner) }
            fileLines += 1
        }
        // A file from a build that kept more: the newest marks, as they were kept.
        if marks.count > maxMarks {
            marks = Dictionary(uniqueKeysWithValues: marks.sorted { $0.value > $1.value }.prefix(maxMarks).map { ($0.key, $0.value) })
            owners = owners.filter { marks[$0.key] != nil }
            owned = [:]
            for (_, o) in owners { owned[o, default: 0] += 1 }
        }
        oldest = marks.values.min() ?? 0
    }

    private static func line(_ ns: [UInt8], _ v: UInt64, owner: String? = nil) -> String {
        "\(ns.isEmpty ? "-" : ns.hexString) \(v)" + (owner.map { " " + Array($0.utf8).hexString } ?? "")
    }

    /// Lines in the file (rewritten once they are more than twice the marks).
    private var fileLines = 0
    /// An append failed (it may have left part of a line): the next mark rewrites the file.
    private var rewriteDue = false

    /// Appends `lines` to the file and fsyncs it; rewrites the file with the live marks only
    /// (temporary file, fsync, rename) once it holds more than twice their number. Amortized
    /// O(1) per mark. Caller holds the lock.
    private func persist(_ lines: [String]) {
        if rewriteDue || fileLines + lines.count > 2 * (marks.count + 1) + 64 { return rewrite() }
        do {
            try SmallFiles.append(path, lines.map { $0 + "\n" }.joined())
            fileLines += lines.count
        } catch {
            // A short append may have left part of a line: the next mark rewrites the file.
            log.warn("flush_marks_not_saved", [("path", path), ("error", "\(error)")])
            rewriteDue = true
        }
    }

    private func rewrite() {
        let now = UInt64(max(0, store.clock.nowMicros()))
        dropExpiredLocked(now: now)
        if !live(all, now: now) { all = 0 }
        var text = all != 0 ? "* \(all)\n" : ""
        for (ns, v) in marks { text += Self.line(ns, v, owner: owners[ns]) + "\n" }
        do {
            try SmallFiles.replace(path, with: text)
            fileLines = marks.count + (all != 0 ? 1 : 0)
            rewriteDue = false
        } catch {
            log.warn("flush_marks_not_saved", [("path", path), ("error", "\(error)")])
        }
    }
}
