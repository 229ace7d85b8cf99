#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet

/// The metrics endpoint: a small HTTP/1.1 responder serving `/metrics` (Prometheus text format
/// 0.0.4), `/healthz` (200 while serving, 503 while draining) and `/readyz` (also 503 while a
/// cluster node has not caught up with every peer, STATS `cluster_verified` 0) on `--metrics-host` (default
/// 127.0.0.1: it has no authentication) and `--metrics-port`.
///
/// Guarantees: up to `maxConnections` (16) connections are served at once, each on its own
/// deadline, so idle or slow clients cannot delay another's `/healthz`. The kernel hands a
/// connection over once its request has arrived (TCP_DEFER_ACCEPT; a silent one after about a
/// second), so a probe is accepted with its request and answered at once. At the bound a new
/// connection takes the place of an open one that is not sending an answer (`makeRoom`); a
/// silent one never replaces a young one; only when none can be replaced is the new one
/// answered 503 at once and closed. So idle connections, however many and however often
/// reopened, cannot keep a probe out. A request must arrive in full within `requestTimeout`
/// (2 s) of the accept and be at most 8 KiB (431 otherwise); the answer must be taken within
/// `responseTimeout` (5 s). One request per connection (`Connection: close`); anything but
/// GET or HEAD gets 405, another path 404.
///
/// With `--metrics-tls` it speaks HTTPS: each connection handshakes first (the node's TLS
/// context, so `--tls-cert`/`--tls-key`, `--tls-ca` for client certificates, and SIGHUP's
/// reload; the handshake stepped on this loop with `TLSSession.step`, inside the request
/// timeout), then reads and writes through the session and ends with close_notify. The 17th
/// connection at once is closed without an answer (a 503 would be plaintext).
///
/// Costs: one thread (`strata-metrics`) running its own `EventLoop`, apart from the node's
/// loops; `/metrics` text is built on that thread (a few ms), so the node's loops never wait
/// for a scrape.
final class MetricsServer: @unchecked Sendable {
    static let maxConnections = 16
    static let requestTimeout = 2.0
    static let responseTimeout = 5.0
    static let maxRequestBytes = 8192
    /// Connections accepted per loop iteration.
    static let acceptBatch = 4
    /// Seconds a connection is spared from being replaced while others are not.
    static let replaceableAfter = 0.5

    unowned let node: Node
    let fd: Int32
    let port: UInt16
    /// `--metrics-tls`: connections get a session from the node's TLS context.
    let tls: Bool
    private let loop: EventLoop
    private let finished = Completion<Void>()
    /// Open connections by descriptor (the loop's thread only).
    fileprivate var open: [Int32: HTTPConnection] = [:]
    private var listenerPaused = false

    init(node: Node, host: String, port: UInt16, tls: Bool = false) throws {
        self.node = node
        self.tls = tls
        guard let a = SocketAddress(host: host, port: port) else {
            throw NodeError(exitCode: 2, "--metrics-host must be a numeric IPv4/IPv6 address or localhost, got '\(host)'")
        }
        do { (fd, self.port) = try Socket.listen(a, backlog: 64) } catch {
            throw NodeError(exitCode: 3, "cannot listen for metrics on \(a): \(error)")
        }
        // Connections that send their request (a probe, a scrape) are accepted with it at once;
        // silent ones wait in the kernel (about a second), so they cannot crowd probes out.
        Socket.deferAccept(fd, seconds: 1)
        do { loop = try EventLoop(index: 0) } catch {
            Sys.close(fd)
            throw NodeError(exitCode: 3, "cannot start the metrics loop: \(error)")
        }
        try? loop.register(fd, .read, Listener(server: self))
        startThread(name: "strata-metrics") { [self] in
            loop.run(tickInterval: 0.1) { [self] in
                let now = monotonicSeconds()
                for c in Array(open.values) { c.checkDeadlines(now: now) }
            }
            for c in Array(open.values) { c.close() }
            Sys.close(fd)
            finished.fulfil(())
        }
    }

    /// Closes the listener and every connection; returns once the thread has finished.
    func stop() {
        loop.stop()
        finished.wait()
    }

    fileprivate func acceptAll() {
        // A few at a time (the listener is level-triggered: the rest wait for the next loop
        // iteration), so the requests of those just accepted are read before more come.
        var accepted = 0
        while !listenerPaused && accepted < Self.acceptBatch {
            accepted += 1
            switch Sys.acceptOne(fd) {
            case .none: return
            case .connection(let c):
                if open.count >= Self.maxConnections && !makeRoom(for: c) {
                    if tls { Sys.close(c) } else { Self.refuseBusy(c) }
                    continue
                }
                var session: TLSSession? = nil
                if tls {
                    guard let s = node.tlsSession(c) else { continue } // closed, counted
                    session = s
                }
                let h = HTTPConnection(fd: c, server: self, now: monotonicSeconds(), tls: session)
                do { try loop.register(c, .read, h) } catch {
                    Sys.close(c)
                    continue
                }
                open[c] = h
                // A request that came with the connection is answered now.
                h.process(readable: true, writable: false, hangup: false)
            case .outOfDescriptors(let e), .failed(let e):
                // Out of descriptors (or refused by the kernel): stop looking for a moment so
                // the loop does not spin on a queue it cannot take from.
                node.acceptFailed(e, refused: 0)
                listenerPaused = true
                loop.unregister(fd)
                loop.schedule(after: Node.acceptPause) { [self] in
                    listenerPaused = false
                    try? loop.register(fd, .read, Listener(server: self))
                }
                return
            }
        }
    }

    fileprivate func closed(_ c: HTTPConnection) { open[c.fd] = nil }

    /// At the bound: closes one open connection so `newcomer` may take its place, or returns
    /// false (the newcomer is refused). An outside review held /healthz out with idle
    /// connections reopened as they closed, so the choice is by behaviour: every waiting
    /// connection first reads what arrived (a probe's request is answered, not replaced); then
    /// one whose answer was all sent goes, else one whose peer sent nothing for
    /// `replaceableAfter` or longer, else — only for a newcomer whose request (or TLS hello)
    /// already arrived — the one quiet longest that is not sending an answer. A silent newcomer
    /// never replaces a recently active connection, so a flood of silent connections cannot push
    /// out a probe whose request is still on its way.
    private func makeRoom(for newcomer: Int32) -> Bool {
        for w in open.values where w.mayBeReplaced && !w.answerSent { w.process(readable: true, writable: false, hangup: false) }
        var byte: UInt8 = 0
        let hasData = recv(newcomer, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) > 0
        let now = monotonicSeconds()
        let candidates = open.values.filter(\.mayBeReplaced)
        let sent = candidates.filter(\.answerSent)
        // By the last time the peer sent anything, not the accept: a probe in the middle of its
        // TLS handshake is active; a holder that sent a few bytes of a hello and went quiet is
        // not (an outside review kept HTTPS probes out so).
        let settled = candidates.filter { now - $0.lastActive >= Self.replaceableAfter }
        let pool = !sent.isEmpty ? sent : !settled.isEmpty ? settled : hasData ? candidates : []
        guard let victim = pool.min(by: { $0.lastActive < $1.lastActive }) else { return false }
        victim.close()
        return true
    }

    /// Over the bound: 503 with one non-blocking send, after taking whatever request bytes
    /// already arrived (closing with unread input would reset the connection, and the client
    /// could lose the answer).
    private static func refuseBusy(_ c: Int32) {
        var scratch = [UInt8](repeating: 0, count: 4096)
        _ = scratch.withUnsafeMutableBytes { try? Sys.read(c, $0.baseAddress!, $0.count) }
        let bytes = httpResponse(503, "text/plain", "busy: \(maxConnections) metrics connections are open\n")
        _ = bytes.withUnsafeBytes { try? Sys.send(c, $0.baseAddress!, $0.count) }
        Sys.close(c)
    }

    /// The answer to one complete request head (pure but for reading the node's state).
    fileprivate func answer(_ request: [UInt8]) -> [UInt8] {
        let line = String(decoding: request.prefix { $0 != 13 && $0 != 10 }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[2].hasPrefix("HTTP/1.") else { return Self.httpResponse(400, "text/plain", "bad request\n") }
        let path = parts[1].split(separator: "?").first.map(String.init) ?? ""
        guard path == "/metrics" || path == "/healthz" || path == "/readyz" else { return Self.httpResponse(404, "text/plain", "not found\n") }
        guard parts[0] == "GET" || parts[0] == "HEAD" else {
            return Self.httpResponse(405, "text/plain", "method not allowed\n", allow: true)
        }
        if path == "/healthz" {
            return node.draining ? Self.httpResponse(503, "text/plain", "draining\n") : Self.httpResponse(200, "text/plain", "ok\n")
        }
        if path == "/readyz" {
            if node.draining { return Self.httpResponse(503, "text/plain", "draining\n") }
            let catchingUp = node.unsyncedPeers
            return catchingUp.isEmpty ? Self.httpResponse(200, "text/plain", "ok\n")
                : Self.httpResponse(503, "text/plain", "catching up with \(catchingUp.count) peer(s): \(catchingUp.prefix(16).joined(separator: ","))\n")
        }
        return Self.httpResponse(200, "text/plain; version=0.0.4; charset=utf-8", node.prometheusText(), head: parts[0] == "HEAD")
    }

    static func httpResponse(_ code: Int, _ type: String, _ body: String, allow: Bool = false, head: Bool = false) -> [UInt8] {
        let reason = [200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                      431: "Request Header Fields Too Large", 503: "Service Unavailable"][code] ?? "Error"
        var text = "HTTP/1.1 \(code) \(reason)\r\nContent-Type: \(type)\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n"
        if allow { text += "Allow: GET, HEAD\r\n" }
        text += "\r\n"
        if !head { text += body }
        return Array(text.utf8)
    }
}

/// The metrics listening socket's handler.
private final class Listener: EventHandler {
    unowned let server: MetricsServer
    init(server: MetricsServer) { self.server = server }
    func handle(readable: Bool, writable: Bool, hangup: Bool) { server.acceptAll() }
}

/// One metrics connection: reads a request head, writes the answer, ends its side, and waits
/// (bounded) for the client to close, so unread bytes never turn the close into a reset.
/// Over HTTPS: the handshake first, then the same through the session.
private final class HTTPConnection: EventHandler {
    let fd: Int32
    unowned let server: MetricsServer
    private let tls: TLSSession?
    let acceptedAt: Double
    private var request: [UInt8] = []
    private var response: [UInt8] = []
    private var sent = 0
    private var answeredAt: Double?
    private var isClosed = false
    /// The client ended its side before taking the whole answer: finish writing, then close.
    private var peerDone = false

    init(fd: Int32, server: MetricsServer, now: Double, tls: TLSSession? = nil) {
        self.fd = fd
        self.server = server
        self.tls = tls
        acceptedAt = now
        lastActive = now
    }

    /// When the peer last sent something (an event from the loop), or the accept.
    private(set) var lastActive: Double

    func handle(readable: Bool, writable: Bool, hangup: Bool) {
        if readable { lastActive = monotonicSeconds() }
        process(readable: readable, writable: writable, hangup: hangup)
    }

    /// `handle` without counting as the peer's activity (the server looking for a request that
    /// arrived, before it picks a connection to replace).
    func process(readable: Bool, writable: Bool, hangup: Bool) {
        if let t = tls, !t.handshakeDone {
            switch t.step() {
            case .done:
                server.loopModify(fd, .read)
                read()
            case .wait(let interest): server.loopModify(fd, interest)
            case .failed(let reason):
                server.node.tlsHandshakeFailed(reason, conn: Int(fd), [("listener", "metrics")])
                close()
            }
            return
        }
        if writable && answeredAt != nil { write() }
        // A session's read may need the socket writable first (a key update's answer).
        if readable || hangup || (writable && answeredAt == nil) { read() }
    }

    /// Reads from the socket or through the session: nil on an error, `.done(0)` at the end.
    private func receive(_ chunk: inout [UInt8]) -> IOResult? {
        guard let t = tls else { return chunk.withUnsafeMutableBytes { try? Sys.read(fd, $0.baseAddress!, $0.count) } }
        let r = chunk.withUnsafeMutableBytes { p in Result { () throws(TLSError) -> TLSSession.Outcome in try t.read(p.baseAddress!, p.count) } }
        switch r {
        case .failure: return nil
        case .success(.done(let n)): return .done(n)
        case .success(.closed): return .done(0)
        case .success(.wantRead): return .wouldBlock
        case .success(.wantWrite):
            server.loopModify(fd, [.read, .write])
            return .wouldBlock
        }
    }

    /// Sends from `sent` on, to the socket or through the session: nil on an error.
    private func transmit() -> IOResult? {
        guard let t = tls else { return response.withUnsafeBytes { try? Sys.send(fd, $0.baseAddress! + sent, response.count - sent) } }
        let r = response.withUnsafeBytes { p in
            Result { () throws(TLSError) -> TLSSession.Outcome in try t.write(p.baseAddress! + sent, p.count - sent) }
        }
        switch r {
        case .failure, .success(.closed): return nil
        case .success(.done(let n)): return .done(n)
        case .success(.wantRead), .success(.wantWrite): return .wouldBlock
        }
    }

    /// Not sending an answer: still waiting for (the rest of) its request, or its answer was
    /// all sent and it only waits for the client to close.
    var mayBeReplaced: Bool { answeredAt == nil || sent >= response.count }
    /// Its answer was all handed to the socket.
    var answerSent: Bool { answeredAt != nil && sent >= response.count }

    func checkDeadlines(now: Double) {
        if let t = tls, !t.handshakeDone, now - acceptedAt > MetricsServer.requestTimeout {
            server.node.tlsHandshakeFailed("no complete handshake within the request timeout (\(MetricsServer.requestTimeout) s)",
                                           conn: Int(fd), [("listener", "metrics")])
            return close()
        }
        if let t = answeredAt {
            if now - t > MetricsServer.responseTimeout { close() }
        } else if now - acceptedAt > MetricsServer.requestTimeout {
            close()
        }
    }

    private func read() {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !isClosed {
            let r = receive(&chunk)
            guard let r, case .done(let n) = r else {
                if r == nil { close() } // a read error
                return
            }
            if n == 0 {
                // The client is done (or gave up); an answer still being written is finished.
                guard answeredAt != nil && sent < response.count else { return close() }
                peerDone = true
                server.loopModify(fd, .write)
                return
            }
            guard answeredAt == nil else { continue } // after the answer: discard until it closes
            request += chunk[0..<n]
            if request.containsHeaderEnd {
                respond(server.answer(request))
            } else if request.count > MetricsServer.maxRequestBytes {
                respond(MetricsServer.httpResponse(431, "text/plain", "request header too large\n"))
            }
        }
    }

    private func respond(_ bytes: [UInt8]) {
        response = bytes
        answeredAt = monotonicSeconds()
        request = []
        write()
    }

    private func write() {
        while !isClosed && sent < response.count {
            guard let r = transmit() else { return close() }
            guard case .done(let n) = r else {
                server.loopModify(fd, peerDone ? .write : [.read, .write])
                return
            }
            sent += n
        }
        guard !isClosed else { return }
        if peerDone { return close() }
        server.loopModify(fd, .read)
        tls?.shutdown() // close_notify, then the socket's end
        Sys.shutdownWrite(fd)
    }

    func close() {
        guard !isClosed else { return }
        isClosed = true
        server.loopUnregister(fd)
        if answeredAt == nil || sent < response.count { tls?.shutdown() }
        Sys.close(fd)
        server.closed(self)
    }
}

extension MetricsServer {
    fileprivate func loopModify(_ fd: Int32, _ interest: EventLoop.Interest) { loop.modify(fd, interest) }
    fileprivate func loopUnregister(_ fd: Int32) { loop.unregister(fd) }
}

extension Array where Element == UInt8 {
    var containsHeaderEnd: Bool {
        guard count >= 4 else { return false }
        for i in 0...(count - 4) where self[i] == 13 && self[i + 1] == 10 && self[i + 2] == 13 && self[i + 3] == 10 { return true }
        return false
    }
}
