#if canImport(Glibc)
import Glibc
#endif
import StrataCore

// MemoryShard's sweeps and checks (the caller holds the shard's lock, as for every call).
// Records, allocation, the index and the queues are in MemoryShard.swift; the eviction policy
// in MemoryShard+Policy.swift.
extension MemoryShard {
    /// Removes expired items (and, with `maxAgeMicros`, items written too long ago), items of
    /// namespaces flushed since (`isLiveTag` false) and, with an age limit, items not used
    /// for longer (evictions), looking at up to `budget` index slots from `cursor`. Returns the
    /// next cursor (0 after a full pass).
    func sweep(from cursor: Int, budget: Int, now: Int64, isLiveTag: (UInt32) -> Bool) -> Int {
        var i = cursor
        var looked = 0
        let nowSeconds = now / 1_000_000
        while i < indexCapacity && looked < budget {
            let r = index[i]
            if r != 0 {
                let p = ptr(r)
                if isExpired(p, now: now) {
                    expirations += 1
                    remove(ref: r, slot: i)
                    looked += 1
                    continue // the backward shift may have moved another record into slot i
                } else if !isLiveTag(recordTag(p)) {
                    remove(ref: r, slot: i)
                    looked += 1
                    continue
                } else if ageLimitSeconds > 0 && idleSeconds(p, nowSeconds: nowSeconds) > ageLimitSeconds {
                    evictions += 1
                    remove(ref: r, slot: i)
                    looked += 1
                    continue
                }
            }
            i += 1
            looked += 1
        }
        return i >= indexCapacity ? 0 : i
    }

    /// Calls `body` with each record: the main queue, then the small queue, newest first.
    func forEachRecord(_ body: (UnsafeMutableRawPointer) -> Void) {
        for head in [queueHead.1, queueHead.0] {
            var r = head
            while r != 0 { body(ptr(r)); r = next(r) }
        }
    }

    #if DEBUG
    /// Checks the index, the two queues and the accounting agree. Debug builds only.
    func checkInvariants() -> String? {
        var n = 0
        var bytes = 0
        for (queue, head, tail) in [(0, queueHead.0, queueTail.0), (1, queueHead.1, queueTail.1)] {
            var r = head
            var last: UInt32 = 0
            var qn = 0, qbytes = 0
            while r != 0 {
                if prev(r) != last { return "broken prev link" }
                if (policyBits(r) & Self.policyMain != 0) != (queue == 1) { return "record in the wrong queue" }
                qn += 1
                qbytes += chunkSize(r)
                if index[slotOf(r)] != r { return "record missing from index" }
                last = r
                r = next(r)
                if n + qn > count { return "queues longer than count" }
            }
            if last != tail { return "tail mismatch in queue \(queue)" }
            if queue == 0 && (qn != smallCount || qbytes != smallBytes) {
                return "small queue holds \(qn) records, \(qbytes) B; counted \(smallCount), \(smallBytes) B"
            }
            n += qn
            bytes += qbytes
        }
        if n != count { return "count \(count) but the queues hold \(n)" }
        if bytes != usedBytes { return "usedBytes \(usedBytes) but records sum to \(bytes)" }
        var indexed = 0
        for i in 0..<indexCapacity where index[i] != 0 { indexed += 1 }
        if indexed != count { return "index holds \(indexed) but count is \(count)" }
        return nil
    }
    #endif
}

extension MemoryShard {
    /// Stores `item` unless the shard holds a newer version of the key.
    func putIfNotOlder(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, item: ItemState, now: Int64,
                       compressed: [UInt8]? = nil) {
        if let cur = peek(tag: tag, key: key, hash: hash, now: now, withValue: false), cur.state.version > item.version { return }
        // An item the shard cannot hold (over its share of the limit) must not leave the older
        // copy behind: the write went to disk, and reads would go on finding the old value here
        // (an outside review, dur16: an overwrite larger than 1/16 of --memory-limit).
        if !put(tag: tag, key: key, hash: hash, item: item, now: now, compressed: compressed) {
            delete(tag: tag, key: key, hash: hash)
        }
    }

    /// Removes the key unless the shard holds a version newer than `version`.
    func deleteIfNotNewer(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, version: UInt64, now: Int64) {
        if let cur = peek(tag: tag, key: key, hash: hash, now: now, withValue: false), cur.state.version > version { return }
        delete(tag: tag, key: key, hash: hash)
    }
}
