import StrataCore
import Synchronization

/// Per-namespace counters, updated without a lock.
public final class NamespaceCounters: Sendable {
    let hits = Atomic<Int>(0)
    let misses = Atomic<Int>(0)
    let writes = Atomic<Int>(0)
    /// SETs of any mode (stored or not), a subset of `writes`.
    let sets = Atomic<Int>(0)
    init() {}
}

/// The namespaces a store knows: name → disk id, generation, memory tag.
///
/// Flushing a namespace is O(1): its generation (on disk) and its tag (in memory) change, so
/// every older item stops matching at once; the background sweep collects them later.
/// An entry exists only for a namespace that was written since open, is on disk, or has a
/// write in the durability log: a flush or a read of any other name creates nothing (a flush of
/// a namespace that holds nothing has nothing to record), so the registry grows with the
/// namespaces that hold items, never with the names clients ask about. Thread-safe (one lock;
/// lookups are a dictionary probe). Costs about 300 bytes per entry.
final class NamespaceRegistry: @unchecked Sendable {
    struct Entry {
        var diskID: Int64?
        var generation: Int64
        var tag: UInt32
        let counters: NamespaceCounters
        /// The namespace's memory-tier compression, when the store compresses it (kept
        /// through flushes: records compressed before one may still be read until swept).
        var compression: NamespaceCompression? = nil
    }

    /// Makes a new entry's `compression` (set once, before the registry is used).
    var compressionFor: (([UInt8]) -> NamespaceCompression?)?

    private func newEntry(_ name: [UInt8]) -> Entry {
        Entry(diskID: nil, generation: 0, tag: takeTag(), counters: NamespaceCounters(), compression: compressionFor?(name))
    }

    private let lock = Lock()
    /// Bumped (under the lock) by every change of an entry's tag, generation or presence: a
    /// caller holding an entry from `lookup` may keep using it while this has not moved
    /// (`NamespaceMemo`).
    let changes = Atomic<UInt64>(0)
    private var byName: [ByteKey: Entry] = [:]  // bulk-hashed names
    private var liveTags: Set<UInt32> = []
    private var nextTag: UInt32 = 1
    private var diskNames: [Int64: [UInt8]] = [:]

    func lookup(_ name: [UInt8]) -> Entry? { lock.withLock { byName[ByteKey(name)] } }

    /// The entry for `name`, created (memory-only, generation 0) when missing.
    func entry(_ name: [UInt8]) -> Entry {
        lock.withLock {
            if let e = byName[ByteKey(name)] { return e }
            let e = newEntry(name)
            byName[ByteKey(name)] = e
            changed()
            return e
        }
    }

    /// Called with the lock held after any change of `byName`.
    private func changed() { changes.add(1, ordering: .releasing) }

    private func takeTag() -> UInt32 {
        let t = nextTag
        nextTag &+= 1
        if nextTag == 0 { nextTag = 1 }
        liveTags.insert(t)
        return t
    }

    /// Records what the database holds for a namespace (at open, or once created on disk).
    func setDisk(name: [UInt8], id: Int64, generation: Int64) {
        lock.withLock {
            var e = byName[ByteKey(name)] ?? newEntry(name)
            e.diskID = id
            e.generation = generation
            byName[ByteKey(name)] = e
            diskNames[id] = name
            changed()
        }
    }

    /// A new generation and (with `newTag`) memory tag for `name` (flush). Returns the new
    /// entry, or nil for a name the registry does not know (it holds nothing: there is nothing
    /// to flush, and no entry is created for it). The disk tier's flush keeps the tag (memory
    /// is flushed on its own, so a flush of the disk tier alone leaves memory copies).
    @discardableResult
    func bump(_ name: [UInt8], generation: Int64?, newTag: Bool = true) -> Entry? {
        lock.withLock {
            guard var e = byName[ByteKey(name)] else { return nil }
            if newTag {
                liveTags.remove(e.tag)
                e.tag = takeTag()
            }
            if let g = generation { e.generation = g }
            byName[ByteKey(name)] = e
            changed()
            return e
        }
    }

    /// A new memory tag for every namespace: every memory record stops matching at once.
    func bumpAllTags() {
        lock.withLock {
            for (k, var e) in byName {
                liveTags.remove(e.tag)
                e.tag = takeTag()
                byName[k] = e
            }
            changed()
        }
    }
    /// Namespaces known (for tests and stats).
    var count: Int { lock.withLock { byName.count } }

    func allNames() -> [[UInt8]] { lock.withLock { byName.keys.map(\.bytes) } }

    func isLiveTag(_ tag: UInt32) -> Bool { lock.withLock { liveTags.contains(tag) } }
    func liveTagSet() -> Set<UInt32> { lock.withLock { liveTags } }

    /// The current generation of a disk namespace id (nil when unknown).
    func generation(ofDiskID id: Int64) -> Int64? {
        lock.withLock { diskNames[id].flatMap { byName[ByteKey($0)]?.generation } }
    }

    /// The name of a disk namespace id (nil when unknown).
    func name(ofDiskID id: Int64) -> [UInt8]? { lock.withLock { diskNames[id] } }

    /// Forgets disk ids (after the database was replaced); memory tags stay valid.
    func forgetDisk() {
        lock.withLock {
            for (k, var e) in byName { e.diskID = nil; e.generation = 0; byName[k] = e }
            diskNames.removeAll()
            changed()
        }
    }

    func snapshot() -> [([UInt8], Entry)] { lock.withLock { byName.map { ($0.key.bytes, $0.value) } } }
}
