// The client side of `Request`: each request as the frame a client sends (PROTOCOL.md §7).
// `Request.parse` (Messages.swift) reads these frames back; the vectors check both directions.

extension Request {
    /// The request as a frame with id `id` (and the QUIET flag when `quiet`).
    public func frame(id: UInt32, quiet: Bool = false) -> Frame {
        var f: Frame
        switch self {
        case let .hello(lo, hi, token):
            f = .request(.hello, id: id); f.extras = [lo, hi]; f.value = token
        case .ping: f = .request(.ping, id: id)
        case .quit: f = .request(.quit, id: id)
        case .stats: f = .request(.stats, id: id)
        case .namespaceStats(.one(let ns)):
            f = .request(.stats, id: id); f.key = NamespaceStatsQuery.oneKey; f.namespace = ns
        case .namespaceStats(.top):
            f = .request(.stats, id: id); f.key = NamespaceStatsQuery.topKey
        case .get(let g):
            f = .request(.get, id: id); f.namespace = g.namespace; f.key = g.key; f.tiers = g.tiers
            if g.lease {
                f.flags |= RequestFlags.lease.rawValue
                if g.refreshAheadMillis != 0 || g.touch != nil { f.extras.appendBE(g.refreshAheadMillis) }
            }
            if let t = g.touch { t.encode(into: &f.extras) }
            if g.wantMeta { f.flags |= RequestFlags.wantMeta.rawValue }
        case let .mget(ns, keys, tiers):
            f = .request(.mget, id: id); f.namespace = ns; f.tiers = tiers
            f.value.appendBE(UInt16(keys.count))
            for k in keys { f.value.appendBE(UInt16(k.count)); f.value.append(contentsOf: k) }
        case .set(let s):
            f = .request(.set, id: id); f.namespace = s.namespace; f.key = s.key; f.value = s.value; f.tiers = s.tiers
            f.cas = s.casVersion
            f.extras.append(s.mode.rawValue)
            s.expiry.encode(into: &f.extras)
            f.extras.appendBE(s.flags)
            f.extras.appendBE(s.version)
            f.extras.append(contentsOf: s.extended)
            if s.writeBehind { f.flags |= RequestFlags.writeBehind.rawValue }
            if s.validateImage { f.flags |= RequestFlags.validateImage.rawValue }
            if s.negative { f.flags |= RequestFlags.negative.rawValue }
            if s.stale { f.flags |= RequestFlags.stale.rawValue }
            if s.verifiedOnly { f.flags |= RequestFlags.verifiedOnly.rawValue }
        case let .delete(ns, key, tiers, version, writeBehind):
            f = .request(.delete, id: id); f.namespace = ns; f.key = key; f.tiers = tiers
            if let v = version { f.extras.appendBE(v) }
            if writeBehind { f.flags |= RequestFlags.writeBehind.rawValue }
        case let .touch(ns, key, tiers, expiry, version, verifiedOnly):
            f = .request(.touch, id: id); f.namespace = ns; f.key = key; f.tiers = tiers
            expiry.encode(into: &f.extras)
            if version != 0 { f.extras.appendBE(version) }
            if verifiedOnly { f.flags |= RequestFlags.verifiedOnly.rawValue }
        case let .exists(ns, key, tiers):
            f = .request(.exists, id: id); f.namespace = ns; f.key = key; f.tiers = tiers
        case .counter(let c):
            f = .request(c.decrement ? .decr : .incr, id: id); f.namespace = c.namespace; f.key = c.key; f.tiers = c.tiers
            f.extras.appendBE(c.delta)
            f.extras.append(c.initial == nil ? 0 : 1)
            f.extras.appendBE(c.initial ?? 0)
            c.expiry.encode(into: &f.extras)
            if c.version != 0 { f.extras.appendBE(c.version) }
            if c.verifiedOnly { f.flags |= RequestFlags.verifiedOnly.rawValue }
        case let .meta(ns, key, tiers):
            f = .request(.meta, id: id); f.namespace = ns; f.key = key; f.tiers = tiers
        case let .scan(ns, cursor, limit):
            f = .request(.scan, id: id); f.namespace = ns; f.key = cursor; f.extras.appendBE(limit)
        case let .flush(ns, all, tiers, version):
            f = .request(.flush, id: id); f.namespace = ns; f.tiers = tiers
            if all { f.flags |= RequestFlags.all.rawValue }
            if let v = version { f.extras.appendBE(v) }
        case let .invalidate(ns, key, tiers, version):
            f = .request(.invalidate, id: id); f.namespace = ns; f.key = key; f.tiers = tiers
            if let v = version { f.extras.appendBE(v) }
        case let .release(ns, key, token):
            f = .request(.release, id: id); f.namespace = ns; f.key = key; f.cas = token
        case let .imageInfo(ns, key):
            f = .request(.imageInfo, id: id); f.namespace = ns; f.key = key
        case .imageVariant(let v):
            f = .request(.imageVariant, id: id); f.namespace = v.namespace; f.key = v.key
            f.extras.appendBE(v.maxWidth); f.extras.appendBE(v.maxHeight)
            f.extras += [v.fit, v.format, v.quality]
        case .syncDigest(let s):
            f = .request(.syncDigest, id: id); s.encode(into: &f)
        case .syncKeys(let s):
            f = .request(.syncKeys, id: id); s.encode(into: &f)
        case .syncCheck(let c):
            f = .request(.syncCheck, id: id); c.encode(into: &f)
        }
        if quiet { f.flags |= RequestFlags.quiet.rawValue }
        return f
    }
}
