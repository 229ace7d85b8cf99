/// S3-FIFO's ghost queue for one `MemoryShard`: the 32-bit index hashes of keys recently
/// evicted, oldest first, with O(1) membership, each marked with the queue it left (the low
/// bit: 1 = main), so the shard can adapt its small queue's share (ARC's rule; see
/// MemoryShard+Policy.swift). No data, no keys: entries match on the hash's other 31 bits, and
/// a collision only admits an unrelated key straight to the main queue (and nudges the share).
///
/// A ring of hashes keeps the FIFO order; an open-addressing table of ring positions
/// (linear probing, backward-shift deletion, load ≤ 3/4) answers "is this hash there". A
/// ghost hit removes the entry from the table only; its ring slot is dead and is skipped
/// when it reaches the front, so (as in the S3-FIFO simulator) only live entries count
/// toward the limit. A full ring is compacted, or doubled when more than 3/4 of it is live.
///
/// Memory: 4 B per ring slot + 4 B per table slot, both powers of two — 11–22 B per live
/// entry (`memoryBytes`). Counted in the shard's `memoryBytes`, which its byte limit holds
/// (records are evicted to make room for the ghost's arrays, and reported in `memory_bytes`).
///
/// Not thread-safe: used under the shard's lock.
final class GhostQueue {
    private var ring: [UInt32] = []
    private var first = 0
    /// Entries in the ring, live and dead.
    private var length = 0
    /// Ring position + 1 of each live entry; 0 = empty slot.
    private var table: [UInt32] = []
    /// Live entries.
    private(set) var count = 0
    /// Live entries of keys evicted from the main queue (the rest left the small queue).
    private(set) var fromMain = 0
    var fromSmall: Int { count - fromMain }

    /// What the ring holds for a hash: its 31 high bits and the queue it left.
    @inline(__always) private static func entry(_ hash: UInt32, fromMain: Bool) -> UInt32 { hash & ~1 | (fromMain ? 1 : 0) }
    /// Where an entry's (or a hash's) probe starts and what it is matched on.
    @inline(__always) private static func match(_ v: UInt32) -> UInt32 { v & ~1 }

    /// Bytes held by the ring and the table.
    var memoryBytes: Int { (ring.count + table.count) * 4 }

    func contains(_ hash: UInt32) -> Bool { slot(of: hash) != nil }

    /// Removes the key's entry (a ghost hit): nil when it was not there, else whether the key
    /// had left the main queue.
    @discardableResult
    func remove(_ hash: UInt32) -> Bool? {
        guard let s = slot(of: hash) else { return nil }
        let fromMain = ring[Int(table[s] - 1)] & 1 == 1
        removeSlot(s)
        return fromMain
    }

    /// Appends `hash` as the newest entry (a key evicted from the main queue when `fromMain`),
    /// then drops the oldest until at most `limit` are live.
    func add(_ hash: UInt32, fromMain: Bool = false, limit: Int) {
        guard limit > 0 else { return }
        if length == ring.count { rebuild() }
        let pos = (first + length) & (ring.count - 1)
        ring[pos] = Self.entry(hash, fromMain: fromMain)
        length += 1
        if (count + 1) * 4 > table.count * 3 { growTable() }
        insert(position: pos)
        while count > limit { popOldest() }
    }

    func removeAll() {
        ring = []; table = []
        first = 0; length = 0; count = 0; fromMain = 0
    }

    // MARK: Internals

    private func slot(of hash: UInt32) -> Int? {
        guard !table.isEmpty else { return nil }
        let m = table.count - 1
        let want = Self.match(hash)
        var i = Int(want) & m
        while true {
            let v = table[i]
            if v == 0 { return nil }
            if Self.match(ring[Int(v - 1)]) == want { return i }
            i = (i + 1) & m
        }
    }

    private func insert(position pos: Int) {
        let m = table.count - 1
        var i = Int(Self.match(ring[pos])) & m
        while table[i] != 0 { i = (i + 1) & m }
        table[i] = UInt32(pos + 1)
        count += 1
        fromMain += Int(ring[pos] & 1)
    }

    private func removeSlot(_ slot: Int) {
        let m = table.count - 1
        var i = slot, j = slot
        fromMain -= Int(ring[Int(table[i] - 1)] & 1)
        table[i] = 0
        count -= 1
        while true {
            j = (j + 1) & m
            let v = table[j]
            if v == 0 { return }
            let k = Int(Self.match(ring[Int(v - 1)])) & m
            let stays = i <= j ? (i < k && k <= j) : (i < k || k <= j)
            if stays { continue }
            table[i] = v
            table[j] = 0
            i = j
        }
    }

    /// The table slot of the entry at ring position `pos`, nil when it is dead.
    private func slot(ofPosition pos: Int) -> Int? {
        guard !table.isEmpty else { return nil }
        let m = table.count - 1
        var i = Int(Self.match(ring[pos])) & m
        while table[i] != 0 {
            if Int(table[i]) == pos + 1 { return i }
            i = (i + 1) & m
        }
        return nil
    }

    /// Drops the oldest ring entry, and its table slot if it is still live.
    private func popOldest() {
        if let s = slot(ofPosition: first) { removeSlot(s) }
        first = (first + 1) & (ring.count - 1)
        length -= 1
    }

    /// Copies the live entries, in order, to the front of a ring of the same size (or twice
    /// the size when more than 3/4 of it is live), and re-indexes them.
    private func rebuild() {
        var live: [UInt32] = []
        live.reserveCapacity(count)
        for n in 0..<length {
            let pos = (first + n) & (ring.count - 1)
            if slot(ofPosition: pos) != nil { live.append(ring[pos]) }
        }
        let size = ring.isEmpty ? 64 : (live.count * 4 > ring.count * 3 ? ring.count * 2 : ring.count)
        ring = [UInt32](repeating: 0, count: size)
        for (n, h) in live.enumerated() { ring[n] = h }
        first = 0
        length = live.count
        table = [UInt32](repeating: 0, count: max(table.count, 64))
        count = 0; fromMain = 0
        for n in 0..<length { insert(position: n) }
    }

    private func growTable() {
        let old = table
        table = [UInt32](repeating: 0, count: max(64, old.count * 2))
        count = 0; fromMain = 0
        for v in old where v != 0 { insert(position: Int(v - 1)) }
    }
}
