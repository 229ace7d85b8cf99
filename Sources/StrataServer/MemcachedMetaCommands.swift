import StrataCore
import StrataStore
import StrataWire

// The meta commands (proto-spec/MEMCACHED.md §7) mapped onto TieredCache, like the classic
// ones: mg (get, touch), ms (set modes, CAS, invalidate), md (delete, invalidate), ma
// (incr/decr with autovivify), mn, me. Return flags come back in the order they were asked.
extension MemcachedListener {
    /// `mayTakeLeases`: false for a user who may not write the listener's namespace (a
    /// readonly user): a stale item is served with X but no W/Z — a lease is a promise to fill.
    /// `changed`: set when the command changed the key (an `ms` that stored, an `ma` that
    /// counted, an `md` that was not refused): `execute` then revokes its lease and hands it on.
    func meta(_ m: MemcachedMeta, into out: inout [UInt8], mayTakeLeases: Bool = true, changed: inout Bool) throws {
        if let refusal = Self.unsupported(m) { return error(refusal, into: &out) }
        do {
            try runMeta(m, into: &out, mayTakeLeases: mayTakeLeases, changed: &changed)
        } catch let e as StoreError where e.code == .invalidArgument {
            // A bad E version (too far ahead of the node's clock), a bad key: the client's.
            error("CLIENT_ERROR \(e.message)", into: &out)
        }
    }

    /// The CLIENT_ERROR for a flag memcached defines that Strata cannot honour (MEMCACHED.md
    /// §7.2), rather than ignoring it; nil when every flag of `m` is served.
    static func unsupported(_ m: MemcachedMeta) -> String? {
        switch m.verb {
        case .get:
            if m.has("h") { return "CLIENT_ERROR flag h is not supported: the store keeps no per-item hit record" }
            if m.has("l") { return "CLIENT_ERROR flag l is not supported: the store keeps no per-item last-access time to return" }
            if m.has("u") { return "CLIENT_ERROR flag u is not supported: every read counts as an access for eviction" }
            if m.has("E") { return "CLIENT_ERROR flag E is not supported with mg: N does not create an item here" }
        case .arithmetic:
            if m.has("E") { return "CLIENT_ERROR flag E is not supported with ma: counters take the node's versions" }
            if m.has("T") { return "CLIENT_ERROR flag T is not supported with ma: set the TTL with N on creation, or touch" }
        case .set:
            if m.has("N") { return "CLIENT_ERROR flag N is not supported with ms: an append or prepend to a missing key is NS" }
        case .delete:
            if m.has("T") { return "CLIENT_ERROR flag T is not supported with md: an invalidated item keeps its TTL" }
        default: break
        }
        return nil
    }

    private func runMeta(_ m: MemcachedMeta, into out: inout [UInt8], mayTakeLeases: Bool, changed: inout Bool) throws {
        let quiet = m.has("q")
        switch m.verb {
        case .noop:
            MemcachedResponse.line("MN", into: &out)
        case .get:
            try metaGet(m, quiet: quiet, into: &out, mayTakeLeases: mayTakeLeases)
        case .set:
            // A mode other than set, or C: decided from this node's copy (`unverifiedRefusal`).
            if m.token("M").map({ $0 != [UInt8(ascii: "S")] && $0 != [UInt8(ascii: "s")] }) == true || m.number("C") != .absent,
               let refused = unverifiedRefusal(m.key) { return error(refused, into: &out) }
            let (code, item) = try metaSet(m)
            changed = code == "HD"
            if code.hasPrefix("SERVER_ERROR") || code.hasPrefix("CLIENT_ERROR") { return error(code, into: &out) }
            if quiet && code == "HD" { return }
            MemcachedResponse.line(code + returnFlags(m, item: item, allowed: "bkcOs"), into: &out)
        case .delete:
            if m.number("C") != .absent, let refused = unverifiedRefusal(m.key) { return error(refused, into: &out) }
            let code = try metaDelete(m)
            changed = code == "HD" || code == "NF"
            if code.hasPrefix("CLIENT_ERROR") { return error(code, into: &out) }
            if quiet && (code == "HD" || code == "NF") { return }
            MemcachedResponse.line(code + returnFlags(m, item: nil, allowed: "bkO"), into: &out)
        case .arithmetic:
            if let refused = unverifiedRefusal(m.key) { return error(refused, into: &out) }
            changed = try metaArithmetic(m, quiet: quiet, into: &out)
        case .debug:
            guard let item = try store.get(m.key, namespace: namespace, tiers: tiers), !item.negative else {
                MemcachedResponse.line("EN", into: &out)
                return
            }
            let key = String(decoding: m.has("b") ? Base64.encode(m.key) : m.key, as: UTF8.self)
            MemcachedResponse.line("ME \(key) exp=\(ttl(item)) la=0 cas=\(item.version) fetch=no cls=1 size=\(item.value.count)", into: &out)
        }
    }

    /// " W" when this client takes the key's lease (it should fill the key), else " Z".
    func win(_ key: [UInt8]) -> String {
        if case .granted = dispatcher.leases.acquire(ItemKey(namespace: namespace, key: key)) {
            dispatcher.stats?.leasesGranted.add()
            return " W"
        }
        dispatcher.stats?.leasesFilling.add()
        return " Z"
    }

    /// Seconds left before the item expires, -1 for none.
    func ttl(_ item: CacheItem) -> Int64 {
        guard let e = item.expiresAt else { return -1 }
        return max(0, (e - store.clock.nowMicros() + 999_999) / 1_000_000)
    }

    /// " f.. c.. …" for the flags of `m` among `allowed`, in the order they were sent.
    /// `gone`: with no item, the CAS of a write whose item has already expired (`c` that, `t0`).
    func returnFlags(_ m: MemcachedMeta, item: CacheItem?, allowed: String, gone: UInt64? = nil) -> String {
        var s = ""
        for f in m.flags where allowed.utf8.contains(f.letter) {
            switch f.letter {
            case UInt8(ascii: "b"): s += " b"
            case UInt8(ascii: "k"): s += " k" + String(decoding: m.has("b") ? Base64.encode(m.key) : m.key, as: UTF8.self)
            case UInt8(ascii: "O"): s += " O" + String(decoding: f.token, as: UTF8.self)
            case UInt8(ascii: "c"): if let i = item { s += " c\(i.version)" } else if let g = gone { s += " c\(g)" }
            case UInt8(ascii: "f"): if let i = item { s += " f\(i.flags)" }
            case UInt8(ascii: "s"): if let i = item { s += " s\(i.value.count)" }
            case UInt8(ascii: "t"): if let i = item { s += " t\(ttl(i))" } else if gone != nil { s += " t0" }
            default: break
            }
        }
        return s
    }

    private func metaGet(_ m: MemcachedMeta, quiet: Bool, into out: inout [UInt8], mayTakeLeases: Bool) throws {
        // N and R need their number (memcached refuses the flag alone); T is checked below.
        if m.number("N") == .invalid || m.number("R") == .invalid {
            return error("CLIENT_ERROR bad token in command line format", into: &out)
        }
        if m.number("T") == .invalid {
            return error("CLIENT_ERROR bad token in command line format", into: &out)
        }
        // A key this node has not verified is read from its replicas first (`repaired`); none
        // answering, it is a miss (and not touched: the copy here may be old).
        let known = repaired(m.key)
        // R is judged on the TTL the item had before this command's own touch (T): otherwise
        // `mg k R30 T100` of an item with 10 s left never won its refresh (an outside review, mc11).
        var inRefreshWindow = false
        if known, case .value(let r) = m.number("R"), m.number("T") != .absent,
           let before = try store.get(m.key, namespace: namespace, tiers: tiers), !before.negative, before.expiresAt != nil {
            inRefreshWindow = ttl(before) < r
        }
        if known, case .value(let t) = m.number("T") {
            // A touch revokes no lease (`touched`): a win handed out before stands.
            if try store.touchVersioned(m.key, namespace: namespace, expiry: expiry(t), tiers: tiers) != nil {
                touchHits.add()
                touched(m.key)
            } else { touchMisses.add() }
        }
        guard known, let item = try store.get(m.key, namespace: namespace, tiers: tiers), !item.negative else {
            getMisses.add()
            // N: the first client to miss wins the right to fill (W; Strata's read-through
            // lease on the key), the others are told someone is filling (Z). Answered as a hit
            // of an empty value, as memcached's vivified item.
            if m.number("N") != .absent {
                let flags = returnFlags(m, item: nil, allowed: "bkO") + win(m.key)
                MemcachedResponse.line((m.has("v") ? "VA 0" : "HD") + flags, into: &out)
                if m.has("v") { out.append(contentsOf: [13, 10]) }
                return
            }
            // The miss keeps the flags that name the request (as memcached 1.6: `EN k… O…`).
            if !quiet { MemcachedResponse.line("EN" + returnFlags(m, item: nil, allowed: "bkO"), into: &out) }
            return
        }
        getHits.add()
        var flags = returnFlags(m, item: item, allowed: "bkcfOstv")
        // A stale (invalidated) item is served with X, and one client wins its refill (W);
        // R<seconds>: so is an item that expires within that many seconds.
        var recache = item.stale || inRefreshWindow
        // (With T the window was judged above, on the TTL before the touch.)
        if case .value(let r) = m.number("R"), m.number("T") == .absent, item.expiresAt != nil, ttl(item) < r { recache = true }
        // Not for a user who may not fill it (outside review sec3: a readonly user's plain `mg`
        // of stale items took every lease, and no writer could refresh them).
        if recache && mayTakeLeases { flags += win(m.key) }
        if item.stale { flags += " X" }
        if m.has("v") {
            MemcachedResponse.line("VA \(item.value.count)" + flags, into: &out)
            out.append(contentsOf: item.value)
            out.append(contentsOf: [13, 10])
        } else {
            MemcachedResponse.line("HD" + flags, into: &out)
        }
    }

    /// The answer code of an ms, and the item as stored (for c, s, …).
    private func metaSet(_ m: MemcachedMeta) throws -> (String, CacheItem?) {
        var o = SetOptions()
        o.tiers = tiers
        switch m.number("F") {
        case .absent: break
        case .value(let f) where f >= 0 && f <= Int64(UInt32.max): o.flags = UInt32(f)
        default: return ("CLIENT_ERROR bad token in command line format", nil)
        }
        switch m.number("T") {
        case .absent: o.expiry = .storeDefault
        case .value(let t): o.expiry = expiry(t)
        default: return ("CLIENT_ERROR bad token in command line format", nil)
        }
        let cas = m.number("C")
        if cas == .invalid { return ("CLIENT_ERROR bad token in command line format", nil) }
        // E: the item's new CAS is this version (the store's caller version: newer wins).
        switch m.number("E") {
        case .absent: break
        case let e where (e.uint64 ?? 0) > 0: o.version = e.uint64
        default: return ("CLIENT_ERROR bad token in command line format", nil)
        }
        if let t = m.token("M"), t.count != 1 { return ("CLIENT_ERROR incorrect length for M token", nil) }
        let mode = m.token("M").flatMap { $0.first } ?? UInt8(ascii: "S")
        var verb: MemcachedStoreVerb
        switch mode {
        case UInt8(ascii: "S"), UInt8(ascii: "s"): verb = .set
        case UInt8(ascii: "E"), UInt8(ascii: "e"): verb = .add
        case UInt8(ascii: "R"), UInt8(ascii: "r"): verb = .replace
        case UInt8(ascii: "A"), UInt8(ascii: "a"): verb = .append
        case UInt8(ascii: "P"), UInt8(ascii: "p"): verb = .prepend
        default: return ("CLIENT_ERROR invalid mode for ms M token", nil)
        }
        if cas.uint64 != nil {
            guard verb == .set else { return ("CLIENT_ERROR C with a mode other than set is not supported", nil) }
            verb = .cas
        }
        var answer: String
        if m.has("I"), let c = cas.uint64, let stale = try staleSet(m, compare: c, options: o) {
            answer = stale
        } else if m.has("I") && cas.uint64 == nil {
            return ("CLIENT_ERROR I with ms needs C<cas>", nil)
        } else {
            let command = MemcachedStore(verb: verb, key: m.key, flags: o.flags, exptime: 0, value: m.value, casUnique: cas.uint64)
            do { answer = try storeWith(command, options: o) } catch let e as StoreError where e.code == .valueTooLarge && verb != .set {
                try unlinkAfterTooLarge(m.key) // an ms in any mode (a set's own case is in storeWith)
                throw e
            }
        }
        switch answer {
        case "STORED": answer = "HD"
        case "NOT_STORED": answer = "NS"
        case "EXISTS": answer = "EX"
        case "NOT_FOUND": answer = "NF"
        default: break
        }
        let wantsItem = m.flags.contains { "cst".utf8.contains($0.letter) }
        let item = answer == "HD" && wantsItem ? try self.store.get(m.key, namespace: namespace, tiers: tiers) : nil
        return (answer, item)
    }

    /// ms with I and C<c>: when the item's version is newer than `c` (the writer read an older
    /// copy), the value is stored all the same but marked stale — served with X, one client
    /// winning its refill — as memcached's invalidation mode does. The answer, or nil when
    /// the versions make it a plain CAS set.
    private func staleSet(_ m: MemcachedMeta, compare c: UInt64, options: SetOptions) throws -> String? {
        guard let item = try store.get(m.key, namespace: namespace, tiers: tiers), !item.negative else { return nil }
        guard item.version > c else { return nil }
        if let refused = imageRefusal(m.value) { return refused }
        var o = options
        o.mode = .cas(item.version) // a write in between makes it EX, as a CAS set
        o.stale = true
        switch try store.set(m.key, m.value, namespace: namespace, options: o) {
        case .stored:
            totalItems.add()
            return "HD"
        case .casMismatch:
            casBadval.add()
            return "EX"
        case .notFound: return "NF"
        case .exists, .superseded: return "NS"
        }
    }

    private func metaDelete(_ m: MemcachedMeta) throws -> String {
        let cas = m.number("C")
        if cas == .invalid { return "CLIENT_ERROR bad token in command line format" }
        let newVersion = m.number("E")
        if newVersion != .absent && (newVersion.uint64 ?? 0) == 0 { return "CLIENT_ERROR bad token in command line format" }
        // A negative entry (a cached load failure) is absent here, whatever the flags: removed,
        // and answered NF.
        if m.has("x") || m.has("I") || cas != .absent, let item = try store.get(m.key, namespace: namespace, tiers: tiers), item.negative {
            _ = try store.remove(m.key, namespace: namespace, tiers: tiers)
            deleteMisses.add()
            return "NF"
        }
        if m.has("x") { return try removeValue(m, compare: cas.uint64, version: newVersion.uint64) }
        if let c = cas.uint64 {
            // A conditional delete: compared, then removed (not atomic with a racing write).
            guard let item = try store.get(m.key, namespace: namespace, tiers: tiers) else { deleteMisses.add(); return "NF" }
            if item.version != c { return "EX" }
        }
        if m.has("I") {
            // Invalidate: the item stays, served stale (flagged) until the next write.
            switch try store.invalidate(m.key, namespace: namespace, tiers: tiers, version: newVersion.uint64) {
            case .invalidated: deleteHits.add(); return "HD"
            case .superseded: return "EX" // E not newer than the item's version
            case .notFound: deleteMisses.add(); return "NF"
            }
        }
        // With E: a tombstone of that version is left, so an older versioned write is ignored.
        switch try store.remove(m.key, namespace: namespace, tiers: tiers, version: deleteVersion(newVersion.uint64)) {
        case .removed: deleteHits.add(); return "HD"
        case .superseded: return "EX"
        case .notFound: deleteMisses.add(); return "NF"
        }
    }

    /// md with x: the item stays with an empty value, its expiry kept and its client flags
    /// those of F (default 0), as memcached does; with I it is stale as well. Conditional on the
    /// version read (and on C), so a racing write makes it EX.
    private func removeValue(_ m: MemcachedMeta, compare c: UInt64?, version: UInt64?) throws -> String {
        guard let item = try store.get(m.key, namespace: namespace, tiers: tiers), !item.negative else { deleteMisses.add(); return "NF" }
        if let c, item.version != c { return "EX" }
        var o = SetOptions()
        switch m.number("F") {
        case .absent: break
        case .value(let f) where f >= 0 && f <= Int64(UInt32.max): o.flags = UInt32(f)
        default: return "CLIENT_ERROR bad token in command line format"
        }
        o.expiry = item.expiresAt.map { .at(unixMicros: $0) } ?? .never
        o.tiers = tiers
        o.mode = .cas(item.version)
        o.stale = m.has("I")
        o.version = version
        switch try store.set(m.key, [], namespace: namespace, options: o) {
        case .stored: deleteHits.add(); return "HD"
        case .notFound: deleteMisses.add(); return "NF"
        case .casMismatch, .exists, .superseded: return "EX"
        }
    }

    /// True when the counter changed.
    private func metaArithmetic(_ m: MemcachedMeta, quiet: Bool, into out: inout [UInt8]) throws -> Bool {
        let delta = m.number("D"), initial = m.number("J"), vivify = m.number("N")
        guard delta != .invalid, initial != .invalid, vivify != .invalid,
              delta == .absent || delta.uint64 != nil, initial == .absent || initial.uint64 != nil else {
            error("CLIENT_ERROR bad token in command line format", into: &out); return false
        }
        // A mode is one character (memcached refuses `M`, `MIncr`).
        if let t = m.token("M"), t.count != 1 { error("CLIENT_ERROR invalid or duplicate flag", into: &out); return false }
        let mode = m.token("M").flatMap { $0.first } ?? UInt8(ascii: "I")
        let increment: Bool
        switch mode {
        case UInt8(ascii: "I"), UInt8(ascii: "i"), UInt8(ascii: "+"): increment = true
        case UInt8(ascii: "D"), UInt8(ascii: "d"), UInt8(ascii: "-"): increment = false
        default: error("CLIENT_ERROR invalid mode for ma M token", into: &out); return false
        }
        var start: UInt64? = nil
        var exp: Expiry = .storeDefault
        if case .value(let n) = vivify {
            start = initial.uint64 ?? 0
            exp = expiry(n)
        }
        let d = delta.uint64 ?? 1
        let cas = m.number("C")
        guard cas == .absent || cas.uint64 != nil else { error("CLIENT_ERROR bad token in command line format", into: &out); return false }
        let r: CounterOutcome
        if let c = cas.uint64 {
            // C: only while the item's CAS is still c (EX when not, NF without one).
            switch try casCounter(m.key, compare: c, delta: d, increment: increment) {
            case .outcome(let o): r = o
            case .mismatch:
                MemcachedResponse.line("EX" + returnFlags(m, item: nil, allowed: "bkO"), into: &out) // a failure: shown even with q
                return false
            }
        } else {
            r = increment ? try store.increment(m.key, by: d, namespace: namespace, tiers: tiers, initial: start, expiry: exp)
                          : try store.decrement(m.key, by: d, namespace: namespace, tiers: tiers, initial: start, expiry: exp)
        }
        switch r {
        case .notFound:
            (increment ? incrMisses : decrMisses).add()
            if !quiet { MemcachedResponse.line("NF" + returnFlags(m, item: nil, allowed: "bkO"), into: &out) }
        case .notANumber:
            error("CLIENT_ERROR cannot increment or decrement non-numeric value", into: &out)
        case .superseded:
            error("SERVER_ERROR superseded", into: &out) // never: ma names no version
        case .value(let v, let version):
            (increment ? incrHits : decrHits).add()
            let wantsItem = m.flags.contains { "ct".utf8.contains($0.letter) }
            let item = wantsItem ? try store.get(m.key, namespace: namespace, tiers: tiers) : nil
            // No item: made already expired (`N` with a past or negative time) or gone since —
            // the counter's own CAS and 0 seconds left (an outside review, mc10: c and t were
            // left out).
            let flags = returnFlags(m, item: item, allowed: "bkcOt", gone: version)
            // q: a success is not answered, with v too (as memcached).
            if quiet { return true }
            if m.has("v") {
                let digits = String(v)
                MemcachedResponse.line("VA \(digits.utf8.count)" + flags, into: &out)
                MemcachedResponse.line(digits, into: &out)
            } else {
                MemcachedResponse.line("HD" + flags, into: &out)
            }
            return true
        }
        return false
    }

    enum CasCounter { case outcome(CounterOutcome), mismatch }

    /// `ma` with C: the counter changes only while the item's version is `c` — read, checked,
    /// then written back as a CAS set of the new digits (a racing write makes it EX, as a
    /// changed CAS does), with the store's counter rules; flags and expiry kept.
    private func casCounter(_ key: [UInt8], compare c: UInt64, delta: UInt64, increment: Bool) throws -> CasCounter {
        guard let item = try store.get(key, namespace: namespace, tiers: tiers), !item.negative else { return .outcome(.notFound) }
        guard item.version == c else { return .mismatch }
        guard let current = TieredCache.counterValue(item.value) else { return .outcome(.notANumber) }
        let next = TieredCache.counterNext(current, delta: delta, decrement: !increment)
        var o = SetOptions()
        o.flags = item.flags
        o.extended = item.extended
        o.expiry = item.expiresAt.map { .at(unixMicros: $0) } ?? .never
        o.tiers = tiers
        o.mode = .cas(item.version)
        switch try store.set(key, Array(String(next).utf8), namespace: namespace, options: o) {
        case .stored(let v): return .outcome(.value(next, version: v))
        case .notFound: return .outcome(.notFound)
        case .casMismatch, .exists, .superseded: return .mismatch
        }
    }
}
