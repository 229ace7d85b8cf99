// MemoryShard's eviction policy: S3-FIFO (Yang et al., "FIFO queues are all you need for cache
// eviction", SOSP '23) with the small queue's share adapted by ARC's rule (Megiddo & Modha,
// FAST '03) — `strata-bench`'s SharedGhostAdaptiveS3FIFOSimulator. The caller holds the
// shard's lock, as for every call.
//
// - Two FIFO queues threaded through the records' prev/next links: small (S) and main (M).
//   `oPolicy` bit 2 says which. S's share of the shard's bytes (and of its count limit)
//   starts at 10 % and moves within 1–90 % (`smallTarget`).
// - A hit only increments the record's 2-bit counter (capped at 3): no relinking.
// - A new key enters S, or M when the ghost queue G remembers it (the ghost entry is dropped).
//   A G hit of a key S evicted grows S's share by 2 × its size × max(1, G's entries from M /
//   G's entries from S): new keys were not given time to prove themselves. One of a key M
//   evicted shrinks it the same way (the counts swapped): M's keys were worth keeping. On a
//   trace whose hot set moves this took S3-FIFO from 2.6 points below LRU to 0.4 (RESULTS.md).
// - Evicting from S: its oldest record moves to M (counter cleared) if it was hit while in S,
//   and M evicts while over its share; else it is evicted and its hash goes to G.
// - Evicting from M: its oldest record is reinserted at M's head with counter − 1 while the
//   counter is non-zero; else it is evicted and its hash goes to G (marked as M's).
// - S is evicted from while it holds ≥ its share (or M is empty), else M.
// - G keeps live entries up to 90 % of the items the shard holds at its limits: its byte limit
//   over the mean record size, and 90 % of its count limit. G's arrays count toward the byte
//   limit (`memoryBytes`): records are evicted while records + G + the new record exceed it.
//   Adapting costs no memory per entry (a bit of the stored hash) and nothing on a hit.
extension MemoryShard {
    static let policyFreqMask: UInt8 = 3
    static let policyMain: UInt8 = 4
    /// Not the policy's: the record's value is a zstd frame (`MemoryCompression`). Every
    /// change of the policy bits keeps it.
    static let policyCompressed: UInt8 = 8

    /// Whether the shard's limit that the small queue's share is kept in is its byte limit
    /// (else its count limit).
    var byteLimited: Bool { costLimit < Int.max / 16 }

    /// The small queue's share of the byte and count limits (`smallTarget` is in the units of
    /// the limit that binds: bytes, else items; the other limit's share follows in proportion).
    var smallCostShare: Double { byteLimited ? smallTarget : Double(costLimit) / 10 }
    var smallCountShare: Double {
        if !byteLimited { return smallTarget }
        return Double(countLimit) * (countLimit >= Int.max / 16 ? 0.1 : smallTarget / Double(costLimit))
    }

    /// The small queue's share at the start: 10 % of the binding limit.
    static func initialSmallTarget(countLimit: Int, costLimit: Int) -> Double {
        Double(costLimit < Int.max / 16 ? costLimit : countLimit) / 10
    }

    /// A ghost hit: a key evicted from the small queue (`fromMain` false) grows the small
    /// queue's share, one evicted from main shrinks it, by 2 × the record's size (its chunk,
    /// or one item under a count limit) × the other kind's ghost entries over this kind's (at
    /// least 1), within 1–90 % of the limit. Called after the hit entry left the ghost: it
    /// still counts, as in ARC.
    func adaptSmallShare(fromMain: Bool, chunk: Int) {
        let unit = byteLimited ? Double(chunk) : 1
        let limit = Double(byteLimited ? costLimit : countLimit)
        let this = Double((fromMain ? ghost.fromMain : ghost.fromSmall) + 1)
        let other = Double(fromMain ? ghost.fromSmall : ghost.fromMain)
        let step = 2 * unit * max(1, other / this)
        smallTarget = fromMain ? max(limit / 100, smallTarget - step) : min(limit * 9 / 10, smallTarget + step)
    }

    /// Evicts (S3-FIFO) until one more item of `chunk` bytes fits (beside the ghost queue), then, with an age limit,
    /// drops records not used for longer from the tails of both queues (the sweeper finds
    /// idle records deeper in the queues).
    func evict(toFit chunk: Int, now: Int64) {
        while count > 0 && (count + 1 > countLimit || memoryBytes + chunk > costLimit) { evictOne() }
        if ageLimitSeconds > 0 {
            let nowSeconds = now / 1_000_000
            for main in [false, true] {
                while true {
                    let t = main ? queueTail.1 : queueTail.0
                    guard t != 0, idleSeconds(ptr(t), nowSeconds: nowSeconds) > ageLimitSeconds else { break }
                    evictions += 1
                    remove(ref: t, slot: slotOf(t))
                }
            }
        }
    }

    /// Evicts (S3-FIFO) until at most `count` items and `bytes` bytes (records and ghost) remain.
    func trim(toCount: Int, toBytes: Int) {
        while count > 0 && (count > toCount || memoryBytes > toBytes) { evictOne() }
    }

    /// One eviction step of S3-FIFO: from the small queue while it holds its share, else from
    /// the main queue. Removes at most one record from the small queue; removes one from the
    /// main queue unless the small queue's records all moved to main without overfilling it.
    func evictOne() {
        let mainCount = count - smallCount
        if smallCount > 0 && (Double(smallBytes) >= smallCostShare || Double(smallCount) >= smallCountShare || mainCount == 0) {
            evictSmall()
        } else {
            evictMain()
        }
    }

    private var mainOverShare: Bool {
        let mainCount = count - smallCount
        return mainCount > 1 && (Double(usedBytes - smallBytes) > Double(costLimit) - smallCostShare
            || Double(mainCount) > Double(countLimit) - smallCountShare)
    }

    private func evictSmall() {
        while queueTail.0 != 0 {
            let t = queueTail.0
            if policyBits(t) & Self.policyFreqMask != 0 {
                unlink(t)
                setPolicyBits(t, policyBits(t) & Self.policyCompressed | Self.policyMain)
                linkAtHead(t)
                while mainOverShare { evictMain() }
            } else {
                let hash = u32(ptr(t), Self.oHash)
                let chunk = chunkSize(t)
                evictions += 1
                remove(ref: t, slot: slotOf(t))
                ghost.add(hash, limit: ghostLimit(evictedChunk: chunk))
                return
            }
        }
    }

    private func evictMain() {
        while queueTail.1 != 0 {
            let t = queueTail.1
            let bits = policyBits(t)
            if bits & Self.policyFreqMask != 0 {
                setPolicyBits(t, bits - 1)
                if queueHead.1 != t { unlink(t); linkAtHead(t) }
            } else {
                let hash = u32(ptr(t), Self.oHash)
                let chunk = chunkSize(t)
                evictions += 1
                remove(ref: t, slot: slotOf(t))
                ghost.add(hash, fromMain: true, limit: ghostLimit(evictedChunk: chunk))
                return
            }
        }
    }

    /// Live ghost entries allowed: 90 % of the items the shard holds at its limits (its byte
    /// limit over the mean record size now, and its count limit), and never more than the
    /// larger of the items held now and 4096 (so a trim of an unlimited shard stays bounded).
    func ghostLimit(evictedChunk: Int) -> Int {
        var limit = countLimit >= Int.max / 16 ? Int.max : countLimit * 9 / 10
        if costLimit < Int.max / 16 {
            let mean = count > 0 ? max(1, usedBytes / count) : max(1, evictedChunk)
            limit = min(limit, costLimit * 9 / 10 / mean)
        }
        return min(limit, max(count, 4096))
    }
}

extension MemoryShard {
    /// The queue holding the key: 0 = small, 1 = main, nil = not held (for tests and checks).
    func queue(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32) -> Int? {
        let r = find(tag: tag, key: key, hash: hash).ref
        return r == 0 ? nil : (policyBits(r) & Self.policyMain != 0 ? 1 : 0)
    }
}
