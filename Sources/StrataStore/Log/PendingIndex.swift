import StrataCore
import Synchronization

/// The writes in the durability log that SQLite has not absorbed yet, by item: what a read
/// must see before it asks SQLite (extstore's in-RAM index of what is not on flash yet).
///
/// An entry is added when a write is decided (before its record reaches the file, so the next
/// write of the key decides against it); `settle` drops the entry's undo information once the
/// record is in the file, `rollBack` restores the entry it replaced if the write failed, and
/// `removeApplied` drops it once SQLite holds it (after the commit, so a reader that finds no
/// entry finds the row).
///
/// Guarantees: at most one entry per item — the newest decided write. Cost: one dictionary
/// entry per item with unapplied writes, holding the item's value; 64 shards, one lock each.
final class PendingIndex: @unchecked Sendable {
    /// The newest unapplied write of one item.
    final class Entry: @unchecked Sendable {
        /// Its record's position (changed only under the shard's lock, by `move`).
        var position: UInt64
        /// The item as the write left it; nil when the write removed the row.
        let state: ItemState?
        /// How the disk tier will store the value, and its stored size (for META).
        let encoding: ValueEncoding
        let storedSize: Int
        /// The entry this one replaced, until this one's record is in the file.
        var previous: Entry?
        /// When the item was last read or written (µs): the disk tier's LRU time once applied.
        let accessed: Atomic<Int64>

        init(position: UInt64, state: ItemState?, encoding: ValueEncoding, storedSize: Int, at: Int64) {
            self.position = position; self.state = state; self.encoding = encoding; self.storedSize = storedSize
            accessed = Atomic(at)
        }
    }

    private final class Shard: @unchecked Sendable {
        let lock = Lock()
        var map: [ItemKey: Entry] = [:]
    }

    private let shards: [Shard] = (0..<64).map { _ in Shard() }
    private let entries = Atomic<Int>(0)
    private let valueBytes = Atomic<Int>(0)
    private let rowEntries = Atomic<Int>(0)

    private func shard(_ id: ItemKey) -> Shard { shards[Int(UInt(bitPattern: id.hashValue) % 64)] }

    /// Entries held (items with unapplied writes), and the value bytes they hold.
    var count: Int { entries.load(ordering: .relaxed) }
    /// Entries that will be a row in SQLite (a put, a tombstone), not a removal.
    var rows: Int { rowEntries.load(ordering: .relaxed) }

    private func changed(from old: Entry?, to new: Entry?) {
        let d = (new == nil ? 0 : 1) - (old == nil ? 0 : 1)
        if d != 0 { entries.add(d, ordering: .relaxed) }
        let r = (new?.state == nil ? 0 : 1) - (old?.state == nil ? 0 : 1)
        if r != 0 { rowEntries.add(r, ordering: .relaxed) }
        valueBytes.add((new?.state?.value.count ?? 0) - (old?.state?.value.count ?? 0), ordering: .relaxed)
    }
    var bytes: Int { valueBytes.load(ordering: .relaxed) }
    /// Entries the shards' tables have room for (tests).
    var capacity: Int { shards.reduce(0) { total, s in total + s.lock.withLock { s.map.capacity } } }

    /// The newest unapplied write of `id`, if any. With `accessedAt`, a read: the item's LRU
    /// time moves there.
    func lookup(_ id: ItemKey, accessedAt now: Int64? = nil) -> Entry? {
        guard entries.load(ordering: .relaxed) > 0 else { return nil }
        let s = shard(id)
        let e = s.lock.withLock { s.map[id] }
        if let e, let now { e.accessed.store(now, ordering: .relaxed) }
        return e
    }

    /// Records a decided write (the caller holds the item's write lock).
    func put(_ id: ItemKey, _ entry: Entry) {
        let s = shard(id)
        let replaced: Entry? = s.lock.withLock {
            let old = s.map[id]
            entry.previous = old
            s.map[id] = entry
            return old
        }
        changed(from: replaced, to: entry)
    }

    /// The write at `position` reached the file: nothing will roll it back.
    func settle(_ id: ItemKey, position: UInt64) {
        let s = shard(id)
        s.lock.withLock { if let e = s.map[id], e.position == position { e.previous = nil } }
    }

    /// The write at `position` did not reach the file: the entry it replaced comes back. When
    /// a newer write of the item stays in force (a write-behind write kept by a failed batch),
    /// the undone entry only leaves the chain under it.
    func rollBack(_ id: ItemKey, position: UInt64) {
        let s = shard(id)
        let change: (removed: Entry, restored: Entry?)? = s.lock.withLock {
            guard let e = s.map[id] else { return nil }
            guard e.position == position else {
                var p = e
                while let q = p.previous {
                    if q.position == position { p.previous = q.previous; break }
                    p = q
                }
                return nil
            }
            s.map[id] = e.previous
            return (e, e.previous)
        }
        guard let c = change else { return }
        changed(from: c.removed, to: c.restored)
    }

    /// A kept write's record was appended again at `to`: its entry stays in force, at the new
    /// position (never absent meanwhile, so no reader falls through to an older row).
    func move(_ id: ItemKey, from: UInt64, to: UInt64) {
        let s = shard(id)
        s.lock.withLock {
            var e = s.map[id]
            while let x = e {
                if x.position == from { x.position = to; return }
                e = x.previous
            }
        }
    }

    /// SQLite now holds every record before log position `end`: the entry goes unless a newer
    /// write (a record starting at or after `end`) replaced it.
    func removeApplied(_ id: ItemKey, upTo end: UInt64) {
        let s = shard(id)
        let removed: Entry? = s.lock.withLock {
            guard let e = s.map[id], e.position < end else { return nil }
            s.map[id] = nil
            // A burst's table is given back once it drained (a dictionary never shrinks: the
            // applier's second-long backlogs left ~2 MiB of empty tables at a million items).
            if s.map.isEmpty && s.map.capacity > 1024 { s.map = [:] }
            return e
        }
        guard let r = removed else { return }
        changed(from: r, to: nil)
    }

    /// Every item of `namespace` with an unapplied write: the key and whether it is live at
    /// `now` (a removed row, a tombstone, an expired item or one older than `oldestVersion` is
    /// not). O(entries).
    func keys(namespace: [UInt8], now: Int64, oldestVersion: UInt64 = 0) -> [(key: [UInt8], live: Bool)] {
        guard entries.load(ordering: .relaxed) > 0 else { return [] }
        var out: [(key: [UInt8], live: Bool)] = []
        for s in shards {
            s.lock.withLock {
                for (id, e) in s.map where id.namespace == namespace {
                    out.append((id.key, e.state?.isLive(now: now, oldestVersion: oldestVersion) ?? false))
                }
            }
        }
        return out
    }
}

extension PendingIndex {
    /// Every entry, one shard at a time (each shard's lock held while it is copied). O(entries).
    func snapshot() -> [(ItemKey, Entry)] {
        guard entries.load(ordering: .relaxed) > 0 else { return [] }
        var out: [(ItemKey, Entry)] = []
        for s in shards { s.lock.withLock { for (k, e) in s.map { out.append((k, e)) } } }
        return out
    }
}
