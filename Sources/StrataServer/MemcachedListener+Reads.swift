import StrataCore
import StrataStore
import StrataWire

// The memcached listener's reads: get/gets answered in place on the event loop (from the memory
// tier, or from the disk tier while its files are in the page cache), and the full way on a
// worker (`retrieve`, which repairs keys the node may hold old copies of first).
extension MemcachedListener {
    /// A get/gets answered from the memory tier, on the loop: each value copied once, from
    /// the memory record into `out` (`TieredCache.withMemoryHit`), no `CacheItem`. All or
    /// nothing: when every key is a live item in memory, appends the whole answer (or the
    /// error of an answer over `maxGetAnswer`), counts it and returns true; otherwise appends
    /// and counts nothing and returns false — the caller runs the command the full way, so
    /// the bound is on the whole answer and every key is counted once. `memo` is the
    /// connection's.
    func memoryGet(_ keys: [[UInt8]], cas: Bool, memo: inout NamespaceMemo, into out: inout [UInt8]) -> Bool {
        let now = store.clock.nowMicros()
        let start = out.count
        for k in keys {
            guard k.withUnsafeBytes({ appendMemoryHit(key: $0, cas: cas, now: now, memo: &memo, countHit: false, into: &out) }) else {
                out.removeLast(out.count - start)
                return false
            }
            if out.count - start > maxGetAnswer {
                commands[cas ? 1 : 0].add()
                getTooLarge(from: start, into: &out)
                return true
            }
        }
        store.countMemoryHits(keys, memo: memo)
        getHits.add(keys.count)
        commands[cas ? 1 : 0].add()
        out.append(contentsOf: MemcachedResponse.end)
        return true
    }

    /// `memoryGet` for one key read in place from the connection's input (the single-key
    /// `get`/`gets` line `MemcachedParser.singleGet` found): no key array, no parsed command.
    func memoryGet(key: UnsafeRawBufferPointer, cas: Bool, memo: inout NamespaceMemo, into out: inout [UInt8]) -> Bool {
        guard appendMemoryHit(key: key, cas: cas, now: store.clock.nowMicros(), memo: &memo, into: &out) else { return false }
        commands[cas ? 1 : 0].add()
        getHits.add(1)
        out.append(contentsOf: MemcachedResponse.end)
        return true
    }

    /// A one-key get/gets that missed memory, read from the disk tier on the caller's event
    /// loop (`InlineDiskRead`: only while `TieredCache.diskReadsMayRunInline`, the files being in
    /// the page cache): appends the whole answer, counts it and returns true. False when the
    /// read bailed (a stored value over 64 KiB, a database being replaced) or failed: nothing
    /// was appended or counted, and the caller runs the command the full way on a worker.
    func diskGetOnLoop(_ key: [UInt8], cas: Bool, into out: inout [UInt8]) -> Bool {
        if readsMayNeedRepair { return false }
        // A key whose write the limits removed is read from its replicas on a worker (`retrieve`).
        if dispatcher.cluster != nil && remembersEviction(key) { return false }
        InlineDiskRead.begin()
        let item: CacheItem?
        do {
            item = try store.get(key, namespace: namespace, tiers: tiers)
        } catch {
            _ = InlineDiskRead.end()
            return false
        }
        if InlineDiskRead.end() { return false }
        commands[cas ? 1 : 0].add()
        if let item, !item.negative {
            getHits.add()
            MemcachedResponse.value(key: key, flags: item.flags, data: item.value, cas: cas ? item.version : nil, into: &out)
        } else {
            getMisses.add()
        }
        out.append(contentsOf: MemcachedResponse.end)
        return true
    }

    /// Appends the `VALUE` line and data of `key` when it is a live item in memory; otherwise
    /// appends nothing and returns false.
    private func appendMemoryHit(key kb: UnsafeRawBufferPointer, cas: Bool, now: Int64, memo: inout NamespaceMemo,
                                 countHit: Bool = true, into out: inout [UInt8]) -> Bool {
        if readsMayNeedRepair { return false } // a worker repairs and answers it (`retrieve`)
        var live = false
        let found = namespace.withUnsafeBytes { ns in
            store.withMemoryHit(namespace: ns, key: kb, now: now, memo: &memo, countHit: countHit) { v in
                guard !v.negative else { return }
                live = true
                MemcachedResponse.value(key: kb, flags: v.flags, data: v.value, cas: cas ? v.version : nil, into: &out)
            }
        }
        return found && live
    }

    /// Replaces what a get appended from `start` with its error line.
    func getTooLarge(from start: Int, into out: inout [UInt8]) {
        out.removeLast(out.count - start)
        error("SERVER_ERROR the answer would be over \(maxGetAnswer) bytes (--max-item + 64 KiB): ask for fewer keys", into: &out)
    }

    func retrieve(_ keys: [[UInt8]], cas: Bool, touch: Expiry?, into out: inout [UInt8]) throws {
        let start = out.count
        for k in keys {
            if out.count - start > maxGetAnswer { return getTooLarge(from: start, into: &out) }
            guard repaired(k) else {
                if touch == nil { getMisses.add() }
                continue
            }
            if touch != nil {
                if let v = try store.touchVersioned(k, namespace: namespace, expiry: touch!, tiers: tiers), v > 0 {
                    touchHits.add()
                    touched(k)
                } else { touchMisses.add() }
            }
            // gat/gats keys count under touch only (above), as memcached counts them.
            if let item = try store.get(k, namespace: namespace, tiers: tiers), !item.negative {
                if touch == nil { getHits.add() }
                MemcachedResponse.value(key: k, flags: item.flags, data: item.value, cas: cas ? item.version : nil, into: &out)
            } else if touch == nil {
                getMisses.add()
            }
        }
        if out.count - start > maxGetAnswer { return getTooLarge(from: start, into: &out) }
        out.append(contentsOf: MemcachedResponse.end)
    }
}
