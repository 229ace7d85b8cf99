import StrataCore

/// The versions of the writes a disk limit removed lately — rows evicted by `--disk-limit` or
/// `--disk-count-limit`, live items trimmed by `--idle-age` — on a store whose replicas compare
/// versions (`StoreConfiguration.expiredItemsLeaveTombstones`, a `--cluster` node).
///
/// Without it an evicted newer write let a replica that missed it (down or paused when it was
/// made) copy its older value back once it returned (an outside review, cl20): the row that
/// would have refused the older copy was gone; and a replica whose limit was below its share
/// of the keys took every evicted item back from its peers, round after round, only to evict
/// it again (cl22: ~53 copies a second for good). The store refuses a versioned write older
/// than a remembered eviction (SUPERSEDED, as the row itself would have); the evicted write
/// itself may come back (a client bringing the key's owner up to date before it decides a
/// counter or a conditional write: refused, the owner decided them as if the key were absent —
/// cl24). Anti-entropy lists remembered evictions as entries when it compares keys (so a peer
/// holding the same write copies nothing either way), and it and hinted handoff tell a replica
/// holding an older copy to drop it (`deleteVersion`).
///
/// Bounded: the newest `capacity` evictions, at most `byteLimit` bytes of keys and namespaces;
/// the oldest are forgotten first. Held in memory only: a restart forgets them (the window is
/// then open again, for the writes evicted before it). Thread-safe; each call takes one lock
/// (the disk writer records, writers and anti-entropy look up). Costs ~100 B plus the key and
/// namespace per entry.
final class EvictedVersions: @unchecked Sendable {
    struct Entry: Equatable {
        /// The version of the write the limit removed.
        var version: UInt64
        /// It was a tombstone (a delete, or an expiry on a cluster node).
        var tombstone: Bool
        /// The version of the delete that makes a replica's older copy go, not a newer copy
        /// another replica holds: an evicted tombstone's own version; one below an evicted
        /// item's (a replica holding that very write keeps it — a tie goes to what is
        /// held — and so can copy it to the others).
        var deleteVersion: UInt64 { tombstone ? version : version - 1 }
    }

    let capacity: Int
    let byteLimit: Int
    private let lock = Lock()
    private var entries: [ItemKey: Entry] = [:]
    /// Recorded keys, oldest first, from `head` (a ring once full).
    private var order: [ItemKey] = []
    private var head = 0
    private var bytes = 0

    init(capacity: Int = 65_536, byteLimit: Int = 8 << 20) {
        self.capacity = capacity
        self.byteLimit = byteLimit
    }

    /// Remembers that the write of `version` to `id` was removed by a limit.
    func record(_ id: ItemKey, version: UInt64, tombstone: Bool) {
        guard version > 0 else { return }
        lock.withLock {
            if let e = entries[id] {
                if e.version < version { entries[id] = Entry(version: version, tombstone: tombstone) }
                return
            }
            let size = id.namespace.count + id.key.count
            while head < order.count && (entries.count >= capacity || bytes + size > byteLimit) { forgetOldest() }
            entries[id] = Entry(version: version, tombstone: tombstone)
            order.append(id)
            bytes += size
        }
    }

    /// The newest remembered eviction of `id`.
    func lookup(_ id: ItemKey) -> Entry? { lock.withLock { entries[id] } }

    /// Every remembered eviction `include` (namespace, key) takes. Costs a pass over them
    /// (at most `capacity`) under the lock.
    func entries(_ include: ([UInt8], [UInt8]) -> Bool) -> [(ItemKey, Entry)] {
        lock.withLock { entries.filter { include($0.key.namespace, $0.key.key) }.map { ($0.key, $0.value) } }
    }

    var count: Int { lock.withLock { entries.count } }

    private func forgetOldest() {
        let id = order[head]
        entries[id] = nil
        bytes -= id.namespace.count + id.key.count
        head += 1
        // Compact once half the array is spent, so the order costs O(1) amortised per entry.
        if head >= 1024 && head * 2 >= order.count {
            order.removeFirst(head)
            head = 0
        }
    }
}
