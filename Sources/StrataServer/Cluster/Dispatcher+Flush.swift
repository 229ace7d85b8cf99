import StrataCore
import StrataStore
import StrataWire

// FLUSH, and a cluster node's flush marks (FlushMarks; PROTOCOL.md §7.12 and §7.19).
extension Dispatcher {
    /// A client's FLUSH (binary or memcached): the store's O(1) flush; on a cluster node that
    /// empties the disk tier of a namespace it knows (or of all), also a flush mark taken before
    /// it, and a background sweep of the writes older than the mark that raced it.
    /// `owner`: the user asking, when not an admin (its marks count toward its own bound).
    /// Returns the mark's version (0: no mark).
    @discardableResult
    func flush(namespace ns: [UInt8], all: Bool, tiers t: Tiers, owner: String? = nil) throws -> UInt64 {
        var mark: (version: UInt64, known: [[UInt8]])? = nil
        if let m = flushMarks, t.contains(.disk) {
            // A namespace this node holds nothing of gets its mark too: the other nodes may hold
            // its items, and the mark is what reaches them (an outside review, cl20: a flush of
            // such a namespace through one node left them readable on the others for good).
            let known = store.namespaceNames()
            if !all, let why = m.refusal(for: ns, owner: owner) {
                throw StoreError(.busy, "\(why) (\(Int(store.configuration.tombstoneTTL)) s), none of this namespace: the flush would leave no mark, and a node that missed it could bring its items back; retry once the oldest mark has expired; nothing was flushed")
            }
            mark = (store.nextVersion(), known)
        }
        if all { try store.flushAll(tiers: t) } else { try store.flush(namespace: ns, tiers: t) }
        leases.revokeAll(namespace: all ? nil : ns)
        // Variants stored on disk stay known while the disk keeps them.
        if t.contains(.disk) { lineage.forget(namespace: all ? nil : ns) }
        guard let m = flushMarks, let mark else { return 0 }
        m.record(all ? nil : ns, mark.version, known: mark.known, owner: owner)
        m.sweepLater(all ? nil : ns) { [self] in $0.forEach(originalChanged) }
        return mark.version
    }

    /// A flush mark from elsewhere (FLUSH with a version: anti-entropy's copy of a peer's
    /// mark, or a client making every node's mark the same): recorded, the clock moved past it,
    /// and this node's items of the namespace (nil: of every namespace) older than it removed
    /// from both tiers by a background sweep. False when this node holds an equal or newer
    /// mark (nothing done). `owner`: the user asking, when not an admin or a peer.
    func takeFlushMark(namespace ns: [UInt8]?, version: UInt64, owner: String? = nil) throws -> Bool {
        guard let m = flushMarks else {
            throw StoreError(.invalidArgument, "FLUSH with a version is taken only by a node started with --cluster")
        }
        if let ns, ns.count > ItemLimits.maxNamespaceBytes {
            throw StoreError(.invalidNamespace, "namespace is \(ns.count) bytes; the limit is \(ItemLimits.maxNamespaceBytes)")
        }
        // A mark that old would be dropped at once (marks live as long as tombstones): refused,
        // rather than acknowledged and forgotten — whatever mark is held (§7.12: version 0 and
        // every version that old are INVALID_ARGUMENT; an outside review got SUPERSEDED once the
        // namespace held a mark). Then, not newer than a mark in force: SUPERSEDED (with that mark).
        let floors = m.floors()
        if version <= floors.expired {
            throw StoreError(.invalidArgument, "FLUSH version \(version) is older than the tombstone lifetime (\(Int(store.configuration.tombstoneTTL)) s): a flush mark that old is not kept")
        }
        let held = floors.held(ns)
        if held > 0 && held >= version { return false }
        if let ns, let why = m.refusal(for: ns, owner: owner) {
            throw StoreError(.busy, "\(why), none of this namespace: retry once the oldest has expired; nothing was flushed")
        }
        try store.observe(version: version)
        guard m.record(ns, version, known: ns == nil ? store.namespaceNames() : [], owner: owner) else { return false }
        leases.revokeAll(namespace: ns)
        m.sweepLater(ns) { [self] in $0.forEach(originalChanged) }
        return true
    }

    /// FLUSH (0x1A): a client's flush, or with a version a peer's flush mark (§7.12). `owner`:
    /// the connection's user when not an admin.
    func flushRequest(_ ns: [UInt8], all: Bool, tiers: UInt8, version: UInt64?, owner: String?, _ f: Frame) throws -> Frame? {
        guard let v = version else {
            let mark = try flush(namespace: ns, all: all, tiers: Tiers(wire: tiers), owner: owner)
            return f.requestFlags.contains(.quiet) ? nil : Responses.status(to: f, .ok, cas: mark)
        }
        guard try takeFlushMark(namespace: all ? nil : ns, version: v, owner: owner) else {
            return Responses.status(to: f, .superseded, cas: flushMarks?.floor(ns) ?? 0)
        }
        return f.requestFlags.contains(.quiet) ? nil : Responses.status(to: f, .ok, cas: v)
    }

    /// SUPERSEDED for a SET, DELETE or INVALIDATE whose caller version a flush of its
    /// namespace superseded (CAS: the flush's version); nil for every other request.
    func flushedRefusal(_ r: Request, _ f: Frame) -> Frame? {
        guard let m = flushMarks else { return nil }
        let ns: [UInt8], v: UInt64
        switch r {
        case .set(let s) where s.version != 0: (ns, v) = (s.namespace, s.version)
        case let .delete(n, _, _, version?, _): (ns, v) = (n, version)
        case let .invalidate(n, _, _, version?): (ns, v) = (n, version)
        case .counter(let c) where c.version != 0: (ns, v) = (c.namespace, c.version)
        case let .touch(n, _, _, _, version, _) where version != 0: (ns, v) = (n, version)
        default: return nil
        }
        guard let at = m.superseding(ns, v) else { return nil }
        return Responses.status(to: f, .superseded, cas: at)
    }
}
