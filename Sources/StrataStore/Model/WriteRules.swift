/// One write, resolved to absolute times, ready to be applied to whatever a tier holds.
enum WriteOp: Sendable {
    /// `marks`: `ItemMarks.stale`/`.negative` bits the stored item carries (never tombstone).
    case set(value: [UInt8], mode: SetMode, flags: UInt32, extended: [UInt8], expiry: Int64, callerVersion: UInt64?, marks: UInt8)
    case remove(callerVersion: UInt64?, tombstoneExpiry: Int64)
    /// Marks a live item stale (value kept) with a new version.
    case invalidate(callerVersion: UInt64?)
    case touch(expiry: Int64, callerVersion: UInt64?)
    case counter(delta: UInt64, decrement: Bool, initial: UInt64?, expiry: Int64, callerVersion: UInt64?)
}

extension WriteOp {
    /// The version the caller gave the write (a replica's copy), nil for one the store versions.
    var callerVersion: UInt64? {
        switch self {
        case let .set(_, _, _, _, _, v, _): return v
        case let .remove(v, _): return v
        case let .invalidate(v): return v
        case let .touch(_, v): return v
        case let .counter(_, _, _, _, v): return v
        }
    }
}

enum WriteResult: Sendable, Equatable {
    case set(SetOutcome)
    case remove(RemoveOutcome)
    case invalidate(InvalidateOutcome)
    case touch(found: Bool, version: UInt64)
    /// A TOUCH whose caller version is not newer than the stored one (it ran late).
    case touchSuperseded(current: UInt64)
    case counter(CounterOutcome)
}

/// What to do to the tier after deciding.
enum WriteEffect: Sendable {
    case none
    case store(ItemState)
    case delete
}

/// The rules of every write, as one pure function: modes, CAS, newer-version-wins,
/// tombstones, counters. Both tiers apply writes through it, so they agree.
enum WriteRules {
    /// `oldestLive`: an existing item with an older version counts as absent (the store's
    /// `maxAge`); it still guards against caller versions not newer than its own.
    static func decide(_ op: WriteOp, existing: ItemState?, now: Int64, newVersion: UInt64,
                       oldestLive: UInt64 = 0) -> (WriteResult, WriteEffect) {
        let live = existing.flatMap { $0.isLive(now: now, oldestVersion: oldestLive) ? $0 : nil }
        // A negative entry (a cached load failure) reads as a miss, and counts as absent for
        // every write's condition too: add stores over it; replace, CAS, touch and a counter
        // without an initial value find nothing; a delete removes it and reports NOT_FOUND.
        let present = live.flatMap { $0.negative ? nil : $0 }
        let guardVersion = existing.flatMap { $0.guards(now: now) ? $0.version : nil }
        switch op {
        case let .set(value, mode, flags, extended, expiry, callerVersion, marks):
            if let cv = callerVersion, let g = guardVersion, g >= cv { return (.set(.superseded(current: g)), .none) }
            switch mode {
            case .set: break
            case .add: if present != nil { return (.set(.exists), .none) }
            case .replace: if present == nil { return (.set(.notFound), .none) }
            case .cas(let v):
                guard let l = present else { return (.set(.notFound), .none) }
                if l.version != v { return (.set(.casMismatch(current: l.version)), .none) }
            }
            let state = ItemState(value: value, flags: flags, extended: extended, expiry: expiry, version: newVersion,
                                  marks: marks & (ItemMarks.stale | ItemMarks.negative))
            return (.set(.stored(version: newVersion)), .store(state))

        case let .remove(callerVersion, tombstoneExpiry):
            if let cv = callerVersion {
                if let g = guardVersion, g >= cv { return (.remove(.superseded(current: g)), .none) }
                // A versioned remove leaves a tombstone even for an absent key, so an older
                // write that arrives later cannot resurrect it.
                let tomb = ItemState(value: [], flags: 0, extended: [], expiry: tombstoneExpiry, version: cv, tombstone: true)
                return (.remove(present == nil ? .notFound : .removed), .store(tomb))
            }
            guard let l = live else { return (.remove(.notFound), .none) }
            if l.negative { return (.remove(.notFound), .delete) }
            return (.remove(.removed), .delete)

        case let .invalidate(callerVersion):
            if let cv = callerVersion, let g = guardVersion, g >= cv { return (.invalidate(.superseded(current: g)), .none) }
            // A negative entry is not a value to serve stale; invalidating it just removes it.
            guard var l = live else { return (.invalidate(.notFound), .none) }
            // A negative entry is removed, as DELETE does, and reported NOT_FOUND as DELETE reports it:
            // there was no value to mark stale.
            if l.negative { return (.invalidate(.notFound), .delete) }
            l.marks |= ItemMarks.stale
            l.version = newVersion
            return (.invalidate(.invalidated(version: newVersion)), .store(l))

        case let .touch(expiry, callerVersion):
            if let cv = callerVersion, let g = guardVersion, g >= cv { return (.touchSuperseded(current: g), .none) }
            guard var l = present else { return (.touch(found: false, version: 0), .none) }
            l.expiry = expiry
            l.version = newVersion
            return (.touch(found: true, version: newVersion), .store(l))

        case let .counter(delta, decrement, initial, expiry, callerVersion):
            // With a caller version, a late INCR (one that timed out and ran after newer
            // writes reached this node) changes nothing: its result would be older than them.
            if let cv = callerVersion, let g = guardVersion, g >= cv { return (.counter(.superseded(current: g)), .none) }
            guard var l = present else {
                guard let start = initial else { return (.counter(.notFound), .none) }
                let state = ItemState(value: Array(String(start).utf8), flags: 0, extended: [], expiry: expiry, version: newVersion, tombstone: false)
                return (.counter(.value(start, version: newVersion)), .store(state))
            }
            guard let current = parseCounter(l.value) else { return (.counter(.notANumber), .none) }
            let next = nextCounter(current, delta: delta, decrement: decrement)
            l.value = Array(String(next).utf8)
            l.version = newVersion
            l.marks = 0
            return (.counter(.value(next, version: newVersion)), .store(l))
        }
    }

    /// memcached semantics: increments wrap at 2^64, decrements stop at 0.
    static func nextCounter(_ current: UInt64, delta: UInt64, decrement: Bool) -> UInt64 {
        decrement ? (current >= delta ? current - delta : 0) : current &+ delta
    }

    /// A decimal counter: 1–20 ASCII digits that fit in a UInt64.
    static func parseCounter(_ bytes: [UInt8]) -> UInt64? {
        guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
        var v: UInt64 = 0
        for b in bytes {
            guard b >= 48, b <= 57 else { return nil }
            let (m, o1) = v.multipliedReportingOverflow(by: 10)
            let (a, o2) = m.addingReportingOverflow(UInt64(b - 48))
            if o1 || o2 { return nil }
            v = a
        }
        return v
    }
}
