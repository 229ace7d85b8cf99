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
/// - Thread-safe; the operations have a blocking form and most an `async` form (`read`,
///   `peekValue`, `sync`, `touchVersioned`, `namespaceStats` and `close` are blocking only).
/// - A write that includes `.disk` returns after its transaction commits (unless
///   `writeBehind`), so a process killed with SIGKILL loses no write that returned.
/// - An expired item is never returned by any operation, nor one older than `maxAge`.
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
    /// Room kept on the filesystem for deletes, flushes and checkpoints (see `SpaceFloor`).
    let floor: SpaceFloor
    /// `configuration.maxAge` in µs: items written before `now − maxAge` are treated as expired.
    let maxAge: MaxAge

    let writeBehindPending = Counter()
    let writeBehindWrites = Counter()
    let writeBehindBudget: WriteBehindBudget
    let sweeper = ConditionLock()
    var sweeperStop = false
    let sweeperDone = Completion<Void>()
    let closed = Atomic<Bool>(false)
    /// Set (for good) once memory may hold an item that neither the disk tier nor the log holds
    /// at its version: a memory-only write, a disk-only remove or flush. With the disk tier's
    /// evictions, dropped corrupt rows and quarantines, it decides whether a durable write keeps
    /// a copy of what memory held (`memoryOnlyCopiesMayExist`).
    let memoryOnlyWrites = Atomic<Bool>(false)
    let workQueue = DispatchQueue(label: "strata.store.async", attributes: .concurrent)

    /// Opens (creating when needed) the store in `configuration.directory`.
    public init(configuration: StoreConfiguration, clock: any Clock = SystemClock()) throws {
        let filesystem = SpaceFloor.filesystemBytes(configuration.directory)
        let budget = DiskBudget(configuration, filesystemBytes: filesystem)
        let configuration = configuration.fitted(to: budget)
        guard configuration.maxItemBytes > 0, configuration.memoryShards > 0, configuration.maxBatch > 0 else {
            throw StoreError(.invalidArgument, "maxItemBytes, memoryShards and maxBatch must be positive")
        }
        self.configuration = configuration
        writeBehindBudget = WriteBehindBudget(limit: configuration.maxWriteBehindBytes)
        self.clock = clock
        self.hlc = HybridLogicalClock(clock: clock)
        self.maxAge = MaxAge(seconds: configuration.maxAge)
        self.memory = MemoryTier(config: configuration, clock: clock)
        if let c = memory.compression { registry.compressionFor = { c.namespace($0) } }
        let directory = configuration.directory
        let disk = try DiskTier(config: configuration, budget: budget, clock: clock, registry: registry)
        self.disk = disk
        let sink = disk.log // the configured sink, or stderr
        let log: DurabilityLog
        do {
            log = try DurabilityLog(directory: configuration.directory + "/log", policy: configuration.fsync, applied: disk.logApplied,
                                    limitBytes: configuration.logLimit, segmentBytes: configuration.logSegmentBytes,
                                    maxApplyBatch: configuration.maxApplyBatch, applyDelay: configuration.applyDelay, clock: clock, log: sink,
                                    decode: { encoding, stored, size in stored.withUnsafeBytes { disk.codec.decode(encoding, $0, size: size) } })
        } catch {
            disk.close()
            throw error
        }
        self.log = log
        // What the backlog still has to write: its WAL frames and its database pages.
        floor = SpaceFloor(floor: configuration.freeSpaceFloor ?? SpaceFloor.defaultFloor(filesystemBytes: filesystem ?? Int.max),
                           probe: configuration.freeSpaceProbe ?? { SpaceFloor.freeBytes(directory) },
                           pending: { log.floorOwed }, pendingBound: 3 * configuration.logLimit)
        log.apply = { writes, end in disk.applyLog(writes, end: end) }
        log.applierDelay = configuration.applierDelayForTests
        log.files.failWritesForTests = configuration.logWritesFailForTests
        let memory = self.memory, registry = self.registry
        // A failed write's memory change is undone: what memory held before goes back (an
        // outside review, dur10: a refused DELETE of a key whose disk row the disk limit had
        // evicted lost the only copy), unless a kept write-behind write of the key is in the
        // failed batch too (the index holds it: memory then holds nothing, reads find it there).
        let undoClock = clock
        // Memory is left alone when it holds a newer write than the failed one (a memory-only
        // write made meanwhile never reaches the log, so it is in no failed batch: an outside
        // review, dur11, saw such a SET undone by a refused DELETE's restore).
        log.undo = { w, keptToo in
            guard let id = w.item, let ns = registry.lookup(id.namespace) else { return }
            let loc = memory.locate(tag: ns.tag, key: id.key)
            var restore: ItemState? = nil
            if !keptToo, case .item(let s)? = w.memoryBefore { restore = s }
            let compressed = restore.flatMap { ns.compression?.encode($0.value) }
            // What memory holds if nothing wrote the key since: the failed write's item, or nothing.
            var wrote: UInt64? = nil
            if case .put(_, let s, _, _) = w.kind, !s.tombstone { wrote = s.version }
            let now = undoClock.nowMicros()
            memory.with(loc, id.key) { shard, k in
                if let cur = shard.peek(tag: ns.tag, key: k, hash: loc.hash, now: now, withValue: false), cur.state.version != wrote {
                    return // written since: that write stands
                }
                _ = shard.delete(tag: ns.tag, key: k, hash: loc.hash)
                if let s = restore { shard.put(tag: ns.tag, key: k, hash: loc.hash, item: s, now: now, compressed: compressed) }
            }
        }
        disk.onCheckpointed = { position in log.files.removeSegments(before: position) }
        let memoryClock = clock
        disk.memoryIdleSeconds = { name, key in
            guard let ns = registry.lookup(name) else { return nil }
            let loc = memory.locate(tag: ns.tag, key: key)
            let now = memoryClock.nowMicros()
            return memory.with(loc, key) { shard, k in shard.idleSeconds(tag: ns.tag, key: k, hash: loc.hash, now: now) }
        }
        let files = log.files
        disk.logBytes = { files.bytesOnDisk }
        disk.logReleasable = { files.bytesReleasable(at: $0) }
        let floor = self.floor
        disk.freePageBytes = { floor.reusable.store($0, ordering: .relaxed) }
        // Reads look items up by namespace: every namespace with a replayed write is known.
        for name in log.replayedNamespaces { _ = registry.entry(name) }
        do {
            try disk.start()
            try log.start()
            try Self.applyReplayedFlushes(log, wait: configuration.replayedFlushWait)
        } catch {
            // Every property is set, so `deinit` runs and calls `close`: it must not wait for
            // the sweeper, which never started (an outside review: a node whose log held a
            // FLUSH it could not apply on a full disk hung here for good instead of exiting 3).
            closed.store(true, ordering: .releasing)
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

    /// Before the store answers anything, the flushes replayed from the log are applied: until
    /// then SQLite still holds the flushed namespaces' rows (and the index the writes logged
    /// before the flush), and a read would serve them — an outside review read a namespace's
    /// 20 flushed items after a SIGKILL that caught its FLUSH in flight, gone 50 ms later. The
    /// backlog up to the last flush is at most `--log-limit` of records. While SQLite cannot
    /// write (a full disk) it is retried for up to `wait` seconds (`replayedFlushWait`, 30),
    /// then the open fails with DISK_FULL.
    static func applyReplayedFlushes(_ log: DurabilityLog, wait: Double) throws {
        guard let end = log.replayedFlushEnd else { return }
        let until = monotonicSeconds() + wait
        while true {
            do { return try log.waitApplied(end) } catch let e as StoreError where e.code == .diskFull && monotonicSeconds() < until {
                usleep(200_000)
            } catch let e as StoreError {
                throw StoreError(e.code, "the log holds a FLUSH that SQLite could not apply, and it must be in effect before anything is served: \(e.message)")
            }
        }
    }

    /// A version taken when the store opened: every item with an older version was written
    /// before this open (a cluster client treats such items on a restarted node as unverified).
    public private(set) var openedVersion: UInt64 = 0
    /// A version newer than every one this store has given out or seen.
    public func nextVersion() -> UInt64 { hlc.next() }

    /// Moves the clock past a version seen from a peer (a flush mark), so every later node
    /// version is newer; throws INVALID_ARGUMENT, as for a caller version, when it is more than
    /// `maxVersionSkew` ahead of the clock.
    public func observe(version: UInt64) throws {
        try checkVersion(version, now: clock.nowMicros())
        hlc.observe(version)
    }

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

    /// Per-item write locks (by the item's memory hash): decisions about one item, and the
    /// order its records enter the log, are serialized; other items go on in parallel.
    let writeLocks: [Lock] = (0..<256).map { _ in Lock() }
    /// Full namespace-usage scans (O(items)) shared by concurrent callers, one at a time.
    let usageScans = SharedRun<[[UInt8]: (items: Int, bytes: Int)]>()

    // MARK: Validation

    func check(key: [UInt8], namespace: [UInt8]) throws {
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
    func setOp(_ value: [UInt8], _ options: SetOptions) throws -> WriteOp {
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
    func checkVersion(_ v: UInt64, now: Int64) throws {
        let limit = UInt64(max(0, now)) &+ UInt64(configuration.maxVersionSkew * 1_000_000)
        if v > limit {
            throw StoreError(.invalidArgument, "version \(v) is more than \(Int(configuration.maxVersionSkew)) s ahead of this node's wall clock")
        }
    }

    /// Everything a set is checked for before it changes anything.
    func check(key: [UInt8], namespace: [UInt8], value: [UInt8], options: SetOptions) throws {
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
    func checkVersionedWrite(key: [UInt8], namespace: [UInt8], tiers: Tiers, version: UInt64?) throws {
        try check(key: key, namespace: namespace)
        try check(tiers: tiers)
        if let v = version {
            try checkVersion(v, now: clock.nowMicros())
            hlc.observe(v)
        }
    }

    func check(tiers: Tiers) throws {
        if tiers.isEmpty || !Tiers.all.isSuperset(of: tiers) {
            throw StoreError(.invalidArgument, "tiers must be memory, disk or all")
        }
    }
}
