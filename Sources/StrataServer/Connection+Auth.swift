import StrataCore
import StrataWire

// Who a connection is: HELLO against the node's users, the brute-force delay, the user's
// scopes per request, and after a reload (PROTOCOL.md §4, §4.1). Loop thread only.
extension Connection {
    /// HELLO's token: true when it authenticated (or the node has no users). A wrong token is
    /// answered AUTH_FAILED — at once, or by the tick after the throttle's delay (nothing else
    /// runs meanwhile) — and the connection closes after it.
    func authenticate(_ token: [UInt8], _ f: Frame) -> Bool {
        guard let users = node.credentials.current else { return true }
        guard let u = users.authenticate(token) else {
            let answer = Responses.error(to: f, .authFailed, token.isEmpty ? "no token given: this node needs one (HELLO with the token)" : "wrong token")
            closeAfterFlush = true
            let delay = node.authenticationFailed(peer: peer, connection: id, protocol: "binary")
            if delay > 0 {
                delayedAnswer = (monotonicSeconds() + delay, answer)
                inFlight += 1 // keeps the connection open until the tick answers (checkTimers)
                return false
            }
            send(answer)
            flushAndMaybeClose()
            return false
        }
        user = u
        scopeMemo = ScopeMemo()
        userGeneration = node.credentials.generation
        authenticated = true
        if awaitingAuth {
            awaitingAuth = false
            node.leftAuthQueue(on: loop)
        }
        return true
    }

    /// Whether the connection's user may run `request`: false after answering AUTH_FAILED (the
    /// user was removed or its token changed by a reload; then close) or FORBIDDEN.
    func authorize(_ request: Request, _ f: Frame) -> Bool {
        guard currentUser() else {
            send(Responses.error(to: f, .authFailed, "the credentials of user '\(user.name)' were removed or changed"))
            closeAfterFlush = true
            flushAndMaybeClose()
            return false
        }
        let allowed: Bool
        switch User.need(request) {
        case .nothing: allowed = true
        case .admin: allowed = user.role == .admin
        case .read(let ns): allowed = scopeMemo.rights(user, ns).read
        case .write(let ns): allowed = scopeMemo.rights(user, ns).write
        }
        if allowed {
            if user.role != .admin, let why = node.versionRefusal(Self.callerVersion(request)) {
                send(Responses.error(to: f, .invalidArgument, why))
                return false
            }
            return true
        }
        node.stats.forbidden.add(1, ordering: .relaxed)
        send(Responses.error(to: f, .forbidden, user.refusal(request, opcode: f.opcode) ?? "forbidden"))
        return false
    }

    /// The version a request asks its write to take, if it names one.
    static func callerVersion(_ r: Request) -> UInt64? {
        switch r {
        case .set(let s): return s.version
        case .counter(let c): return c.version == 0 ? nil : c.version
        case let .touch(_, _, _, _, version, _): return version == 0 ? nil : version
        case let .delete(_, _, _, version, _), let .flush(_, _, _, version), let .invalidate(_, _, _, version): return version
        default: return nil
        }
    }

    /// Brings `user` up to date after a credentials reload: the same name with the same token
    /// keeps working with its new role and namespaces; false when the user is gone or its
    /// token changed.
    func currentUser() -> Bool {
        let gen = node.credentials.generation
        guard gen != userGeneration else { return true }
        userGeneration = gen
        guard authenticated, node.authEnabled else { return true }
        guard let users = node.credentials.current, let u = users.current(user.name, hash: user.tokenHash) else { return false }
        user = u
        scopeMemo = ScopeMemo()
        return true
    }

    /// The audit line of a FLUSH about to run.
    func auditFlush(_ ns: [UInt8], all: Bool, tiers: UInt8) {
        node.audit("flush", user: user.name, peer: peer, Self.flushFields(ns, all: all, tiers: tiers, conn: id))
    }

    /// For a FLUSH, what audits it when its answer says it was refused when it ran (DISK_FULL,
    /// BUSY for a flush-mark bound…), after the line `auditFlush` wrote when it was asked; nil
    /// for every other request. Made on the loop, called on any thread.
    func flushRefusalAudit(_ request: Request) -> (@Sendable (Frame?) -> Void)? {
        guard case let .flush(ns, all, tiers, _) = request else { return nil }
        let node = self.node, name = user.name, peer = self.peer, fields = Self.flushFields(ns, all: all, tiers: tiers, conn: id)
        return { resp in
            guard let r = resp, r.statusCode != .ok else { return }
            node.audit("flush_refused", user: name, peer: peer,
                       fields + [("status", "\(r.statusCode)"), ("why", String(decoding: r.value, as: UTF8.self))])
        }
    }

    private static func flushFields(_ ns: [UInt8], all: Bool, tiers: UInt8, conn: Int) -> [(String, String)] {
        [("namespace", all ? "*" : logSafe(ns)), ("all", all ? "1" : "0"), ("tiers", String(tiers)), ("conn", String(conn))]
    }
}

/// A connection's user's rights on the namespace it last named (reset when the user changes).
struct ScopeMemo {
    private var namespace: [UInt8]? = nil
    private var read = false
    private var write = false

    mutating func rights(_ user: User, _ ns: [UInt8]) -> (read: Bool, write: Bool) {
        if namespace != ns {
            namespace = ns
            read = user.mayRead(ns)
            write = user.mayWrite(ns)
        }
        return (read, write)
    }

    /// `rights(user, ns)` for a namespace still in the input buffer: copies the name only
    /// when it differs from the last one.
    mutating func rights(_ user: User, _ ns: UnsafeRawBufferPointer) -> (read: Bool, write: Bool) {
        if let n = namespace, n.elementsEqual(ns) { return (read, write) }
        return rights(user, [UInt8](ns))
    }
}
