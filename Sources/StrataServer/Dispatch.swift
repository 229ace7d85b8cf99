import StrataCore
import StrataImage
import StrataStore
import StrataWire

// How each request becomes store calls and a response frame (PROTOCOL.md §7). Pure with
// respect to the network: given the store and a frame, returns the response.

extension Tiers {
    /// Wire tiers: 0 means both.
    init(wire: UInt8) { self = wire == 0 ? .all : Tiers(rawValue: wire & 3) }
}

extension WireExpiry {
    var storeExpiry: Expiry {
        switch self {
        case .storeDefault: return .storeDefault
        case .never: return .never
        case .seconds(let s): return .seconds(Double(s))
        case .at(let t): return .at(unixMicros: t)
        }
    }
}

func status(for e: StoreError) -> Status {
    switch e.code {
    case .invalidKey, .invalidNamespace, .invalidArgument, .tooManyNamespaces: return .invalidArgument
    case .valueTooLarge, .extendedTooLarge: return .tooLarge
    case .diskFull: return .diskFull
    case .closed: return .shuttingDown
    case .busy: return .busy
    default: return .serverError
    }
}

extension Dispatcher {
    /// The status answering a store error, counting the refusals for lack of disk space
    /// (STATS `disk_full_refusals`: a full disk shows in the metrics, an operator's review).
    func refusalStatus(for e: StoreError) -> Status {
        if e.code == .diskFull { stats?.diskFullRefusals.add(1, ordering: .relaxed) }
        return status(for: e)
    }
}

/// A class, not a struct: it is reached through `node.dispatcher` for every request, and a
/// struct holding several class references would be copied (retained and released) each time.
final class Dispatcher: @unchecked Sendable {
    let store: TieredCache
    var stats: NodeStats? = nil
    var leases = LeaseTable(timeout: 10)
    var validateImages = false
    var imagePixelLimit = ImageCodec.defaultPixelLimit
    /// Namespaces listed by STATS `namespaces` and /metrics (`--namespace-stats-limit`).
    var namespaceStatsLimit = 100
    /// /metrics' per-namespace disk usage, counted at most once a minute.
    let namespaceUsage = NamespaceUsageCache()
    var imageDecodeLimit = ImageCodec.defaultDecodeLimit

    /// The node's cluster (`--cluster`), for anti-entropy and the UNVERIFIED flag; nil without one.
    var cluster: ClusterView? = nil
    /// Brings a key up to date from its other replicas before an answer that cannot be flagged
    /// UNVERIFIED (`AntiEntropy.repairForRead`); false when none answered. Set with the cluster.
    var readRepair: (@Sendable (ItemKey) -> Bool)? = nil

    /// Whether a read of the key that cannot carry the UNVERIFIED flag (the memcached listener)
    /// must first be repaired from the key's other replicas: a `--cluster` node that has not
    /// verified the key. One atomic load while everything is verified.
    func mustRepairBeforeRead(namespace: [UInt8], key: [UInt8]) -> Bool {
        guard let c = cluster else { return false }
        // A SIGCONT's first commands may run before any loop's tick noticed the pause (an
        // outside review, cl27: an incr queued during a pause was decided from the old copy).
        pauseCheck?()
        return !c.isVerified(namespace: namespace, key: key)
    }
    /// Notices a pause before a read is answered (`Node.checkPause`); set with `cluster`.
    var pauseCheck: (@Sendable () -> Void)? = nil
    /// Hinted handoff: told of every write applied to the disk tier; nil without a cluster.
    var handoff: Handoff? = nil
    /// Anti-entropy's maintained digests (nil without `--cluster`, or before the cluster starts).
    var syncDigests: SyncDigests? = nil
    /// Flush marks (versioned FLUSH): set with `cluster`.
    var flushMarks: FlushMarks? = nil

    init(store: TieredCache) { self.store = store }
    /// Concurrent requests for the same variant share one computation.
    let variantFlights = SingleFlight<ItemKey, (bytes: [UInt8], width: Int, height: Int, stored: Bool)>()

    /// Which variants belong to which original (dropped when the original changes).
    let lineage = VariantLineage()
    /// Runs a job in the background (the node's disk workers); false when it cannot be queued.
    var background: (@escaping () -> Void) -> Bool = { _ in false }

    /// After a SET: counts a stored image, revokes the key's lease unless this SET was the
    /// lease's own fill (a fill loaded before this write must not land), drops old variants,
    /// hints the key's other replicas (`Handoff`).
    func setDone(_ s: SetRequest, _ out: SetOutcome) {
        guard case .stored(let version) = out else { return }
        replicated(s.namespace, s.key, version, tiers: Tiers(wire: s.tiers))
        countImage(s, out)
        let id = ItemKey(namespace: s.namespace, key: s.key)
        if s.mode != .lease { leases.revoke(id) }
        originalChanged(id)
    }

    /// True when the request can be answered on the event loop without touching the disk.
    static func runsOnLoop(_ r: Request) -> Bool {
        switch r {
        case .ping, .hello, .quit, .stats, .release: return true
        case .set(let s): return Tiers(wire: s.tiers) == .memory && s.mode != .lease
        case .invalidate(_, _, let tiers, _): return Tiers(wire: tiers) == .memory
        case .delete(_, _, let tiers, _, _), .touch(_, _, let tiers, _, _, _): return Tiers(wire: tiers) == .memory
        case .counter(let c): return Tiers(wire: c.tiers) == .memory
        default: return false
        }
    }

    /// A memory-tier hit for a plain GET, answered on the loop; nil means "go to a worker".
    /// A GET asking for a lease is answered here only when it needs none (a fresh hit).
    func memoryHit(_ g: GetRequest, _ f: Frame) -> Frame? {
        guard g.touch == nil, !g.wantMeta, Tiers(wire: g.tiers).contains(.memory),
              let item = try? store.memoryHit(g.key, namespace: g.namespace) else { return nil }
        if g.lease && needsLease(.hit(item), g) { return nil }
        return markUnverified(.get(g), hitResponse(item, f))
    }

    func payload(_ item: CacheItem) -> ItemPayload {
        ItemPayload(value: item.value, flags: item.flags, expiresAt: item.expiresAt ?? 0, extended: item.extended,
                    version: item.version, tier: item.tier.rawValue, stale: item.stale, negative: item.negative)
    }

    /// A GET's answer for an item: OK (STALE flagged when stale) or NEGATIVE; counted.
    func hitResponse(_ item: CacheItem, _ f: Frame, meta: MetaBlock? = nil) -> Frame {
        if item.negative { stats?.negativeHits.add() } else if item.stale { stats?.staleHits.add() }
        var p = payload(item)
        p.meta = meta
        return Responses.get(to: f, p)
    }

    /// Whether a read result calls for the key's lease: a miss, a stale item, or a hit within
    /// the request's refresh-ahead window of its expiry. Never a negative entry.
    func needsLease(_ r: TieredCache.ReadResult, _ g: GetRequest) -> Bool {
        switch r {
        case .miss, .tombstone: return true
        case .hit(let item):
            if item.negative { return false }
            if item.stale { return true }
            guard g.refreshAheadMillis > 0, let e = item.expiresAt else { return false }
            return e - store.clock.nowMicros() <= Int64(g.refreshAheadMillis) * 1000
        }
    }

    /// GET with LEASE (PROTOCOL.md §7.4.1). The read, then the lease if the result needs one;
    /// after a grant the key is read again, so a fill that released its lease just before
    /// this grant is seen (and the new lease given back) instead of loading twice.
    func leaseGet(_ g: GetRequest, _ f: Frame) throws -> Frame {
        let id = ItemKey(namespace: g.namespace, key: g.key)
        let tiers = Tiers(wire: g.tiers)
        var result = try store.read(g.key, namespace: g.namespace, tiers: tiers, touch: g.touch?.storeExpiry)
        if g.touch != nil, case .hit = result { originalChanged(id) }
        var lease: UInt64?? = nil // nil: no lease business; .some(nil): filling; .some(t): granted
        if needsLease(result, g) {
            switch leases.acquire(id) {
            case .granted(let token):
                let again = try store.read(g.key, namespace: g.namespace, tiers: tiers)
                if needsLease(again, g) {
                    lease = .some(token)
                    stats?.leasesGranted.add()
                } else {
                    leases.release(id, token: token)
                }
                result = again
            case .held:
                lease = .some(nil)
                stats?.leasesFilling.add()
            case .full:
                break
            }
        }
        let response: Frame
        switch result {
        case .hit(let item): response = hitResponse(item, f)
        case .miss: response = Responses.status(to: f, .notFound, cas: missVersion(g.namespace, g.key))
        case .tombstone(let v): response = Responses.status(to: f, .notFound, cas: v)
        }
        guard let l = lease else { return response }
        return Responses.withLease(response, token: l)
    }

    /// The version a GET miss carries (PROTOCOL.md §7.4): on a `--cluster` node, the flush mark
    /// in force for the namespace — so a cluster client weighing it against another replica's
    /// copy sees that a flush is newer than a copy that replica still holds (an outside review,
    /// cl19: a replica resuming from a pause served values of a namespace flushed meanwhile) —
    /// or, when newer, the delete below a write of the key the disk limit removed here
    /// (`EvictedVersions`: cl23, a returning replica's older copy read over the evicting
    /// owner's miss); else 0.
    func missVersion(_ namespace: [UInt8], _ key: [UInt8]) -> UInt64 {
        guard let marks = flushMarks else { return 0 }
        return max(marks.floor(namespace) ?? 0, store.evictedDelete(key, namespace: namespace)?.deleteVersion ?? 0)
    }

    static func setOptions(_ s: SetRequest) -> SetOptions {
        let mode: SetMode
        switch s.mode {
        case .set: mode = .set
        case .add: mode = .add
        case .replace: mode = .replace
        case .cas: mode = .cas(s.casVersion)
        case .lease: mode = .set // the lease was checked by the dispatcher
        }
        var o = SetOptions(mode: mode, expiry: s.expiry.storeExpiry, flags: s.flags, extended: s.extended, tiers: Tiers(wire: s.tiers),
                           version: s.version == 0 ? nil : s.version, writeBehind: s.writeBehind)
        o.negative = s.negative
        o.stale = s.stale
        return o
    }

    static func setResponse(_ out: SetOutcome, _ f: Frame) -> Frame? {
        switch out {
        case .stored(let v): return f.requestFlags.contains(.quiet) ? nil : Responses.status(to: f, .ok, cas: v)
        case .exists: return Responses.status(to: f, .exists)
        case .notFound: return Responses.status(to: f, .notFound)
        case .casMismatch(let cur): return Responses.status(to: f, .casMismatch, cas: cur)
        case .superseded(let cur): return Responses.status(to: f, .superseded, cas: cur)
        }
    }

    /// Runs `r` against the store (may block on the disk tier). Nil = no response (QUIET success).
    /// `caller`: the connection's user — STATS `namespaces` lists only what it may read
    /// (`User.mayRead`), and the flush marks its FLUSHes make count toward its bound.
    func execute(_ r: Request, _ f: Frame, caller: User = .open) -> Frame? {
        if let refused = refusedUnverified(r, f) { return refused }
        let visible: (@Sendable ([UInt8]) -> Bool)? = caller.role == .admin ? nil : { @Sendable in caller.mayRead($0) }
        // A QUIET read of a key this node has not verified is answered all the same (flagged
        // UNVERIFIED below): the client must learn that its miss may be old (an outside review,
        // px2: a QUIET GET miss on an unverified node got no answer at all).
        var f = f
        if f.requestFlags.contains(.quiet), mayBeUnverified(r) { f.flags &= ~RequestFlags.quiet.rawValue }
        guard let response = executeOnStore(r, f, visible: visible, owner: caller.role == .admin ? nil : caller.name) else { return nil }
        // A read that bailed from the loop runs again on a worker: flagged (and counted) there.
        if InlineDiskRead.hasBailed { return response }
        return markUnverified(r, response)
    }

    private func executeOnStore(_ r: Request, _ f: Frame, visible: (@Sendable ([UInt8]) -> Bool)?, owner: String?) -> Frame? {
        let quiet = f.requestFlags.contains(.quiet)
        func ok(cas: UInt64 = 0) -> Frame? { quiet ? nil : Responses.status(to: f, .ok, cas: cas) }
        do {
            switch r {
            case .get(let g) where g.lease:
                return try leaseGet(g, f)
            case .get(let g):
                let item: CacheItem
                switch try store.read(g.key, namespace: g.namespace, tiers: Tiers(wire: g.tiers), touch: g.touch?.storeExpiry) {
                case .hit(let i):
                    item = i
                    if g.touch != nil { originalChanged(ItemKey(namespace: g.namespace, key: g.key)) }
                case .miss: return quiet ? nil : Responses.status(to: f, .notFound, cas: missVersion(g.namespace, g.key))
                // The tombstone's version lets a cluster client see that a delete is the newest write.
                case .tombstone(let v): return quiet ? nil : Responses.status(to: f, .notFound, cas: v)
                }
                var meta: MetaBlock? = nil
                if g.wantMeta, let m = try store.metadata(g.key, namespace: g.namespace) {
                    meta = MetaBlock(tiersPresent: m.tiers.rawValue, encoding: m.encoding?.rawValue ?? 255,
                                     storedSize: UInt32(clamping: m.storedSize ?? 0))
                }
                return hitResponse(item, f, meta: meta)
            case let .mget(ns, keys, tiers):
                // One large value asked for many times must not make a response (nor hold values)
                // of gigabytes: the reads stop as soon as the answer would pass the frame limit (an
                // outside review's 1,024 × 1 MiB MGET took the node to 1 GiB before answering).
                let limit = store.configuration.maxItemBytes + (64 << 10)
                var items: [CacheItem?] = []
                items.reserveCapacity(keys.count)
                var total = 0
                for k in keys {
                    // Negative entries read as absent here (MGET has no per-item status).
                    let item = try store.get(k, namespace: ns, tiers: Tiers(wire: tiers)).flatMap { $0.negative ? nil : $0 }
                    total += (item?.value.count ?? 0) + 25
                    if total > limit {
                        return Responses.error(to: f, .tooLarge, "the MGET answer would be over the frame limit of \(limit) bytes: ask for fewer keys")
                    }
                    items.append(item)
                }
                return Responses.mget(to: f, items.map { $0.map { MGetItem(flags: $0.flags, expiresAt: $0.expiresAt ?? 0, version: $0.version, value: $0.value) } })
            case .set(let s):
                if needsImageValidation(s) {
                    do { try ImageCodec.validate(s.value, pixelLimit: imagePixelLimit, decodeLimit: imageDecodeLimit) } catch {
                        return Responses.error(to: f, .invalidImage, error.message)
                    }
                }
                let id = ItemKey(namespace: s.namespace, key: s.key)
                if s.mode == .lease && !leases.holds(id, token: s.casVersion) {
                    stats?.leasesLost.add()
                    return Responses.error(to: f, .leaseLost, "the lease expired or was revoked (the key was written, deleted, invalidated or flushed); the value was not stored")
                }
                let out = try store.set(s.key, s.value, namespace: s.namespace, options: Self.setOptions(s))
                if s.mode == .lease { leases.release(id, token: s.casVersion) }
                setDone(s, out)
                return Self.setResponse(out, f)
            case let .delete(ns, key, tiers, version, writeBehind):
                defer { leases.revoke(ItemKey(namespace: ns, key: key)) }
                // In a cluster every disk delete leaves a tombstone, so anti-entropy spreads the
                // delete instead of copying the item back from a replica (§7.19).
                let v = version ?? (cluster != nil && Tiers(wire: tiers).contains(.disk) ? store.nextVersion() : nil)
                let removed = try store.remove(key, namespace: ns, tiers: Tiers(wire: tiers), version: v, writeBehind: writeBehind)
                if let v, !writeBehind, removed == .removed || removed == .notFound { replicated(ns, key, v, tiers: Tiers(wire: tiers), tombstone: true) }
                switch removed {
                case .removed:
                    originalChanged(ItemKey(namespace: ns, key: key))
                    return ok()
                case .notFound: return quiet ? nil : Responses.status(to: f, .notFound)
                case .superseded(let cur): return Responses.status(to: f, .superseded, cas: cur)
                }
            case let .invalidate(ns, key, tiers, version):
                // Revoked even when nothing was stored: a fill that started before must not land.
                defer { leases.revoke(ItemKey(namespace: ns, key: key)) }
                // QUIET does not silence INVALIDATE's answers (§2.1).
                switch try store.invalidate(key, namespace: ns, tiers: Tiers(wire: tiers), version: version) {
                case .invalidated(let v):
                    originalChanged(ItemKey(namespace: ns, key: key))
                    replicated(ns, key, v, tiers: Tiers(wire: tiers))
                    return Responses.status(to: f, .ok, cas: v)
                case .notFound: return Responses.status(to: f, .notFound)
                case .superseded(let cur): return Responses.status(to: f, .superseded, cas: cur)
                }
            case let .release(ns, key, token):
                // QUIET does not silence RELEASE's answers (§2.1).
                return Responses.status(to: f, leases.release(ItemKey(namespace: ns, key: key), token: token) ? .ok : .notFound)
            case let .touch(ns, key, tiers, expiry, version, _):
                let v: UInt64
                switch try store.touch(key, namespace: ns, expiry: expiry.storeExpiry, tiers: Tiers(wire: tiers), version: version == 0 ? nil : version) {
                case .touched(let t): v = t
                case .notFound: return quiet ? nil : Responses.status(to: f, .notFound)
                case .superseded(let current): return Responses.status(to: f, .superseded, cas: current)
                }
                originalChanged(ItemKey(namespace: ns, key: key))
                replicated(ns, key, v, tiers: Tiers(wire: tiers))
                return ok(cas: v)
            case let .exists(ns, key, tiers):
                return try store.contains(key, namespace: ns, tiers: Tiers(wire: tiers)) ? ok() : (quiet ? nil : Responses.status(to: f, .notFound))
            case .counter(let c):
                let version = c.version == 0 ? nil : c.version
                let out = c.decrement
                    ? try store.decrement(c.key, by: c.delta, namespace: c.namespace, tiers: Tiers(wire: c.tiers), initial: c.initial,
                                          expiry: c.expiry.storeExpiry, version: version)
                    : try store.increment(c.key, by: c.delta, namespace: c.namespace, tiers: Tiers(wire: c.tiers), initial: c.initial,
                                          expiry: c.expiry.storeExpiry, version: version)
                switch out {
                case .value(let v, let version):
                    leases.revoke(ItemKey(namespace: c.namespace, key: c.key))
                    replicated(c.namespace, c.key, version, tiers: Tiers(wire: c.tiers))
                    return quiet ? nil : Responses.counter(to: f, value: v, version: version)
                case .notFound: return quiet ? nil : Responses.status(to: f, .notFound)
                case .notANumber: return Responses.error(to: f, .notANumber, "the stored value is not a decimal counter (1–20 digits, at most 2^64−1)")
                case .superseded(let current): return Responses.status(to: f, .superseded, cas: current)
                }
            case let .meta(ns, key, tiers):
                guard let m = try store.metadata(key, namespace: ns, tiers: Tiers(wire: tiers)) else {
                    return Responses.status(to: f, .notFound)
                }
                var info = MetaInfo(tiersPresent: m.tiers.rawValue, encoding: m.encoding?.rawValue ?? 255,
                                    size: UInt32(clamping: m.size), storedSize: Int64(m.storedSize ?? -1),
                                    expiresAt: m.expiresAt ?? 0, version: m.version, flags: m.flags,
                                    extendedSize: UInt32(m.extendedSize))
                // Image facts come from the value's headers (no pixels are decoded).
                // Read without counting a hit or an access (META is not a read of the value).
                if m.size >= 12, let value = try store.peekValue(key, namespace: ns, tiers: Tiers(wire: tiers)),
                   let image = try? ImageCodec.inspect(value, pixelLimit: Int.max) {
                    info.imageFormat = image.format.rawValue
                    info.imageWidth = UInt32(clamping: image.width)
                    info.imageHeight = UInt32(clamping: image.height)
                    info.imageFlags = (image.hasAlpha ? 1 : 0) | (image.animated ? 2 : 0)
                    info.imageFrames = UInt16(clamping: image.frameCount)
                }
                return Responses.meta(to: f, info)
            case let .scan(ns, cursor, limit):
                let page = try store.keys(namespace: ns, after: cursor.isEmpty ? nil : cursor, limit: Int(limit))
                // Image variants live under derived keys (key, 0x00, "variant:…"): not the user's
                // keys. A page ends early, at the last key that fits, rather than pass the frame
                // limit (10,000 long keys under a small --max-item made a 2 MB page).
                let room = store.configuration.maxItemBytes + (64 << 10) - 64 - ItemLimits.maxKeyBytes
                var visible: [[UInt8]] = []
                var bytes = 0
                var next = page.next
                for (i, k) in page.keys.enumerated() where VariantLineage.original(of: k) == nil {
                    if bytes + 2 + k.count > room && !visible.isEmpty {
                        next = page.keys[i - 1]
                        break
                    }
                    bytes += 2 + k.count
                    visible.append(k)
                }
                return Responses.scan(to: f, keys: visible, next: next)
            case let .flush(ns, all, tiers, version):
                return try flushRequest(ns, all: all, tiers: tiers, version: version, owner: owner, f)
            case .namespaceStats(let q):
                return Responses.stats(to: f, json: try NamespaceStats.json(q, store: store, limit: namespaceStatsLimit, visible: visible))
            case let .imageInfo(ns, key):
                guard let item = try store.get(key, namespace: ns), !item.negative else { return Responses.status(to: f, .notFound) }
                do {
                    let i = try ImageCodec.inspect(item.value, pixelLimit: Int.max)
                    return Responses.imageInfo(to: f, format: i.format.rawValue, width: UInt32(clamping: i.width), height: UInt32(clamping: i.height),
                                               flags: (i.hasAlpha ? 1 : 0) | (i.animated ? 2 : 0), frames: UInt16(clamping: i.frameCount),
                                               version: item.version)
                } catch { return Responses.error(to: f, .invalidImage, error.message) }
            case .imageVariant(let v):
                return try variant(v, f)
            case .syncDigest(let s):
                return try syncDigest(s, f)
            case .syncKeys(let s):
                return try syncKeys(s, f)
            case .syncCheck(let s):
                return try syncCheck(s, f)
            case .ping, .quit, .hello, .stats:
                return ok() // answered by the connection itself; kept total for safety
            }
        } catch let e as StoreError {
            // The store's own BUSY (a capacity bound: flush marks, write-behind) counts as the
            // node's BUSY answers do.
            // A read that bailed from the event loop (`InlineDiskRead`) is no refusal: it runs
            // again on a worker (an outside review, sec8: busy_refusals rose with disk hits).
            if e.code == .busy && !InlineDiskRead.hasBailed { stats?.busyRefusals.add(1, ordering: .relaxed) }
            return Responses.error(to: f, refusalStatus(for: e), e.message)
        } catch {
            return Responses.error(to: f, .serverError, "\(error)")
        }
    }
}
