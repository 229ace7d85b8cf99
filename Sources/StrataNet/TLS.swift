#if canImport(Glibc)
import Glibc
#endif
import COpenSSL
import StrataCore

// The one file that knows OpenSSL's API: contexts (certificates, keys, the CA that verifies
// peers), non-blocking sessions for event loops, and a blocking stream for clients.

/// A TLS failure: what was being done and OpenSSL's reasons (certificate verification's
/// reason first when there is one).
public struct TLSError: Error, CustomStringConvertible, Sendable, Equatable {
    public let message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

/// OpenSSL's queued error reasons for this thread, joined, and the queue emptied.
private func drainErrors() -> String {
    var reasons: [String] = []
    var buf = [CChar](repeating: 0, count: 256)
    while true {
        let e = ERR_get_error()
        if e == 0 { break }
        if let r = ERR_reason_error_string(e) { reasons.append(String(cString: r)) } else {
            ERR_error_string_n(e, &buf, buf.count)
            reasons.append(String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }
    return reasons.isEmpty ? "unknown TLS error" : reasons.joined(separator: "; ")
}

/// An SSL_CTX: this side's certificate and key, the CA that verifies the peer, TLS 1.2 as the
/// oldest version, OpenSSL's default ciphers (its secure defaults), no renegotiation and no
/// compression. Immutable once made; sessions made from it keep it alive (OpenSSL counts
/// references), so a replaced context is freed only when its last session ends. Thread-safe.
public final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer
    /// Whether sessions verify the peer's certificate (clients always; servers with a CA).
    public private(set) var verifiesPeer: Bool

    private init(server: Bool) throws(TLSError) {
        ERR_clear_error()
        guard let c = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method()) else {
            throw TLSError("cannot make a TLS context: \(drainErrors())")
        }
        ctx = c
        verifiesPeer = !server
        guard strata_ssl_ctx_set_min_tls12(c) == 1 else { throw TLSError("cannot set TLS 1.2 as the minimum: \(drainErrors())") }
        _ = strata_ssl_ctx_set_options(c)
        _ = strata_ssl_ctx_set_modes(c)
    }

    deinit { SSL_CTX_free(ctx) }

    /// A server's context: the certificate chain (PEM, the node's certificate first) and its
    /// private key (PEM); with `clientCA`, every client must present a certificate that chains
    /// to it (mutual TLS). Throws with the file and OpenSSL's reason.
    public static func server(certificate: String, key: String, clientCA: String? = nil) throws(TLSError) -> TLSContext {
        let t = try TLSContext(server: true)
        // The context a resumed session must come from: OpenSSL refuses to resume a session
        // whose client certificate it verified without one ("session id context
        // uninitialized": an outside review, sec4, saw every resumption fail with --tls-ca).
        let sessionContext: [UInt8] = Array("strata".utf8)
        guard SSL_CTX_set_session_id_context(t.ctx, sessionContext, UInt32(sessionContext.count)) == 1 else {
            throw TLSError("cannot set the TLS session context: \(drainErrors())")
        }
        try t.useCertificate(certificate, key: key)
        guard let ca = clientCA else { return t }
        guard SSL_CTX_load_verify_locations(t.ctx, ca, nil) == 1 else {
            throw TLSError("cannot load the client CA '\(ca)': \(drainErrors())")
        }
        if let names = SSL_load_client_CA_file(ca) { SSL_CTX_set_client_CA_list(t.ctx, names) }
        SSL_CTX_set_verify(t.ctx, STRATA_SSL_VERIFY_PEER | STRATA_SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
        t.verifiesPeer = true
        return t
    }

    /// A client's context: servers must present a certificate that chains to `ca` (PEM);
    /// with `certificate` and `key`, this client presents its own (for mutual TLS).
    public static func client(ca: String, certificate: String? = nil, key: String? = nil) throws(TLSError) -> TLSContext {
        let t = try TLSContext(server: false)
        guard SSL_CTX_load_verify_locations(t.ctx, ca, nil) == 1 else {
            throw TLSError("cannot load the CA '\(ca)': \(drainErrors())")
        }
        SSL_CTX_set_verify(t.ctx, STRATA_SSL_VERIFY_PEER, nil)
        switch (certificate, key) {
        case (nil, nil): break
        case let (c?, k?): try t.useCertificate(c, key: k)
        default: throw TLSError("a client certificate needs its key, and a key its certificate")
        }
        return t
    }

    private func useCertificate(_ certificate: String, key: String) throws(TLSError) {
        ERR_clear_error()
        guard SSL_CTX_use_certificate_chain_file(ctx, certificate) == 1 else {
            throw TLSError("cannot load the certificate '\(certificate)': \(drainErrors())")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, key, STRATA_SSL_FILETYPE_PEM) == 1 else {
            let reason = drainErrors()
            if reason.contains("key values mismatch") {
                throw TLSError("the private key '\(key)' does not match the certificate '\(certificate)'")
            }
            throw TLSError("cannot load the private key '\(key)': \(reason)")
        }
        guard SSL_CTX_check_private_key(ctx) == 1 else {
            throw TLSError("the private key '\(key)' does not match the certificate '\(certificate)': \(drainErrors())")
        }
    }
}

/// One TLS connection on a non-blocking socket, driven by an event loop: `handshake`, `read`
/// and `write` never block; `.wantRead`/`.wantWrite` say which readiness of the socket to
/// wait for before calling again (with the same arguments, for a write). Not thread-safe: one
/// owner at a time (a loop's connection, or `TLSStream` under its lock). Costs OpenSSL's
/// buffers (about 40 KiB while records are in flight).
public final class TLSSession {
    let ssl: OpaquePointer
    public private(set) var handshakeDone = false

    public enum Outcome: Equatable {
        /// Bytes read or written (for a handshake: it is complete).
        case done(Int)
        case wantRead
        case wantWrite
        /// The peer ended the stream (close_notify, or the socket's end).
        case closed
    }

    /// A session on `fd` with `context`. A client passes the name it expects in the server's
    /// certificate: an IP address is checked against the certificate's IP SANs, any other name
    /// against its DNS names (and sent as SNI).
    public init(context: TLSContext, fd: Int32, server: Bool, expectedName: String? = nil) throws(TLSError) {
        ERR_clear_error()
        guard let s = SSL_new(context.ctx) else { throw TLSError("cannot make a TLS session: \(drainErrors())") }
        ssl = s
        SSL_set_fd(s, fd)
        if server { SSL_set_accept_state(s) } else { SSL_set_connect_state(s) }
        if let name = expectedName, !server {
            let param = SSL_get0_param(s)
            let isIP = SocketAddress(host: name, port: 0) != nil && name != "localhost"
            if isIP {
                guard X509_VERIFY_PARAM_set1_ip_asc(param, name) == 1 else { throw TLSError("'\(name)' is not an IP address") }
            } else {
                guard X509_VERIFY_PARAM_set1_host(param, name, 0) == 1 else { throw TLSError("cannot expect the name '\(name)'") }
                _ = strata_ssl_set_sni(s, name)
            }
        }
    }

    deinit { SSL_free(ssl) }

    /// Takes the handshake as far as the socket allows. `.done` once it is complete (the
    /// peer's certificate verified when the context asks for it); throws with the reason when
    /// it fails (a peer that is not speaking TLS, a certificate that does not verify).
    public func handshake() throws(TLSError) -> Outcome {
        ERR_clear_error()
        errno = 0
        let r = SSL_do_handshake(ssl)
        if r == 1 {
            handshakeDone = true
            return .done(0)
        }
        switch try outcome(of: r, "handshake") {
        case .closed: throw TLSError("handshake: the peer closed the connection")
        case let o: return o
        }
    }

    /// Reads decrypted bytes (at most one record's, ≤ 16 KiB, per call).
    public func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) throws(TLSError) -> Outcome {
        ERR_clear_error()
        errno = 0
        let r = SSL_read(ssl, buffer, Int32(min(count, Int(Int32.max))))
        if r > 0 { return .done(Int(r)) }
        return try outcome(of: r, "read")
    }

    /// Writes bytes (part of them when the socket is full: `.done(n)` with what was taken).
    /// After `.wantWrite`/`.wantRead`, call again with at least the same bytes.
    public func write(_ buffer: UnsafeRawPointer, _ count: Int) throws(TLSError) -> Outcome {
        guard count > 0 else { return .done(0) }
        ERR_clear_error()
        errno = 0
        let r = SSL_write(ssl, buffer, Int32(min(count, Int(Int32.max))))
        if r > 0 { return .done(Int(r)) }
        return try outcome(of: r, "write")
    }

    /// Whether decrypted bytes wait inside the session (a read would return them without the
    /// socket being readable).
    public var hasPending: Bool { SSL_has_pending(ssl) == 1 }

    /// Sends close_notify once, without waiting for the peer's (best effort; the socket is
    /// closed next).
    public func shutdown() {
        guard handshakeDone else { return }
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }

    /// The negotiated version ("TLSv1.3").
    public var version: String { String(cString: SSL_get_version(ssl)) }

    private func outcome(of r: Int32, _ what: String) throws(TLSError) -> Outcome {
        let e = SSL_get_error(ssl, r)
        switch e {
        case STRATA_SSL_ERROR_WANT_READ: return .wantRead
        case STRATA_SSL_ERROR_WANT_WRITE: return .wantWrite
        case STRATA_SSL_ERROR_ZERO_RETURN: return .closed
        case STRATA_SSL_ERROR_SYSCALL:
            let err = errno
            ERR_clear_error()
            if err == 0 || err == ECONNRESET || err == EPIPE { return .closed }
            throw TLSError("\(what): \(String(cString: strerror(err)))")
        default:
            let verify = SSL_get_verify_result(ssl)
            var reason = drainErrors()
            if verify != Int(X509_V_OK) {
                reason = "certificate verify failed: \(String(cString: X509_verify_cert_error_string(verify)))"
            }
            throw TLSError("\(what): \(reason)")
        }
    }
}

/// A TLS connection for blocking clients: the socket is made non-blocking and every wait is a
/// `poll` bounded by `timeout`. One thread may read while another writes (each call holds the
/// session's lock only while OpenSSL runs, never while waiting). Thread-safe.
public final class TLSStream: @unchecked Sendable {
    public let fd: Int32
    private let session: TLSSession
    private let lock = Lock()
    /// Seconds a read waits for bytes before returning `.wouldBlock`.
    public var readTimeout: Double
    /// Seconds a write may wait for room in the socket before failing.
    public let writeTimeout: Double

    /// Handshakes as a client on the connected socket `fd` within `timeout` seconds, checking
    /// the server's certificate against `context`'s CA and `expectedName`.
    public init(fd: Int32, context: TLSContext, expectedName: String, timeout: Double) throws(TLSError) {
        self.fd = fd
        readTimeout = timeout
        writeTimeout = timeout
        Sys.setNonBlocking(fd)
        session = try TLSSession(context: context, fd: fd, server: false, expectedName: expectedName)
        let deadline = monotonicSeconds() + timeout
        while true {
            switch try withoutSIGPIPE({ Result { () throws(TLSError) -> Outcome in try session.handshake() } }).get() {
            case .done, .closed: return
            case .wantRead: try wait(POLLIN, until: deadline, "handshake")
            case .wantWrite: try wait(POLLOUT, until: deadline, "handshake")
            }
        }
    }

    /// Reads what arrives: `.done(0)` at the end of the stream, `.wouldBlock` when nothing came
    /// within `readTimeout`.
    public func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) throws(TLSError) -> IOResult {
        let deadline = monotonicSeconds() + readTimeout
        while true {
            lock.lock()
            let r = withoutSIGPIPE { Result { () throws(TLSError) -> Outcome in try session.read(buffer, count) } }
            lock.unlock()
            let o = try r.get()
            switch o {
            case .done(let n): return .done(n)
            case .closed: return .done(0)
            case .wantRead, .wantWrite:
                do { try wait(o == .wantRead ? POLLIN : POLLOUT, until: deadline, "read") } catch { return .wouldBlock }
            }
        }
    }

    /// Writes every byte, or throws (the peer closed, or no room within `writeTimeout`).
    public func write(_ buffer: UnsafeRawPointer, _ count: Int) throws(TLSError) {
        var sent = 0
        let deadline = monotonicSeconds() + writeTimeout
        while sent < count {
            lock.lock()
            let r = withoutSIGPIPE { Result { () throws(TLSError) -> Outcome in try session.write(buffer + sent, count - sent) } }
            lock.unlock()
            let o = try r.get()
            switch o {
            case .done(let n): sent += n
            case .closed: throw TLSError("write: the peer closed the connection")
            case .wantRead: try wait(POLLIN, until: deadline, "write")
            case .wantWrite: try wait(POLLOUT, until: deadline, "write")
            }
        }
    }

    /// Sends close_notify (best effort).
    public func shutdown() { lock.withLock { withoutSIGPIPE { session.shutdown() } } }

    private typealias Outcome = TLSSession.Outcome

    /// Runs `body` with SIGPIPE blocked on this thread, and takes back a SIGPIPE it raised:
    /// OpenSSL writes with write(2), which raises SIGPIPE on a closed connection, and a
    /// library must not kill (or change the signal handling of) the process that uses it.
    /// Costs two sigprocmask calls, and one sigtimedwait when the pipe broke.
    private func withoutSIGPIPE<T>(_ body: () -> T) -> T {
        var pipe = sigset_t(), old = sigset_t(), pending = sigset_t()
        sigemptyset(&pipe)
        sigaddset(&pipe, SIGPIPE)
        sigpending(&pending)
        let alreadyPending = sigismember(&pending, SIGPIPE) == 1
        pthread_sigmask(SIG_BLOCK, &pipe, &old)
        let result = body()
        if !alreadyPending {
            sigpending(&pending)
            if sigismember(&pending, SIGPIPE) == 1 {
                var zero = timespec(tv_sec: 0, tv_nsec: 0)
                _ = sigtimedwait(&pipe, nil, &zero)
            }
        }
        pthread_sigmask(SIG_SETMASK, &old, nil)
        return result
    }

    private func wait(_ events: Int32, until deadline: Double, _ what: String) throws(TLSError) {
        while true {
            let left = deadline - monotonicSeconds()
            if left <= 0 { throw TLSError("\(what): timed out") }
            var p = pollfd(fd: fd, events: Int16(events), revents: 0)
            let n = poll(&p, 1, Int32(min(max(1, (left * 1000).rounded(.up)), 2e9)))
            if n > 0 { return }
            if n < 0 && errno != EINTR { throw TLSError("\(what): poll: \(String(cString: strerror(errno)))") }
        }
    }
}

/// Holds the server context new connections use; `replace` swaps in a reloaded one (sessions
/// already made keep theirs). Thread-safe.
public final class TLSContextSlot: @unchecked Sendable {
    private let lock = Lock()
    private var current: TLSContext
    public init(_ context: TLSContext) { current = context }
    public var context: TLSContext { lock.withLock { current } }
    public func replace(_ context: TLSContext) { lock.withLock { current = context } }
}
