import StrataCore
import StrataWire

// Per-connection order (PROTOCOL.md §3): which requests wait for which, and the list they
// wait in. Loop thread only.
extension Connection {
    /// What a request must wait for: requests on the same key run in the order they were
    /// sent; keyless operations (PING, STATS, SCAN, FLUSH, HELLO, QUIT) wait for everything
    /// sent before them, and everything after them waits for them.
    enum Scope {
        case keys([ItemKey])
        case barrier
    }

    struct Pending {
        let frame: Frame
        let request: Request
        /// Computed only when the request has to wait or goes to a worker (it allocates).
        let scope: Scope?
        let received: Double
    }

    static func keyID(_ ns: [UInt8], _ key: [UInt8]) -> ItemKey { ItemKey(namespace: ns, key: key) }

    static func scope(of r: Request) -> Scope {
        switch r {
        case .get(let g): return .keys([keyID(g.namespace, g.key)])
        case .set(let s): return .keys([keyID(s.namespace, s.key)])
        case .delete(let ns, let key, _, _, _), .touch(let ns, let key, _, _, _, _), .exists(let ns, let key, _), .meta(let ns, let key, _):
            return .keys([keyID(ns, key)])
        case .counter(let c): return .keys([keyID(c.namespace, c.key)])
        case .mget(let ns, let keys, _): return .keys(keys.map { keyID(ns, $0) })
        case .imageInfo(let ns, let key), .invalidate(let ns, let key, _, _), .release(let ns, let key, _): return .keys([keyID(ns, key)])
        case .imageVariant(let v): return .keys([keyID(v.namespace, v.key)])
        case .ping, .hello, .quit, .stats, .namespaceStats, .scan, .flush, .syncDigest, .syncKeys, .syncCheck: return .barrier
        }
    }

    func canRun(_ scope: Scope) -> Bool {
        switch scope {
        case .barrier: return inFlight == 0
        case .keys(let keys): return barriersInFlight == 0 && !keys.contains { inFlightKeys[$0] != nil }
        }
    }

    func hold(_ p: Pending, first: Bool) {
        if first { deferred.insert(p, at: 0) } else { deferred.append(p) }
        deferredBytes += p.frame.bodyLength
    }

    /// Runs deferred requests that no longer conflict, in order, while the output bound
    /// allows.
    func runDeferred() {
        while !closed, let first = deferred.first, canRun(first.scope!), mayStart(first.request) {
            deferred.removeFirst()
            deferredBytes -= first.frame.bodyLength
            run(first)
        }
    }

    func release(_ scope: Scope) {
        inFlight -= 1
        switch scope {
        case .barrier: barriersInFlight -= 1
        case .keys(let keys):
            for k in keys {
                let n = (inFlightKeys[k] ?? 1) - 1
                inFlightKeys[k] = n == 0 ? nil : n
            }
        }
    }
}
