#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet

// TLS for both listeners' connections (the binary `Connection` on `--tls-port`, the memcached
// `MemcachedConnection` on `--memcached-tls-port`): one path for the handshake — driven by the
// loop without blocking, cut by the frame timeout like a frame that stalls — and for reads and
// writes through the session. Loop thread only. A plaintext connection (`tls == nil`) reads
// and writes the socket directly and never steps into the session code. The metrics
// endpoint's HTTPS connections (`--metrics-tls`) step their handshake with the same
// `TLSSession.step` and count failures with the same `Node.tlsHandshakeFailed`.

/// What one step of a server handshake on an event loop came to.
enum HandshakeStep: Equatable {
    case done
    /// Wait for this readiness of the socket, then step again.
    case wait(EventLoop.Interest)
    case failed(String)
}

extension TLSSession {
    /// Takes the handshake as far as the socket allows (never blocks).
    func step() -> HandshakeStep {
        do {
            switch try handshake() {
            case .done, .closed: return .done
            case .wantRead: return .wait(.read)
            case .wantWrite: return .wait(.write)
            }
        } catch {
            return .failed(error.message)
        }
    }
}

extension Node {
    /// A handshake failed (not TLS, a client certificate refused, cut by a timeout): counted in
    /// `tls_handshake_failures`, logged at most once a second. Any thread.
    func tlsHandshakeFailed(_ reason: String, conn: Int, _ fields: [(String, String)] = []) {
        stats.tlsHandshakeFailures.add(1, ordering: .relaxed)
        if let suppressed = tlsLogLimiter.admit(now: monotonicSeconds()) {
            log.warn("tls_handshake_failed", [("conn", String(conn)), ("reason", reason)] + fields + [("suppressed", String(suppressed))])
        }
    }
}

extension Node {
    /// An established TLS session failed (a record that does not decrypt, a bad record type,
    /// an alert): logged as `tls_session_failed` (warn, the connection and OpenSSL's reason),
    /// at most once a second with the TLS handshake lines. The connection closes. Loop thread.
    func tlsSessionFailed(_ reason: String, conn: Int) {
        if let suppressed = tlsLogLimiter.admit(now: monotonicSeconds()) {
            log.warn("tls_session_failed", [("conn", String(conn)), ("reason", reason), ("suppressed", String(suppressed))])
        }
    }
}

extension OutputConnection {
    /// The connection came from a TLS port and its handshake is not done yet.
    var handshaking: Bool {
        guard let t = tls else { return false }
        return !t.handshakeDone
    }

    /// While the handshake runs, every event steps it (nothing is read or written in the clear
    /// meanwhile); true when the event was taken so.
    func handshakeTakes(readable: Bool, writable: Bool, hangup: Bool) -> Bool {
        guard handshaking else { return false }
        if hangup && !readable && !writable { close(reason: "hangup") } else { continueHandshake() }
        return true
    }

    /// Takes the handshake as far as the socket allows; once it is done, the connection reads
    /// like any other (its protocol's `readAvailable`). A failed handshake (not TLS, a client
    /// certificate refused) is counted, logged at most once a second, and closes the connection.
    func continueHandshake() {
        guard let t = tls, !closed else { return }
        switch t.step() {
        case .done:
            wantWrite = !output.isEmpty
            updateInterest()
            readAvailable()
        case .wait(let interest):
            wantWrite = interest == .write
            updateInterest()
        case .failed(let reason):
            handshakeFailed(reason)
        }
    }

    func handshakeFailed(_ reason: String) {
        node.tlsHandshakeFailed(reason, conn: id)
        close(reason: "tls handshake: \(reason)")
    }

    /// A handshake not done within the frame timeout of the accept (a client that sends part of
    /// a hello, or nothing) fails and closes the connection (`timeouts` and
    /// `tls_handshake_failures`). True when it closed.
    func closedForStalledHandshake(now: Double) -> Bool {
        guard handshaking, now - acceptedAt > node.config.frameTimeout else { return false }
        node.stats.timeouts.add(1, ordering: .relaxed)
        handshakeFailed("no complete handshake within the frame timeout (\(node.config.frameTimeout) s)")
        return true
    }

    /// Reads into `buffer` from the socket, or through the session: `.done(0)` at the end of
    /// the stream, `.wouldBlock` when nothing more is there now.
    func receive(_ buffer: UnsafeMutableRawBufferPointer) throws -> IOResult {
        guard let t = tls else { return try Sys.read(fd, buffer.baseAddress!, buffer.count) }
        let outcome: TLSSession.Outcome
        do { outcome = try t.read(buffer.baseAddress!, buffer.count) } catch {
            node.tlsSessionFailed(error.message, conn: id)
            throw error
        }
        switch outcome {
        case .done(let n): return .done(n)
        case .closed: return .done(0)
        case .wantRead: return .wouldBlock
        case .wantWrite:
            // The session must write before it can read on (a key update's answer): wait for
            // room, then read again (the connection's `handle`).
            readWantsWrite = true
            return .wouldBlock
        }
    }

    /// Whether a read of `n` bytes into a buffer of `capacity` emptied the socket, saving the
    /// read that would say so (epoll is level-triggered: more bytes wake the loop again). A TLS
    /// read returns one record (≤ 16 KiB) at a time: a short record with nothing buffered in
    /// the session.
    func readWasShort(_ n: Int, of capacity: Int) -> Bool {
        guard let t = tls else { return n < capacity }
        return n < 16 << 10 && !t.hasPending
    }

    /// Sends from `output` once: to the socket (gathered), or through the session.
    func sendQueued() throws -> IOResult {
        guard let t = tls else { return try output.send(fd) }
        do { return try output.send(t) } catch let e as TLSError {
            node.tlsSessionFailed(e.message, conn: id)
            throw e
        }
    }

    /// Unregisters and closes the socket; a TLS connection whose handshake was done sends
    /// close_notify first (best effort).
    func closeSocket() {
        loop.unregister(fd)
        tls?.shutdown()
        Sys.close(fd)
    }
}

extension OutputQueue {
    /// Sends through a TLS session: the first unsent chunk (SSL_write takes part of it when the
    /// socket is full). `.wouldBlock` when the session took nothing.
    mutating func send(_ tls: TLSSession) throws(TLSError) -> IOResult {
        guard count > 0 else { return .done(0) }
        let r = withHead { p in Result { () throws(TLSError) -> TLSSession.Outcome in try tls.write(p.baseAddress!, p.count) } }
        switch try r.get() {
        case .done(let n):
            consume(n)
            return .done(n)
        case .wantRead, .wantWrite: return .wouldBlock
        case .closed: throw TLSError("write: the peer closed the connection")
        }
    }
}
