#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import StrataCore
import Synchronization

/// The embeddable Strata cache: a sharded memory tier in front of a zstd-compressed SQLite
/// disk tier, with namespaces, expiry, versions (CAS tokens) and tombstones.
///
/// Guarantees:
/// - Thread-safe; every operation has a blocking form and an `async` form.
/// - A write that includes `.disk` returns after its transaction commits (unless
///   `writeBehind`), so a process killed with SIGKILL loses no write that returned.
/// - An expired item is never returned by any operation.
/// - Every write gets a version from a hybrid logical clock (or the caller's); a caller-supplied
///   version older than what is stored (or its tombstone) is ignored, so replicas converge.
/// - Bad input gets a `StoreError` and changes nothing.
///
/// Costs: a memory hit is a hash, a shard lock and a copy (~100–200 ns); a disk hit is one
/// indexed SQLite read plus checksum and decompression; a disk write waits for a group commit.
public final class TieredCache: @unchecked Sendable {
    public let configuration: StoreConfiguration
    /// The clock every expiry and version is taken from (injected in tests).
    public let clock: any Clock
    let hlc: HybridLogicalClock
    let registry = NamespaceRegistry()
    let memory: MemoryTier
    let disk: DiskTier
    let log: DurabilityLog

    private let writeBehindPending = Counter()
    private let writeBehindWrites = Counter()
    private let sweeper = ConditionLock()
    private var sweeperStop = false
    private let sweeperDone = Completion<Void>()
    private let closed = Atomic<Bool>(false)
    private let workQueue = DispatchQueue(label: "strata.store.async", attributes: .concurrent)

    /// Opens (creating when needed) the store in `configuration.directory`.
    public init(configuration: StoreConfiguration, clock: any Clock = SystemClock()) throws {
        guard configuration.maxItemBytes > 0, configuration.memoryShards > 0, configuration.maxBatch > 0 else {
            throw StoreError(.invalidArgument, "maxItemBytes, memoryShards and maxBatch must be positive")
        }
        self.configuration = configuration
        self.clock = clock
        self.hlc = HybridLogicalClock(clock: clock)
        self.memory = MemoryTier(config: configuration)
        let disk = try DiskTier(config: configuration, clock: clock, registry: registry)
        self.disk = disk
        let sink: @Sendable (String) -> Void = configuration.log ?? { line in
            var l = line + "\n"
            l.withUTF8 { _ = Glibc.write(2, $0.baseAddress, $0.count) }
        }
        do {
            log = try DurabilityLog(directory: configuration.directory + "/log", policy: configuration.fsync, applied: disk.logApplied,
                                    limitBytes: configuration.logLimit, segmentBytes: configuration.logSegmentBytes,
                                    maxApplyBatch: configuration.maxApplyBatch, clock: clock, log: sink,
                                    decode: { encoding, stored, size in stored.withUnsafeBytes { disk.codec.decode(encoding, $0, size: size) } })
        } catch {
            disk.close()
            throw error
        }
        let log = self.log
        log.apply = { writes, end in disk.applyLog(writes, end: end) }
        log.applierDelay = configuration.applierDelayForTests
        let memory = self.memory, registry = self.registry
        log.undo = { w in
            guard let id = w.item, let ns = registry.lookup(id.namespace) else { return }
            let loc = memory.locate(tag: ns.tag, key: id.key)
            memory.with(loc, id.key) { shard, k in _ = shard.delete(tag: ns.tag, key: k, hash: loc.hash) }
        }
        disk.onCheckpointed = { position in log.files.removeSegments(before: position) }
        // Reads look items up by namespace: every namespace with a replayed write is known.
        for name in log.replayedNamespaces { _ = registry.entry(name) }
        do {
            try disk.start()
            try log.start()
        } catch {
            log.close()
            disk.close()
            throw error
        }
        hlc.observe(disk.maxVersion)
        hlc.observe(log.replayedMaxVersion)
        openedVersion = hlc.next()
        openedWithData = disk.openedWithRows || log.replayedRecords > 0
        startThread(name: "strata-sweeper") { [self] in sweepLoop() }
    }

    /// A version taken when the store opened: every item with an older version was written
    /// before this open (a cluster client treats such items on a restarted node as unverified).
    public private(set) var openedVersion: UInt64 = 0
    /// Whether the disk tier held any rows when the store opened (false for a fresh directory).
    public private(set) var openedWithData = false

    deinit { close() }

    /// Finishes queued disk writes (write-behind included), checkpoints, releases the data
    /// directory. Later calls fail with `.closed`. Idempotent.
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        sweeper.withLock { sweeperStop = true; sweeper.broadcast() }
        sweeperDone.wait()
        log.close() // writes what is buffered and applies the backlog to SQLite (what it cannot stays in the log)
        disk.close()
    }

    // MARK: Validation

    private func check(key: [UInt8], namespace: [UInt8]) throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        if key.isEmpty { throw StoreError(.invalidKey, "key is empty") }
        if key.count > ItemLimits.maxKeyBytes {
            throw StoreError(.invalidKey, "key is \(key.count) bytes; the limit is \(ItemLimits.maxKeyBytes)")
        }
        if namespace.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(namespace.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
    }

    /// The write a set stands for, with its expiry resolved now; a caller version moves the clock.
    private func setOp(_ value: [UInt8], _ options: SetOptions) throws -> WriteOp {
        let now = clock.nowMicros()
        if let v = options.version {
            try checkVersion(v, now: now)
            hlc.observe(v)
        }
        return .set(value: value, mode: options.mode, flags: options.flags, extended: options.extended,
                    expiry: options.expiry.resolve(now: now, defaultTTL: configuration.defaultTTL), callerVersion: options.version,
                    marks: (options.stale ? ItemMarks.stale : 0) | (options.negative ? ItemMarks.negative : 0))
    }

    /// A caller-supplied version far ahead of this node's clock would drag every later
    /// version with it, so it is refused.
    private func checkVersion(_ v: UInt64, now: Int64) throws {
        let limit = UInt64(max(0, now)) &+ UInt64(configuration.maxVersionSkew * 1_000_000)
        if v > limit {
            throw StoreError(.invalidArgument, "version \(v) is more than \(Int(configuration.maxVersionSkew)) s ahead of this node's clock")
        }
    }

    /// Everything a set is checked for before it changes anything.
    private func check(key: [UInt8], namespace: [UInt8], value: [UInt8], options: SetOptions) throws {
        try check(key: key, namespace: namespace)
        try check(tiers: options.tiers)
        if value.count > configuration.maxItemBytes {
            throw StoreError(.valueTooLarge, "value is \(value.count) bytes; the max item size is \(configuration.maxItemBytes)")
        }
        if options.extended.count > ItemLimits.maxExtendedBytes {
            throw StoreError(.extendedTooLarge, "extended data is \(options.extended.count) bytes; the limit is \(ItemLimits.maxExtendedBytes)")
        }
    }

    /// The checks of a write that may carry a caller version (remove, invalidate); a caller
    /// version moves this store's clock past it.
    private func checkVersionedWrite(key: [UInt8], namespace: [UInt8], tiers: Tiers, version: UInt64?) throws {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        if let v = version {
            try checkVersion(v, now: clock.nowMicros())
            hlc.observe(v)
        }
    }

    private func check(tiers: Tiers) throws {
        if tiers.isEmpty || !Tiers.all.isSuperset(of: tiers) {
            throw StoreError(.invalidArgument, "tiers must be memory, disk or all")
        }
    }

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

    /// Removes `key`. With a `version`, leaves a tombstone (kept `tombstoneTTL`) so an older
    /// write arriving later is ignored; a version not newer than the stored one is ignored.
    /// With `writeBehind`, returns before the removal's record is in the log (see `SetOptions`).
    public func remove(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil,
                       writeBehind: Bool = false) throws -> RemoveOutcome {
        try checkVersionedWrite(key: key, namespace: namespace, tiers: tiers, version: version)
        let tombstoneExpiry = clock.nowMicros() + Int64(configuration.tombstoneTTL * 1_000_000)
        guard case .remove(let o) = try write(.remove(callerVersion: version, tombstoneExpiry: max(1, tombstoneExpiry)),
                                              key: key, namespace: namespace, tiers: tiers, writeBehind: writeBehind,
                                              callerVersion: nil, preEncoded: nil)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return o
    }

    /// Marks the live item under `key` stale: it keeps being served (flagged stale) until a
    /// new write replaces it. Gets a new version, or `version` when given (a replica's copy of
    /// an invalidate: ignored when not newer than what is stored). A negative entry is removed.
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
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        let e = expiry.resolve(now: clock.nowMicros(), defaultTTL: configuration.defaultTTL)
        guard case .touch(let found, let version) = try write(.touch(expiry: e), key: key, namespace: namespace, tiers: tiers,
                                                              writeBehind: false, callerVersion: nil, preEncoded: nil)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return found ? version : nil
    }

    /// Adds `delta` to a decimal counter (wrapping at 2^64, as memcached). When absent, stores
    /// `initial` if given (with `expiry`), else reports `.notFound`.
    public func increment(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault) throws -> CounterOutcome {
        try counter(key, delta: delta, decrement: false, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry)
    }

    /// Subtracts `delta` from a decimal counter, stopping at 0 (memcached semantics).
    public func decrement(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault) throws -> CounterOutcome {
        try counter(key, delta: delta, decrement: true, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry)
    }

    private func counter(_ key: [UInt8], delta: UInt64, decrement: Bool, namespace: [UInt8], tiers: Tiers,
                         initial: UInt64?, expiry: Expiry) throws -> CounterOutcome {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        let e = expiry.resolve(now: clock.nowMicros(), defaultTTL: configuration.defaultTTL)
        guard case .counter(let o) = try write(.counter(delta: delta, decrement: decrement, initial: initial, expiry: e),
                                               key: key, namespace: namespace, tiers: tiers, writeBehind: false,
                                               callerVersion: nil, preEncoded: nil)
        else { throw StoreError(.io, "internal: unexpected result kind") }
        return o
    }

    /// Picks the state that decides a write: the newer of what memory and disk hold.
    private static func newest(_ a: ItemState?, _ b: ItemState?) -> ItemState? {
        guard let a else { return b }
        guard let b else { return a }
        return a.version >= b.version ? a : b
    }

    /// Applies one write to the requested tiers through `WriteRules`. A write that includes the
    /// disk tier is decided against the newest state (memory, the log's pending writes, then
    /// SQLite), appended to the durability log, and returns once its record is in the log file
    /// (at once with `writeBehind`).
    private func write(_ op: WriteOp, key: [UInt8], namespace: [UInt8], tiers: Tiers, writeBehind: Bool,
                       callerVersion: UInt64?, preEncoded: (ValueEncoding, [UInt8])?) throws -> WriteResult {
        let ns = registry.entry(namespace)
        ns.counters.writes.add(1, ordering: .relaxed)
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
            let needValue = needs == .value
            let now = clock.nowMicros()
            let hlc = self.hlc
            return memory.with(loc, key) { shard, k in
                let existing = shard.peek(tag: ns.tag, key: k, hash: loc.hash, now: now, withValue: needValue)?.state
                let (result, effect) = WriteRules.decide(op, existing: existing, now: now, newVersion: callerVersion ?? hlc.next())
                switch effect {
                case .none: break
                case .delete: shard.delete(tag: ns.tag, key: k, hash: loc.hash)
                case .store(let s): shard.put(tag: ns.tag, key: k, hash: loc.hash, item: s, now: now)
                }
                return result
            }
        }

        // Write-behind is bounded: past `maxWriteBehindPending` writes not yet in the log file,
        // a write-behind write waits like any other (backpressure instead of unbounded memory).
        let behind = writeBehind && writeBehindPending.load() < configuration.maxWriteBehindPending
        // A writer that waits flushes the batch itself (with everyone else's records); a
        // write-behind writer leaves its record to the log's flusher.
        let (result, end) = try decideAndLog(op, key: key, namespace: namespace, ns: ns, loc: loc, tiers: tiers, needs: needs,
                                             callerVersion: callerVersion, preEncoded: preEncoded, flushedByCaller: !behind)
        guard let end else { return result }
        if behind {
            writeBehindPending.add(1)
            writeBehindWrites.add(1)
            let pending = writeBehindPending
            log.onDurable(end) { _ in pending.add(-1) }
            return result
        }
        try log.waitDurable(end)
        return result
    }

    /// Per-item write locks (by the item's memory hash): decisions about one item, and the
    /// order its records enter the log, are serialized; other items go on in parallel.
    private let writeLocks: [Lock] = (0..<256).map { _ in Lock() }

    /// Decides a disk write and appends its record to the log; returns the result and the log
    /// position the write is durable at (nil when nothing changed). Memory follows the
    /// decision at once. May read SQLite (a write that depends on the stored item, when neither
    /// memory nor the log's pending writes hold it).
    private func decideAndLog(_ op: WriteOp, key: [UInt8], namespace: [UInt8], ns: NamespaceRegistry.Entry,
                              loc: MemoryTier.Location, tiers: Tiers, needs: ExistingNeed, callerVersion: UInt64?,
                              preEncoded: (ValueEncoding, [UInt8])?, flushedByCaller: Bool) throws -> (WriteResult, UInt64?) {
        log.waitForRoom()
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
        }
        let now = clock.nowMicros()
        let (result, effect) = WriteRules.decide(op, existing: existing, now: now, newVersion: callerVersion ?? hlc.next())
        switch effect {
        case .none:
            return (result, nil)
        case .delete:
            memory.with(loc, key) { shard, k in _ = shard.delete(tag: ns.tag, key: k, hash: loc.hash) }
            return (result, log.append(.delete(id), at: now, flushedByCaller: flushedByCaller))
        case .store(let s):
            if !s.value.isEmpty, log.refusal != nil {
                // SQLite cannot take the backlog (a full disk): no new value is accepted until
                // it can; removals still are (they free space).
                throw StoreError(.diskFull, "disk full while writing (\(configuration.directory)); nothing was stored")
            }
            memory.with(loc, key) { shard, k in
                if memoryToo && !s.tombstone {
                    shard.putIfNotOlder(tag: ns.tag, key: k, hash: loc.hash, item: s, now: now)
                } else {
                    // Disk-only writes (replicas) and tombstones invalidate an older memory copy.
                    shard.deleteIfNotNewer(tag: ns.tag, key: k, hash: loc.hash, version: s.version, now: now)
                }
            }
            // Only a stored set writes the caller's value as is; it was encoded on the caller's thread.
            let encoded: (ValueEncoding, [UInt8])
            if let pre = preEncoded, !s.tombstone, case .set(.stored) = result { encoded = pre } else { encoded = disk.codec.encode(s.value) }
            disk.counters.rawBytesWritten.add(s.value.count, ordering: .relaxed)
            disk.counters.storedBytesWritten.add(encoded.1.count, ordering: .relaxed)
            return (result, log.append(.put(id, s, encoded.0, encoded.1), at: now, flushedByCaller: flushedByCaller))
        }
    }

    /// Writes every record appended to the log so far (with one `write()`, unless another
    /// thread is writing them) and runs the completions they answer, on this thread.
    public func flushLog() { log.flush() }

    /// Whether `submitSet` with these options completes without blocking the caller: writes to
    /// memory only, and unconditional sets with a node-assigned version (they need no read of
    /// the stored item). The wait for room in the log (back-pressure) may still block.
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
        let ns = registry.entry(namespace)
        ns.counters.writes.add(1, ordering: .relaxed)
        let loc = memory.locate(tag: ns.tag, key: key)
        let (result, end) = try decideAndLog(op, key: key, namespace: namespace, ns: ns, loc: loc, tiers: options.tiers, needs: .nothing,
                                             callerVersion: nil, preEncoded: disk.codec.encode(value), flushedByCaller: flushLater)
        guard case .set(let outcome) = result else { return completion(.failure(StoreError(.io, "internal: unexpected result kind"))) }
        guard let end else { return completion(.success(outcome)) }
        log.onDurable(end) { error in completion(error.map { .failure($0) } ?? .success(outcome)) }
    }

    // MARK: Reads

    /// The item under `key`, or nil. Looks in memory, then disk (as `tiers` allows), and
    /// promotes a disk hit into memory when `tiers` includes memory. With `touch`, also gives
    /// the item a new expiry.
    public func get(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, touch: Expiry? = nil) throws -> CacheItem? {
        if case .hit(let item) = try read(key, namespace: namespace, tiers: tiers, touch: touch) { return item }
        return nil
    }

    /// What a read found: an item, the tombstone of a versioned remove (its version lets a
    /// cluster client see that a delete is newer than another node's copy), or nothing.
    public enum ReadResult: Sendable, Equatable {
        case hit(CacheItem)
        case tombstone(version: UInt64)
        case miss
    }

    /// Like `get`, but tells a tombstone apart from a miss.
    public func read(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, touch: Expiry? = nil) throws -> ReadResult {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        guard let ns = registry.lookup(namespace) else { return .miss }
        let now = clock.nowMicros()
        var found: CacheItem?
        var tombstone: UInt64?
        let loc = memory.locate(tag: ns.tag, key: key)
        if tiers.contains(.memory) {
            if let s = memory.with(loc, key, { $0.get(tag: ns.tag, key: $1, hash: loc.hash, now: now) }) {
                found = CacheItem(value: s.value, flags: s.flags, extended: s.extended,
                                  expiresAt: s.expiry == 0 ? nil : s.expiry, version: s.version, tier: .memory,
                                  stale: s.stale, negative: s.negative)
            } else if let t = memory.with(loc, key, { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: false) }),
                      t.state.tombstone {
                tombstone = t.state.version
            }
        }
        if found == nil && tiers.contains(.disk) {
            let epoch = memory.deleteEpoch(loc)
            // The log's pending writes are newer than anything in SQLite.
            let pending = log.index.lookup(ItemKey(namespace: namespace, key: key), accessedAt: now)
            let state: ItemState?
            if let p = pending {
                state = p.state.flatMap { $0.guards(now: now) ? $0 : nil } // as SQLite reads: unexpired rows, tombstones too
                if state != nil { disk.noteAccess(namespace: namespace, key: key, now: now) }
                disk.counters.hits.add(state.map { $0.tombstone ? 0 : 1 } ?? 0, ordering: .relaxed)
                disk.counters.misses.add(state.map { $0.tombstone ? 1 : 0 } ?? 1, ordering: .relaxed)
            } else {
                state = try disk.read(namespace: namespace, key: key, withValue: true, countStats: true)?.state
            }
            if let s = state {
                if s.tombstone {
                    tombstone = max(tombstone ?? 0, s.version)
                } else {
                    if tiers.contains(.memory) {
                        memory.promote(loc, tag: ns.tag, key: key, item: s, ifEpoch: epoch, now: now)
                    }
                    found = CacheItem(value: s.value, flags: s.flags, extended: s.extended,
                                      expiresAt: s.expiry == 0 ? nil : s.expiry, version: s.version, tier: .disk,
                                      stale: s.stale, negative: s.negative)
                }
            }
        }
        guard var item = found else {
            ns.counters.misses.add(1, ordering: .relaxed)
            return tombstone.map { .tombstone(version: $0) } ?? .miss
        }
        ns.counters.hits.add(1, ordering: .relaxed)
        if let t = touch {
            // Resolved once: the expiry answered is exactly the one stored (a relative TTL
            // resolved twice would answer a few µs earlier than the stored time).
            let e = t.resolve(now: clock.nowMicros(), defaultTTL: configuration.defaultTTL)
            guard let v = try touchVersioned(key, namespace: namespace, expiry: e == 0 ? .never : .at(unixMicros: e), tiers: tiers)
            else { return .miss }
            item.expiresAt = e == 0 ? nil : e
            item.version = v
        }
        return .hit(item)
    }

    /// One result per key, in order (nil for a miss).
    public func getMany(_ keys: [[UInt8]], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> [CacheItem?] {
        try keys.map { try get($0, namespace: namespace, tiers: tiers) }
    }

    /// Whether a live item is under `key` in any of `tiers`. Never touches LRU order or stats.
    public func contains(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> Bool {
        try metadata(key, namespace: namespace, tiers: tiers) != nil
    }

    /// Metadata of the item under `key`: sizes, encoding, the tiers holding it, expiry,
    /// version, flags. Nil when absent (or expired, or a tombstone).
    public func metadata(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) throws -> ItemMetadata? {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        guard let ns = registry.lookup(namespace) else { return nil }
        let now = clock.nowMicros()
        var meta: ItemMetadata?
        if tiers.contains(.disk) {
            if let p = log.index.lookup(ItemKey(namespace: namespace, key: key)) {
                // Not yet in SQLite: the pending write says how the disk tier will hold it.
                if let st = p.state, st.isLive(now: now) {
                    meta = ItemMetadata(size: st.value.count, storedSize: p.storedSize, encoding: p.encoding, tiers: .disk,
                                        expiresAt: st.expiry == 0 ? nil : st.expiry, version: st.version,
                                        flags: st.flags, extendedSize: st.extended.count)
                }
            } else if let row = try disk.read(namespace: namespace, key: key, withValue: false, countStats: false),
                      row.state.isLive(now: now) {
                meta = ItemMetadata(size: row.size, storedSize: row.storedSize, encoding: row.encoding, tiers: .disk,
                                    expiresAt: row.state.expiry == 0 ? nil : row.state.expiry, version: row.state.version,
                                    flags: row.state.flags, extendedSize: row.state.extended.count)
            }
        }
        if tiers.contains(.memory) {
            let loc = memory.locate(tag: ns.tag, key: key)
            if let m = memory.with(loc, key, { $0.peek(tag: ns.tag, key: $1, hash: loc.hash, now: now, withValue: false) }),
               m.state.isLive(now: now) {
                if var existing = meta, existing.version == m.state.version {
                    existing.tiers.insert(.memory)
                    meta = existing
                } else if meta == nil || m.state.version > meta!.version {
                    meta = ItemMetadata(size: m.valueLen, storedSize: nil, encoding: nil, tiers: .memory,
                                        expiresAt: m.state.expiry == 0 ? nil : m.state.expiry, version: m.state.version,
                                        flags: m.state.flags, extendedSize: m.state.extended.count)
                }
            }
        }
        return meta
    }

    /// Up to `limit` keys of `namespace` after `cursor` in bytewise order, and the cursor for
    /// the next page (nil at the end). Memory keys come from a scan of the memory tier.
    public func keys(namespace: [UInt8] = [], after cursor: [UInt8]? = nil, limit: Int = 1000,
                     tiers: Tiers = .all) throws -> (keys: [[UInt8]], next: [UInt8]?) {
        if namespace.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(namespace.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
        try check(tiers: tiers)
        guard limit > 0 else { throw StoreError(.invalidArgument, "limit must be positive") }
        guard let ns = registry.lookup(namespace) else { return ([], nil) }
        let now = clock.nowMicros()
        func afterCursor(_ k: [UInt8]) -> Bool { cursor.map { $0.lexicographicallyPrecedes(k) } ?? true }
        var keys: Set<[UInt8]> = []
        // SQLite's page is complete up to its limit-th key (`boundary`) when it has more;
        // keys from memory and the log past the boundary wait for a later page.
        var boundary: [UInt8]? = nil
        if tiers.contains(.disk) {
            let diskKeys = try disk.keys(namespace: namespace, after: cursor, limit: limit + 1)
            if diskKeys.count > limit { boundary = diskKeys[limit - 1] }
            keys.formUnion(diskKeys)
            // The log's pending writes are newer than SQLite's rows: a pending remove hides one.
            for (k, live) in log.index.keys(namespace: namespace, now: now) where afterCursor(k) {
                if live { keys.insert(k) } else { keys.remove(k) }
            }
        }
        if tiers.contains(.memory) {
            for k in memory.keys(tag: ns.tag, now: now) where afterCursor(k) { keys.insert(k) }
        }
        var sorted = keys.sorted { $0.lexicographicallyPrecedes($1) }
        if let b = boundary { sorted.removeAll { b.lexicographicallyPrecedes($0) } }
        if sorted.count > limit {
            let page = Array(sorted.prefix(limit))
            return (page, page.last)
        }
        // A short page still has a cursor while SQLite has more (its boundary).
        return (sorted, boundary)
    }

    // MARK: Flush and trim

    private func control(_ kind: DiskJob.Kind) throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        let done = Completion<Result<(WriteResult, WriteEffect)?, StoreError>>()
        disk.enqueue(DiskJob(kind) { done.fulfil($0) })
        if case .failure(let e) = done.wait() { throw e }
    }

    /// Empties one namespace in O(1): its generation changes; old items are collected later.
    public func flush(namespace: [UInt8]) throws {
        if namespace.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(namespace.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        _ = registry.entry(namespace)
        try logAndApply(.flushNamespace(namespace))
    }

    /// Empties every namespace (O(namespaces)).
    public func flushAll() throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        try logAndApply(.flushAll)
    }

    /// A flush goes through the log like any write (so a replay repeats it in order) and
    /// returns once SQLite has applied it: from then on no older item is visible anywhere.
    private func logAndApply(_ kind: LoggedWrite.Kind) throws {
        log.waitForRoom()
        let end = log.append(kind, at: clock.nowMicros())
        try log.waitDurable(end)
        try log.waitApplied(end)
    }

    /// The names of every namespace this store knows (on disk or written since open).
    public func namespaceNames() -> [[UInt8]] { registry.allNames() }

    /// Evicts least recently used items until each tier in `tiers` holds at most `count` items
    /// and `bytes` bytes (memory: accounted bytes; disk: pages in use plus WAL).
    public func trim(toCount count: Int = Int.max, toBytes bytes: Int = Int.max, tiers: Tiers = .all) throws {
        try check(tiers: tiers)
        if tiers.contains(.memory) {
            let n = memory.shards.count
            for s in memory.shards {
                s.lock.withLock { s.trim(toCount: count == Int.max ? .max : count / n, toBytes: bytes == Int.max ? .max : bytes / n) }
            }
        }
        if tiers.contains(.disk) {
            try log.waitApplied(log.end) // the backlog first, so the trim sees every item
            try control(.trim(count: count, bytes: bytes))
        }
    }

    /// Returns once every disk write made before the call is in SQLite (the log's backlog
    /// before this point applied) and every queued disk job has run.
    public func sync() throws {
        if closed.load(ordering: .relaxed) { throw StoreError(.closed, "store is closed") }
        let end = log.end
        try log.waitDurable(end)
        try log.waitApplied(end)
        try control(.barrier)
    }

    // MARK: Background

    private func sweepLoop() {
        var cursors = Array(repeating: 0, count: memory.shards.count)
        while true {
            sweeper.lock()
            if !sweeperStop { sweeper.wait(seconds: 1) }
            let stop = sweeperStop
            sweeper.unlock()
            if stop { break }
            let live = registry.liveTagSet()
            let now = clock.nowMicros()
            for (i, s) in memory.shards.enumerated() {
                s.lock.withLock {
                    cursors[i] = s.sweep(from: cursors[i], budget: 4096, now: now, isLiveTag: { live.contains($0) })
                }
            }
        }
        sweeperDone.fulfil(())
    }

    // MARK: Async forms

    private func offload<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { cont in
            workQueue.async { cont.resume(with: Result { try body() }) }
        }
    }

    public func set(_ key: [UInt8], _ value: [UInt8], namespace: [UInt8] = [], options: SetOptions = SetOptions()) async throws -> SetOutcome {
        try await offload { try self.set(key, value, namespace: namespace, options: options) }
    }
    public func get(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, touch: Expiry? = nil) async throws -> CacheItem? {
        try await offload { try self.get(key, namespace: namespace, tiers: tiers, touch: touch) }
    }
    public func getMany(_ keys: [[UInt8]], namespace: [UInt8] = [], tiers: Tiers = .all) async throws -> [CacheItem?] {
        try await offload { try self.getMany(keys, namespace: namespace, tiers: tiers) }
    }
    public func contains(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) async throws -> Bool {
        try await offload { try self.contains(key, namespace: namespace, tiers: tiers) }
    }
    public func remove(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil) async throws -> RemoveOutcome {
        try await offload { try self.remove(key, namespace: namespace, tiers: tiers, version: version) }
    }
    @discardableResult
    public func invalidate(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all, version: UInt64? = nil) async throws -> InvalidateOutcome {
        try await offload { try self.invalidate(key, namespace: namespace, tiers: tiers, version: version) }
    }
    public func touch(_ key: [UInt8], namespace: [UInt8] = [], expiry: Expiry, tiers: Tiers = .all) async throws -> Bool {
        try await offload { try self.touch(key, namespace: namespace, expiry: expiry, tiers: tiers) }
    }
    public func increment(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault) async throws -> CounterOutcome {
        try await offload { try self.increment(key, by: delta, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry) }
    }
    public func decrement(_ key: [UInt8], by delta: UInt64 = 1, namespace: [UInt8] = [], tiers: Tiers = .all,
                          initial: UInt64? = nil, expiry: Expiry = .storeDefault) async throws -> CounterOutcome {
        try await offload { try self.decrement(key, by: delta, namespace: namespace, tiers: tiers, initial: initial, expiry: expiry) }
    }
    public func metadata(_ key: [UInt8], namespace: [UInt8] = [], tiers: Tiers = .all) async throws -> ItemMetadata? {
        try await offload { try self.metadata(key, namespace: namespace, tiers: tiers) }
    }
    public func keys(namespace: [UInt8] = [], after cursor: [UInt8]? = nil, limit: Int = 1000,
                     tiers: Tiers = .all) async throws -> (keys: [[UInt8]], next: [UInt8]?) {
        let r = try await offload { try self.keys(namespace: namespace, after: cursor, limit: limit, tiers: tiers) }
        return r
    }
    public func flush(namespace: [UInt8]) async throws {
        try await offload { try self.flush(namespace: namespace) }
    }
    public func flushAll() async throws { try await offload { try self.flushAll() } }
    public func trim(toCount count: Int = Int.max, toBytes bytes: Int = Int.max, tiers: Tiers = .all) async throws {
        try await offload { try self.trim(toCount: count, toBytes: bytes, tiers: tiers) }
    }

    var writeBehindCounts: (pending: Int, total: Int) {
        (writeBehindPending.load(), writeBehindWrites.load())
    }
}
