#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet

// A connection accepted on the TLS port: the handshake, driven by the loop without blocking
// (cut by the frame timeout like a frame that stalls), then reads and writes through the
// session. Loop thread only. The plaintext path never comes here.
extension Connection {
    /// Takes the handshake as far as the socket allows; once it is done, the connection reads
    /// requests like any other. A failed handshake (not TLS, a client certificate refused)
    /// is counted, logged at most once a second, and closes the connection.
    func continueHandshake() {
        guard let t = tls, !closed else { return }
        do {
            switch try t.handshake() {
            case .done, .closed:
                frameStarted = nil
                wantWrite = !output.isEmpty
                updateInterest()
                readAvailableNow()
            case .wantRead:
                wantWrite = false
                updateInterest()
            case .wantWrite:
                wantWrite = true
                updateInterest()
            }
        } catch {
            handshakeFailed(error.message)
        }
    }

    func handshakeFailed(_ reason: String) {
        node.stats.tlsHandshakeFailures.add(1, ordering: .relaxed)
        if let suppressed = node.tlsLogLimiter.admit(now: monotonicSeconds()) {
            node.log.warn("tls_handshake_failed", [("conn", String(id)), ("reason", reason), ("suppressed", String(suppressed))])
        }
        close(reason: "tls handshake: \(reason)")
    }

    /// Reads into `buffer` from the socket, or through the session: `.done(0)` at the end of
    /// the stream, `.wouldBlock` when nothing more is there now.
    func receive(_ buffer: UnsafeMutableRawBufferPointer) throws -> IOResult {
        guard let t = tls else { return try Sys.read(fd, buffer.baseAddress!, buffer.count) }
        switch try t.read(buffer.baseAddress!, buffer.count) {
        case .done(let n): return .done(n)
        case .closed: return .done(0)
        case .wantRead: return .wouldBlock
        case .wantWrite:
            // The session must write before it can read on (a key update's answer): wait for
            // room, then read again (`handle`).
            readWantsWrite = true
            return .wouldBlock
        }
    }

    /// Sends queued output to the socket, or through the session.
    func sendOutput() throws -> IOResult {
        guard let t = tls else { return try output.send(fd) }
        return try output.send(t)
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
