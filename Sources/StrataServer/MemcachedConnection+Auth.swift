import StrataCore
import StrataWire

// Authentication on the memcached listener (MEMCACHED.md "Auth"): the `-Y` authfile form of
// the first command, and keeping the user current across credentials reloads.
extension MemcachedConnection {
    /// Brings `user` up to date after a credentials reload: false when the user is gone, its
    /// token changed, or it may no longer use the listener's namespace.
    func currentUser() -> Bool {
        let gen = node.credentials.generation
        guard gen != userGeneration else { return true }
        userGeneration = gen
        guard authenticated, node.authEnabled else { return true }
        guard let users = node.credentials.current, let u = users.current(user.name, hash: user.tokenHash),
              u.mayRead(listener.namespace) else { return false }
        user = u
        userMayWrite = u.mayWrite(listener.namespace)
        return true
    }

    /// Before authentication only `set <any> <flags> <exptime> <len>` with the data
    /// `<user> <token>` is accepted (memcached's `-Y` authfile form); anything else gets
    /// CLIENT_ERROR unauthenticated. A wrong token is answered and closes the connection.
    /// Returns false when more bytes are needed.
    func authenticateNext() -> Bool {
        let p = input.withUnsafeBytes { parser.parse(UnsafeRawBufferPointer(rebasing: $0[inputStart...])) }
        switch p {
        case .needMore:
            if commandStarted == nil { commandStarted = monotonicSeconds() }
            return false
        case .error(let line, let used, let drop, let fatal, _): // answered: before authentication
            inputStart += used
            commandStarted = nil
            swallow = drop
            emit { listener.error(line, into: &$0) }
            if fatal { closeAfterFlush = true }
        case .command(let c, let used):
            inputStart += used
            commandStarted = nil
            if case .quit = c { closeAfterFlush = true; break }
            if case .tooLarge(_, let drop, _, _) = c {
                // Before authentication nothing is removed: the block is dropped, as any refused one.
                swallow = drop
                emit { listener.error("SERVER_ERROR object too large for cache", into: &$0) }
                break
            }
            guard case .store(let s) = c, s.verb == .set else {
                emit { listener.error("CLIENT_ERROR unauthenticated", into: &$0) }
                break
            }
            listener.authCommands.add()
            // `<user> <token>`: the token alone picks the user (tokens are unique per user).
            let parts = s.value.split(separator: 0x20, maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, let users = node.credentials.current, let u = users.authenticate(Array(parts[1])) {
                guard u.mayRead(listener.namespace) else {
                    listener.authErrors.add()
                    node.stats.forbidden.add(1, ordering: .relaxed)
                    emit { listener.error("CLIENT_ERROR forbidden: user '\(u.name)' may not use namespace '\(String(decoding: listener.namespace, as: UTF8.self))'", into: &$0) }
                    closeAfterFlush = true
                    return true
                }
                user = u
                userMayWrite = u.mayWrite(listener.namespace)
                userGeneration = node.credentials.generation
                authenticated = true
                awaitingAuth = false
                node.leftAuthQueue(on: loop)
                emit { MemcachedResponse.line("STORED", into: &$0) }
            } else {
                listener.authErrors.add()
                closeAfterFlush = true
                let delay = node.authenticationFailed(peer: peer, connection: id, protocol: "memcached")
                if delay > 0 {
                    delayedAnswer = (monotonicSeconds() + delay, "CLIENT_ERROR authentication failure")
                    busy = true
                    return true
                }
                emit { listener.error("CLIENT_ERROR authentication failure", into: &$0) }
            }
        }
        return true
    }
}
