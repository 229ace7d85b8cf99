#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import StrataCore
import Synchronization

// TieredCache's writes: validation, the decision under the item's lock, the log append.
extension TieredCache {
    // MARK: Writes

    /// Stores `value` under `key` (see `SetOptions` for modes, expiry, tiers and versions).
    public func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], options: SetOptions = SetOptions()) throws -> SetOutcome {
        try check(key: key, namespace: namespace, value: value, options: options)
        let op = try setOp(value, options)
        let pre = options.tiers.contains(.disk) && !options.writeBehind ? disk.codec.encode(value) : nil
        guard case .set(let outcome) = try write(op, key: key, namespace: namespace, tiers: options.tiers,
                                                 writeBehind: options.writeBehind, callerVersion: options.version, preEncoded: pre)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return outcome
    }

    /// Removes `key`. With a `version`, leaves a tombstone (kept `tombstoneTTL`, or
    /// `tombstoneLifetime` seconds when given) so an older write arriving later is ignored; a
    /// version not newer than the stored one is ignored. A lifetime of 0 leaves one already
    /// expired — for a caller that refuses older writes itself (a flush mark's sweep).
    /// With `writeBehind`, returns before the removal's record is in the log (see `SetOptions`).
    public func remove(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil,
                       writeBehind: Bool = false, tombstoneLifetime: Double? = nil) throws -> RemoveOutcome {
        try checkVersionedWrite(key: key, namespace: namespace, tiers: tiers, version: version)
        let tombstoneExpiry = clock.nowMicros() + Int64((tombstoneLifetime ?? configuration.tombstoneTTL) * 1_000_000)
        guard case .remove(let o) = try write(.remove(callerVersion: version, tombstoneExpiry: max(1, tombstoneExpiry)),
                                              key: key, namespace: namespace, tiers: tiers, writeBehind: writeBehind,
                                              callerVersion: nil, preEncoded: nil)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return o
    }

    /// Marks the live item under `key` stale: it keeps being served (flagged stale) until a
    /// new write replaces it. Gets a new version, or `version` when given (a replica's copy of
    /// an invalidate: ignored when not newer than what is stored). A negative entry is removed
    /// and reported `.notFound`, as `remove` reports it.
    public func invalidate(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil) throws -> InvalidateOutcome {
        try checkVersionedWrite(key: key, namespace: namespace, tiers: tiers, version: version)
        guard case .invalidate(let o) = try write(.invalidate(callerVersion: version), key: key, namespace: namespace, tiers: tiers,
                                                  writeBehind: false, callerVersion: version, preEncoded: nil)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return o
    }

    /// Gives `key` a new expiry (and a new version). False when absent.
    @discardableResult
    public func touch(_ key: [UInt8], namespace: [UInt8] = [], expiry: Expiry, tiers: Tiers = .all) throws -> Bool {
        try touchVersioned(key, namespace: namespace, expiry: expiry, tiers: tiers) != nil
    }

    /// Like `touch`, returning the new version.
    public func touchVersioned(_ key: [UInt8], namespace: [UInt8] = [], expiry: Expiry, tiers: Tiers = .all) throws -> UInt64? {
        switch try touch(key, namespace: namespace, expiry: expiry, tiers: tiers, version: nil) {
        case .touched(let v): return v
        case .notFound, .superseded: return nil
        }
    }

    /// What a TOUCH did.
    public enum TouchOutcome: Equatable, Sendable {
        case touched(version: UInt64)
        case notFound
        /// The caller's version was not newer than the stored one: nothing changed.
        case superseded(current: UInt64)
    }

    /// TOUCH with the caller's version for the result (a cluster client's; nil: the node
    /// assigns one). A TOUCH that timed out on a paused node and runs late is then older than
    /// the writes made meanwhile, and changes nothing.
    public func touch(_ key: [UInt8], namespace: [UInt8] = [], expiry: Expiry, tiers: Tiers = .all, version: UInt64?) throws -> TouchOutcome {
        try checkVersionedWrite(key: key, namespace: namespace, tiers: tiers, version: version)
        let e = expiry.resolve(now: clock.nowMicros(), defaultTTL: configuration.defaultTTL)
        switch try write(.touch(expiry: e, callerVersion: version), key: key, namespace: namespace, tiers: tiers,
                         writeBehind: false, callerVersion: version, preEncoded: nil) {
        case .touch(let found, let v): return found ? .touched(version: v) : .notFound
        case .touchSuperseded(let current): return .superseded(current: current)
        default: throw StoreError(.io, "internal: unexpected result kind")
        }
    }

    /// Adds `delta` to a decimal counter (wrapping at 2^64, as memcached). When absent, stores
    /// `initial` if given (with `expiry`), else reports `.notFound`.
    /// `version`: the caller's version for the result (a cluster client's), else the node
    /// assigns one; not newer than the stored version → `.superseded`, nothing changed.
    public func increment(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault, version: UInt64? = nil) throws -> CounterOutcome {
        try counter(key, delta: delta, decrement: false, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry, version: version)
    }

    /// A counter's value as INCR/DECR read it (1–20 ASCII digits fitting 64 bits), or nil.
    public static func counterValue(_ bytes: [UInt8]) -> UInt64? { WriteRules.parseCounter(bytes) }

    /// A counter's next value as INCR/DECR make it (increments wrap at 2^64, decrements stop at 0).
    public static func counterNext(_ current: UInt64, delta: UInt64, decrement: Bool) -> UInt64 {
        WriteRules.nextCounter(current, delta: delta, decrement: decrement)
    }

    /// Subtracts `delta` from a decimal counter, stopping at 0 (memcached semantics).
    public func decrement(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault, version: UInt64? = nil) throws -> CounterOutcome {
        try counter(key, delta: delta, decrement: true, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry, version: version)
    }

    func counter(_ key: [UInt8], delta: UInt64, decrement: Bool, namespace: [UInt8], tiers: Tiers,
                         initial: UInt64?, expiry: Expiry, version: UInt64? = nil) throws -> CounterOutcome {
        if version != nil { try checkVersionedWrite(key: key, namespace: namespace, tiers: tiers, version: version) } else {
            try check(key: key, namespace: namespace)
            try check(tiers: tiers)
        }
        let e = expiry.resolve(now: clock.nowMicros(), defaultTTL: configuration.defaultTTL)
        guard case .counter(let o) = try write(.counter(delta: delta, decrement: decrement, initial: initial, expiry: e, callerVersion: version),
                                               key: key, namespace: namespace, tiers: tiers, writeBehind: false,
                                               callerVersion: version, preEncoded: nil)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return o
    }

    /// The registry's entry for a namespace a write names, made when new — unless the store
    /// already knows `maxNamespaces` (each costs ~0.5 KiB outside the memory limit: one tenant
    /// writing an item into each of 1,000,000 namespaces added ~500 MiB, an outside review).
    func namespaceEntry(_ namespace: [UInt8]) throws -> NamespaceRegistry.Entry {
        if let e = registry.lookup(namespace) { return e }
        guard registry.count < configuration.maxNamespaces else {
            throw StoreError(.tooManyNamespaces, "this node holds its limit of \(configuration.maxNamespaces) namespaces (--max-namespaces): a write to a new namespace is refused; nothing was stored")
        }
        return registry.entry(namespace)
    }

    /// Picks the state that decides a write: the newer of what memory and disk hold.
    static func newest(_ a: ItemState?, _ b: ItemState?) -> ItemState? {
        guard let a else { return b }
        guard let b else { return a }
        return a.version >= b.version ? a : b
    }

    /// Applies one write to the requested tiers through `WriteRules`. A write that includes the
    /// disk tier is decided against the newest state (memory, the log's pending writes, then
    /// SQLite), appended to the durability log, and returns once its record is in the log file
    /// (at once with `writeBehind`).
    func write(_ op: WriteOp, key: [UInt8], namespace: [UInt8], tiers: Tiers, writeBehind: Bool,
                       callerVersion: UInt64?, preEncoded: (ValueEncoding, [UInt8])?) throws -> WriteResult {
        // A write that can only change an existing item, in a namespace the store does not
        // know (nothing written since open, nothing on disk or in the log), finds nothing and
        // records nothing — no registry entry for a name that holds nothing (an attacker's
        // 200,000 deletes of made-up namespaces would otherwise each keep one).
        if registry.lookup(namespace) == nil && Self.onlyChangesExisting(op) {
            return WriteRules.decide(op, existing: nil, now: clock.nowMicros(), newVersion: 0).0
        }
        let ns = try namespaceEntry(namespace)
        ns.counters.writes.add(1, ordering: .relaxed)
        if case .set = op { ns.counters.sets.add(1, ordering: .relaxed) }
        let loc = memory.locate(tag: ns.tag, key: key)
        // Touch and counters rewrite the existing item, so they need its value; an unconditional
        // set with a node-assigned version stores whatever is there, so it needs nothing.
        let needs: ExistingNeed
        switch op {
        case .counter, .touch, .invalidate: needs = .value
        case .set(_, .set, _, _, _, nil, _): needs = .nothing
        case .set, .remove: needs = .metadata
        }

        if !tiers.contains(.disk) {
            memoryOnlyWrites.store(true, ordering: .relaxed)
            let needValue = needs == .value
            let now = clock.nowMicros()
            let hlc = self.hlc
            var held = true
            // A plain set's value is compressed before the shard's lock is taken; a value the
            // write derives from the item held (append, counters, touch) under it.
            var setValue: [UInt8]? = nil, setCompressed: [UInt8]? = nil
            if let c = ns.compression, case .set(let v, _, _, _, _, _, _) = op { setValue = v; setCompressed = c.encode(v) }
            let result = memory.with(loc, key) { shard, k in
                let existing = shard.peek(tag: ns.tag, key: k, hash: loc.hash, now: now, withValue: needValue)?.state
                let (result, effect) = WriteRules.decide(op, existing: existing, now: now, newVersion: callerVersion ?? hlc.next(),
                                                         oldestLive: maxAge.oldestVersion(now: now))
                switch effect {
                case .none: break
                case .delete: shard.delete(tag: ns.tag, key: k, hash: loc.hash)
                case .store(let s):
                    let compressed = setValue.map { $0 == s.value } == true ? setCompressed : ns.compression?.encode(s.value)
                    held = shard.put(tag: ns.tag, key: k, hash: loc.hash, item: s, now: now, compressed: compressed)
                }
                return result
            }
            // A memory-only write the memory tier cannot hold is refused, not acknowledged and
            // lost (an item over a shard's share of the limit; no memory tier at all).
            guard held else {
                throw StoreError(.valueTooLarge, memory.maxRecordBytes == 0
                    ? "the memory tier holds nothing (--memory-limit 0): a write to the memory tier alone cannot be stored; nothing was stored"
                    : "the memory tier holds items of at most \(memory.maxRecordBytes) bytes (1/\(memory.shards.count) of the memory limit, --memory-limit or memoryCostLimit; a record is the key, value and a ~30-byte header, rounded up to a size class): this write to the memory tier alone was not stored")
            }
            return result
        }

        // Write-behind is bounded: past `maxWriteBehindPending` writes or `maxWriteBehindBytes`
        // bytes not yet in the log file, a write-behind write waits like any other
        // (backpressure instead of unbounded memory).
        let cost = writeBehind ? WriteBehindBudget.cost(op, key: key, namespace: namespace) : 0
        let behind = writeBehind && writeBehindPending.load() < configuration.maxWriteBehindPending
            && writeBehindBudget.tryReserve(cost)
        // A writer that waits flushes the batch itself (with everyone else's records); a
        // write-behind writer leaves its record to the log's flusher.
        let decided: (WriteResult, UInt64?)
        do {
            decided = try decideAndLog(op, key: key, namespace: namespace, ns: ns, loc: loc, tiers: tiers, needs: needs,
                                       callerVersion: callerVersion, preEncoded: preEncoded, flushedByCaller: !behind, answered: behind)
        } catch {
            if behind { writeBehindBudget.release(cost) }
            throw error
        }
        let (result, end) = decided
        guard let end else {
            if behind { writeBehindBudget.release(cost) }
            return result
        }
        if behind {
            writeBehindPending.add(1)
            writeBehindWrites.add(1)
            let pending = writeBehindPending, budget = writeBehindBudget
            log.onDurable(end) { _ in pending.add(-1); budget.release(cost) }
            return result
        }
        try log.waitDurable(end)
        return result
    }


    /// Decides a disk write and appends its record to the log; returns the result and the log
    /// position the write is durable at (nil when nothing changed). Memory follows the
    /// decision at once. May read SQLite (a write that depends on the stored item, when neither
    /// memory nor the log's pending writes hold it). `answered`: the caller answers before the
    /// record is written (write-behind), so a failed write of it is retried, never undone.
    func decideAndLog(_ op: WriteOp, key: [UInt8], namespace: [UInt8], ns: NamespaceRegistry.Entry,
                              loc: MemoryTier.Location, tiers: Tiers, needs: ExistingNeed, callerVersion: UInt64?,
                              preEncoded: (ValueEncoding, [UInt8])?, flushedByCaller: Bool,
                              answered: Bool = false) throws -> (WriteResult, UInt64?) {
        // (Only while the disk is still short: once space is back the write goes on and its
        // batch, with the kept records, is the next try — refusing it until the retry came cost
        // writes DISK_FULL with room on the disk, an outside review, dur12.)
        if !answered && log.failingWithKeptRecords && floor.isBelowNow {
            throw StoreError(.diskFull, "disk full while writing (\(configuration.directory)): the durability log cannot be written and is retrying write-behind writes; nothing was changed")
        }
        var incoming = 0
        if case .set(let value, _, _, let extended, _, _, _) = op { incoming = (preEncoded?.1.count ?? value.count) + extended.count }
        let promise = log.waitForRoom(bytes: incoming)
        defer { log.release(promise) }
        let id = ItemKey(namespace: namespace, key: key)
        let lock = writeLocks[Int(loc.hash & 255)]
        lock.lock()
        defer { lock.unlock() }
        let memoryToo = tiers.contains(.memory)
        let needValue = needs == .value
        var existing: ItemState? = nil
        if needs != .nothing {
            let now = clock.nowMicros()
            let mem: ItemState? = memoryToo
                ? memory.with(loc, key) { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: needValue)?.state }
                : nil
            let onDisk: ItemState?
            if let p = log.index.lookup(id) { onDisk = p.state } else {
                onDisk = try disk.read(namespace: namespace, key: key, withValue: needValue, countStats: false)?.state
            }
            existing = Self.newest(mem, onDisk)
            // A copy of a write older than one a disk limit removed here is refused as the row
            // would have refused it (`EvictedVersions`: a replica's older copy coming back).
            if let cv = op.callerVersion, let e = disk.evicted?.lookup(id), cv < e.version, (existing?.version ?? 0) < e.version {
                existing = ItemState(value: [], flags: 0, extended: [], expiry: 0, version: e.version, marks: ItemMarks.tombstone)
            }
        }
        let now = clock.nowMicros()
        let (result, effect) = WriteRules.decide(op, existing: existing, now: now, newVersion: callerVersion ?? hlc.next(),
                                                 oldestLive: maxAge.oldestVersion(now: now))
        switch effect {
        case .none:
            return (result, nil)
        case .delete:
            // A remove touches only the tiers it names (YYCache's removeObjectForKey:withType:):
            // with the disk tier alone, a memory copy stays and is what a later read finds.
            // The memory copy goes once the delete is visible in the log's pending index: a read
            // that found the older disk copy before cannot promote it after (`delete` moves the
            // shard's delete epoch even when memory held nothing).
            if !memoryToo { memoryOnlyWrites.store(true, ordering: .relaxed) } // the memory copy stays alone
            let before = !answered && memoryToo && memoryOnlyCopiesMayExist ? memorySnapshot(loc, ns, key, now: now) : nil
            let end = log.append(.delete(id), at: now, flushedByCaller: flushedByCaller, answered: answered, memoryBefore: before)
            if memoryToo { memory.with(loc, key) { shard, k in _ = shard.delete(tag: ns.tag, key: k, hash: loc.hash) } }
            return (result, end)
        case .store(let s):
            if !s.value.isEmpty, log.refusal != nil {
                // SQLite cannot take the backlog (a full disk): no new value is accepted until
                // it can; removals still are (they free space).
                throw StoreError(.diskFull, "disk full while writing (\(configuration.directory)); nothing was stored")
            }
            // Only a stored set writes the caller's value as is; it was encoded on the caller's thread.
            let encoded: (ValueEncoding, [UInt8])
            if let pre = preEncoded, !s.tombstone, case .set(.stored) = result { encoded = pre } else { encoded = disk.codec.encode(s.value) }
            if encoded.1.count > disk.budget.maxStoredItem {
                // Decided here, before anything changed: evicting everything else could not
                // make room for it (see DiskBudget).
                // Named after what sized it: the limit, or the file system when that is smaller.
                let b = disk.budget
                let by = !b.isLimited ? "the file system of the data directory (\(b.sizedFor) bytes; no disk limit is set)"
                    : b.sizedFor < b.limit ? "the file system of the data directory (\(b.sizedFor) bytes, smaller than the disk limit)"
                    : "the disk limit of \(b.limit) bytes"
                throw StoreError(.valueTooLarge, "value is \(encoded.1.count) bytes stored; \(by) holds items of at most \(b.maxStoredItem)")
            }
            // An INVALIDATE rewrites a value the node holds (its row is replaced in place): below
            // the floor it is taken, as removals are (PROTOCOL.md §6 DISK_FULL).
            var invalidates = false
            if case .invalidate = result { invalidates = true }
            let footprint = encoded.1.count + s.extended.count + key.count + namespace.count + 64
            let charged = !s.tombstone && !invalidates
            if charged && !floor.admits(footprint) {
                throw StoreError(.diskFull, "disk full: less than \(floor.floor) bytes free on the disk holding \(configuration.directory), kept for deletes, invalidates and flushes; nothing was stored")
            }
            defer { if charged { floor.appended(footprint) } }
            // Whether this write changes memory (below): then a durable one keeps what memory held.
            if !memoryToo && s.tombstone { memoryOnlyWrites.store(true, ordering: .relaxed) } // the memory copy stays alone
            let before = !answered && (memoryToo || !s.tombstone) && memoryOnlyCopiesMayExist ? memorySnapshot(loc, ns, key, now: now) : nil
            if memoryToo && !s.tombstone {
                let compressed = ns.compression?.encode(s.value)
                memory.with(loc, key) { shard, k in
                    shard.putIfNotOlder(tag: ns.tag, key: k, hash: loc.hash, item: s, now: now, compressed: compressed)
                }
            }
            disk.counters.rawBytesWritten.add(s.value.count, ordering: .relaxed)
            disk.counters.storedBytesWritten.add(encoded.1.count, ordering: .relaxed)
            let end = log.append(.put(id, s, encoded.0, encoded.1), at: now, flushedByCaller: flushedByCaller, answered: answered,
                                 memoryBefore: before)
            if !(memoryToo && !s.tombstone) && (memoryToo || !s.tombstone) {
                // Disk-only writes (replicas) invalidate an older memory copy, so a read never
                // finds an older version in memory than the disk holds; so do tombstones of
                // removes that name the memory tier. A disk-only remove leaves memory alone.
                // After the log append (the write is visible to reads from then on): a read that
                // found the older disk copy before cannot promote it after — `deleteIfNotNewer`
                // moves the shard's delete epoch even when memory held nothing.
                memory.with(loc, key) { shard, k in shard.deleteIfNotNewer(tag: ns.tag, key: k, hash: loc.hash, version: s.version, now: now) }
            }
            return (result, end)
        }
    }

    /// Whether memory may hold an item whose version neither the disk tier nor the log holds,
    /// so undoing a failed durable write by dropping the memory copy (reads then find the older
    /// version on disk or in the log's index) could lose it: then such writes keep a copy of what
    /// memory held. Sticky; false on a node that only ever wrote both tiers and never evicted
    /// from disk (the copy costs a durable SET ~3 % of workload 2's CPU per operation).
    var memoryOnlyCopiesMayExist: Bool {
        memoryOnlyWrites.load(ordering: .relaxed) || disk.counters.evictions.load(ordering: .relaxed) > 0
            || disk.counters.corruptItems.load(ordering: .relaxed) > 0 || disk.counters.quarantines.load(ordering: .relaxed) > 0
    }

    /// What memory holds for the key now (its value included), for undoing a write whose
    /// record then cannot be written (`DurabilityLog.undo`). Costs a probe and a copy of the value.
    func memorySnapshot(_ loc: MemoryTier.Location, _ ns: NamespaceRegistry.Entry, _ key: [UInt8], now: Int64) -> MemorySnapshot {
        memory.with(loc, key) { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: true) }.map { .item($0.state) } ?? .absent
    }

    /// Writes every record appended to the log so far (with one `write()`, unless another
    /// thread is writing them) and runs the completions they answer, on this thread.
    public func flushLog() { log.flush() }

    /// Counts a write held for the log's room by a caller that does not block (an event loop
    /// holding a connection's SET until the applier makes room): `log_backpressure_waits`.
    public func noteBackpressureWait() { log.backpressureWaits.add() }

    /// Whether the durability log's backlog is under `logLimit` now, so a write would not wait
    /// for room (back-pressure). A caller that must not block (an event loop) hands its writes
    /// to a thread that may while this is false.
    public var logHasRoom: Bool { log.hasRoom }

    /// Whether a set of a value of `bytes` would not wait for room in the log now (a large
    /// value waits for more room than a small one: see `DurabilityLog.waitForRoom`).
    public func logHasRoom(for bytes: Int) -> Bool { log.hasRoom(for: bytes) }

    /// Whether a value of `bytes` is a large record for the log (it is promised its room, and
    /// may wait for more of it than a small one: `DurabilityLog.waitForRoom`).
    public func isLargeLogRecord(_ bytes: Int) -> Bool { bytes >= log.largeRecord }

    /// Whether `submitSet` with these options completes without blocking the caller: writes to
    /// memory only, and unconditional sets with a node-assigned version (they need no read of
    /// the stored item). The wait for room in the log (back-pressure, see `logHasRoom`) may
    /// still block.
    public static func submitsWithoutBlocking(_ options: SetOptions) -> Bool {
        guard options.tiers.contains(.disk) else { return true }
        return options.mode == .set && options.version == nil
    }

    /// A set that does not wait for the log: for callers that must not block, such as the
    /// node's event loop. Validation errors are thrown at once; the outcome goes to
    /// `completion` once the record is in the log file — on whichever thread wrote it (the
    /// caller's own `flushLog()`, another writer's flush, or the log's flusher), so the
    /// completion must only hand the outcome on (it must not block, nor take long). With
    /// `flushLater` the caller promises to call `flushLog()` soon (the node does at the end of
    /// its event-loop iteration, so all the records of one iteration go out in one `write()`);
    /// otherwise the log's flusher writes it. Sets that do not `submitsWithoutBlocking`,
    /// writes to the memory tier only and write-behind writes complete before this returns.
    /// (`quickCompletion` is kept for callers; every completion is quick now.)
    public func submitSet(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], options: SetOptions = SetOptions(),
                          quickCompletion: Bool = false, flushLater: Bool = false,
                          completion: @escaping @Sendable (Result<SetOutcome, StoreError>) -> Void) throws {
        try check(key: key, namespace: namespace, value: value, options: options)
        guard options.tiers.contains(.disk), !options.writeBehind, Self.submitsWithoutBlocking(options) else {
            completion(Result { try set(key, value, namespace: namespace, options: options) }.mapError {
                $0 as? StoreError ?? StoreError(.io, "\($0)")
            })
            return
        }
        let op = try setOp(value, options)
        let ns = try namespaceEntry(namespace)
        ns.counters.writes.add(1, ordering: .relaxed)
        ns.counters.sets.add(1, ordering: .relaxed)
        let loc = memory.locate(tag: ns.tag, key: key)
        let (result, end) = try decideAndLog(op, key: key, namespace: namespace, ns: ns, loc: loc, tiers: options.tiers, needs: .nothing,
                                             callerVersion: nil, preEncoded: disk.codec.encode(value), flushedByCaller: flushLater)
        guard case .set(let outcome) = result else { return completion(.failure(StoreError(.io, "internal: unexpected result kind"))) }
        guard let end else { return completion(.success(outcome)) }
        log.onDurable(end) { error in completion(error.map { .failure($0) } ?? .success(outcome)) }
    }

    /// Whether `op` leaves everything as it is when the item does not exist: unversioned
    /// removes and invalidates, touches, counters without an initial value, replace and cas.
    static func onlyChangesExisting(_ op: WriteOp) -> Bool {
        switch op {
        case .remove(nil, _), .invalidate(nil), .touch, .counter(_, _, nil, _, _): return true
        case .set(_, .replace, _, _, _, _, _), .set(_, .cas, _, _, _, _, _): return true
        default: return false
        }
    }
}
