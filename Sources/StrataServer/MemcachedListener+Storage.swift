#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataStore
import StrataWire

// The memcached listener's storage commands: set/add/replace/cas/append/prepend onto the
// store, and the removal of an older value after a set refused as too large (MEMCACHED.md §2).
extension MemcachedListener {
    /// The answer line of a storage command.
    func storeCommand(_ s: MemcachedStore) throws -> String {
        var o = SetOptions()
        o.flags = s.flags
        o.expiry = expiry(s.exptime)
        o.tiers = tiers
        return try storeWith(s, options: o)
    }

    /// A set refused as too large removes the key's older value, as memcached does ("avoid
    /// stale data persisting in cache because we failed alloc"): the client was told the set
    /// failed, and the value it meant to replace must not be served on. Only set and ms (any
    /// mode): the text add, replace, cas, append and prepend leave the item as it was.
    func unlinkAfterTooLarge(_ key: [UInt8]) throws {
        _ = try store.remove(key, namespace: namespace, tiers: tiers, version: deleteVersion(nil))
    }

    /// The answer line of a storage command with its flags, expiry and tiers in `o`
    /// (append/prepend keep the item's own).
    func storeWith(_ s: MemcachedStore, options o: SetOptions) throws -> String {
        var o = o
        switch s.verb {
        case .set, .add, .replace, .cas:
            if let refused = imageRefusal(s.value) { return refused }
            o.mode = s.verb == .add ? .add : s.verb == .replace ? .replace : s.verb == .cas ? .cas(s.casUnique ?? 0) : .set
            let r: SetOutcome
            do { r = try store.set(s.key, s.value, namespace: namespace, options: o) } catch let e as StoreError where e.code == .valueTooLarge && s.verb == .set {
                try unlinkAfterTooLarge(s.key)
                throw e
            }
            switch r {
            case .stored:
                totalItems.add()
                if s.verb == .cas { casHits.add() }
                return "STORED"
            case .exists: return "NOT_STORED"
            case .notFound:
                if s.verb == .cas { casMisses.add(); return "NOT_FOUND" }
                return "NOT_STORED"
            case .casMismatch:
                casBadval.add()
                return "EXISTS"
            case .superseded: return "NOT_STORED"
            }
        case .append, .prepend:
            // A read, then a write conditional on the version read: a racing write makes it
            // read again. Flags and expiry stay the item's (memcached ignores the command's).
            for _ in 0..<Self.appendAttempts {
                guard let item = try store.get(s.key, namespace: namespace, tiers: tiers), !item.negative else { return "NOT_STORED" }
                guard item.value.count + s.value.count <= maxValue else { return "SERVER_ERROR object too large for cache" }
                var w = SetOptions()
                w.flags = item.flags
                w.expiry = item.expiresAt.map { .at(unixMicros: $0) } ?? .never
                w.tiers = tiers
                w.mode = .cas(item.version)
                w.version = o.version // ms E
                let joined = s.verb == .append ? item.value + s.value : s.value + item.value
                if let refused = imageRefusal(joined) { return refused }
                switch try store.set(s.key, joined, namespace: namespace, options: w) {
                case .stored:
                    totalItems.add()
                    return "STORED"
                case .notFound: return "NOT_STORED"
                default: continue
                }
            }
            return "SERVER_ERROR append raced with other writes \(Self.appendAttempts) times"
        }
    }
}
