#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

// Who gets a connection: the connection limit fitted to the descriptor limit, refusals, the
// unauthenticated connections' cap, and accepting when the process is out of descriptors.

/// The descriptors a node needs beyond its client connections, and the connection limit that
/// leaves. Pure arithmetic; `Node.fitConnectionsToDescriptors` applies it.
struct DescriptorBudget: Equatable {
    /// Descriptors kept for the node itself: 64 for the fixed ones (stdio, the data
    /// directory's lock, log segments, the listening socket, short-lived files), 2 per SQLite
    /// connection (its database and WAL files; the shared-memory file is one per process), 3
    /// per event loop (epoll, eventfd, the spare descriptor), and the metrics responder's
    /// listener and connections. Measured: a node with 36 pooled readers held 69 SQLite
    /// descriptors under load.
    static func reserve(sqliteConnections: Int, loops: Int, metricsConnections: Int) -> Int {
        64 + 2 * sqliteConnections + 3 * loops + metricsConnections
    }

    let requested: Int
    /// The soft RLIMIT_NOFILE after any raise.
    let fileLimit: Int
    let reserve: Int

    /// How many connections fit: `requested`, or fewer when the descriptor limit has less room
    /// (≤ 0: none fit, the node must not start).
    var effective: Int { fileLimit == Int.max ? requested : min(requested, fileLimit - reserve) }

    /// The soft limit worth asking for: enough for every requested connection, at most `hard`.
    static func wantedSoftLimit(requested: Int, reserve: Int, soft: Int, hard: Int) -> Int? {
        let want = requested + reserve
        guard soft < want, hard > soft else { return nil }
        return min(hard, want)
    }
}

/// A queue of objects, oldest first, that skips those no longer live (`isLive` false) — a
/// loop's unauthenticated connections, for closing the oldest. One thread only. `oldest` is
/// amortized O(1); dead entries are dropped lazily and compacted away once they outnumber the
/// live ones, so memory stays proportional to the live count (`noteLeft` keeps it).
final class OldestFirst<T> {
    private var entries: [T] = []
    private var head = 0
    private(set) var live = 0
    private let isLive: (T) -> Bool

    init(isLive: @escaping (T) -> Bool) { self.isLive = isLive }

    func append(_ x: T) {
        entries.append(x)
        live += 1
    }

    /// One entry stopped being live (call once per entry, after `isLive` turned false).
    func noteLeft() {
        live -= 1
        if entries.count - head > 2 * live + 64 {
            entries = entries[head...].filter(isLive)
            head = 0
        }
    }

    /// The oldest live entry, if any.
    func oldest() -> T? {
        while head < entries.count {
            if isLive(entries[head]) { return entries[head] }
            head += 1
        }
        if head > 0 { entries.removeAll(keepingCapacity: true); head = 0 }
        return nil
    }

    /// Entries held, live or not (for tests of the bound).
    var held: Int { entries.count - head }
}

/// Which protocol a listening socket speaks.
enum ListenerKind: Sendable {
    /// The binary protocol in plaintext, the binary protocol over TLS, memcached's text protocol
    /// in plaintext, memcached's text protocol over TLS.
    case strata, tls, memcached, memcachedTLS

    /// Its connections handshake first (and get no plaintext refusal).
    var usesTLS: Bool { self == .tls || self == .memcachedTLS }
}

/// What the node needs of a client connection of either protocol (each owned by one loop;
/// every method runs on that loop's thread).
protocol ClientConnection: EventHandler {
    var id: Int { get }
    var loop: EventLoop { get }
    /// Nothing in flight, nothing waiting, nothing unsent.
    var idle: Bool { get }
    /// A token is set and the connection has not authenticated yet, nor closed.
    var awaitingAuth: Bool { get }
    func checkTimers(now: Double)
    func closeForShutdown()
    /// Tells the peer why the connection ends (in its protocol), then closes.
    func closeWithNotice(_ status: Status, _ message: String, reason: String)
}

extension Connection: ClientConnection {}

extension Node {
    /// Lowers `--max-connections` to what RLIMIT_NOFILE allows once the node's own descriptors
    /// are set aside (raising the soft limit up to the hard one first, if that is enough or
    /// helps), and logs one warning when it lowered it. Throws when nothing fits.
    func fitConnectionsToDescriptors(loops: Int) throws {
        let metricsConnections = config.metricsPort == nil ? 0 : MetricsServer.maxConnections + 1
        let reserve = DescriptorBudget.reserve(sqliteConnections: config.diskWorkers + processorCount * 2 + 3,
                                               loops: loops, metricsConnections: metricsConnections)
        var (soft, hard) = Sys.openFileLimit()
        if let want = DescriptorBudget.wantedSoftLimit(requested: config.maxConnections, reserve: reserve, soft: soft, hard: hard),
           Sys.setOpenFileSoftLimit(want) {
            log.info("nofile_raised", [("from", String(soft)), ("to", String(want))])
            (soft, hard) = Sys.openFileLimit()
        }
        let budget = DescriptorBudget(requested: config.maxConnections, fileLimit: soft, reserve: reserve)
        guard budget.effective > 0 else {
            store.close()
            throw NodeError(exitCode: 2, "the descriptor limit (RLIMIT_NOFILE \(soft)) leaves no room for connections: the node keeps \(reserve) descriptors for its store and loops; raise it (ulimit -n, LimitNOFILE) or lower --threads or --disk-workers")
        }
        effectiveMaxConnections = budget.effective
        if budget.effective < config.maxConnections {
            log.warn("max_connections_lowered", [("requested", String(config.maxConnections)), ("effective", String(budget.effective)),
                                                 ("nofile", String(soft)), ("nofile_hard", hard == Int.max ? "unlimited" : String(hard)),
                                                 ("reserved", String(reserve)),
                                                 ("hint", "raise the descriptor limit to \(config.maxConnections + reserve) (ulimit -n, LimitNOFILE)")])
        }
        maxUnauthenticated = min(config.maxUnauthenticated ?? max(1, budget.effective / 2), budget.effective)
    }

    /// A connection the acceptor took: refused (an error frame, then close) while draining or
    /// at the connection limit; at the unauthenticated cap it closes the oldest unauthenticated
    /// connection of this loop to make room (or is refused when this loop has none).
    func accepted(_ fd: Int32, on loop: EventLoop, kind: ListenerKind = .strata) {
        if draining {
            refuse(fd, .shuttingDown, "the node is shutting down", kind)
            return
        }
        if stats.connectionsCurrent.load(ordering: .relaxed) >= effectiveMaxConnections {
            refuse(fd, .tooManyConnections, "too many connections (limit \(effectiveMaxConnections))", kind)
            return
        }
        let waiting = connections[loop.index].awaitingAuth
        if authEnabled && stats.connectionsUnauthenticated.load(ordering: .relaxed) >= maxUnauthenticated {
            guard let oldest = waiting.oldest() else {
                refuse(fd, .tooManyConnections, "too many unauthenticated connections (limit \(maxUnauthenticated))", kind)
                return
            }
            stats.authEvictions.add(1, ordering: .relaxed)
            oldest.closeWithNotice(.tooManyConnections, "too many unauthenticated connections (limit \(maxUnauthenticated)): the oldest is closed",
                                   reason: "unauthenticated cap")
        }
        Sys.setNoDelay(fd)
        let id = nextConnectionID.add(1, ordering: .relaxed).newValue
        let c: any ClientConnection
        switch kind {
        case .strata: c = Connection(fd: fd, loop: loop, node: self, id: id)
        case .tls:
            guard let session = tlsSession(fd) else { return }
            c = Connection(fd: fd, loop: loop, node: self, id: id, tls: session)
        case .memcached: c = MemcachedConnection(fd: fd, loop: loop, node: self, listener: memcached!, id: id)
        case .memcachedTLS:
            guard let session = tlsSession(fd) else { return }
            c = MemcachedConnection(fd: fd, loop: loop, node: self, listener: memcached!, id: id, tls: session)
        }
        do { try loop.register(fd, .read, c) } catch {
            Sys.close(fd)
            return
        }
        connections[loop.index].map[id] = c
        stats.connectionsCurrent.add(1, ordering: .relaxed)
        stats.connectionsTotal.add(1, ordering: .relaxed)
        if c.awaitingAuth {
            waiting.append(c)
            stats.connectionsUnauthenticated.add(1, ordering: .relaxed)
        }
    }

    /// A connection stopped awaiting authentication (it authenticated or closed).
    func leftAuthQueue(on loop: EventLoop) {
        connections[loop.index].awaitingAuth.noteLeft()
        stats.connectionsUnauthenticated.add(-1, ordering: .relaxed)
    }

    /// Refuses a connection the node just accepted: the unsolicited frame, then close.
    func refuse(_ fd: Int32, _ status: Status, _ message: String, _ kind: ListenerKind = .strata) {
        writeRefusal(fd, status, message, kind)
        Sys.close(fd)
    }

    /// Counts a refusal and writes its unsolicited frame (opcode 0, request id 0; PROTOCOL.md
    /// §3) with one non-blocking send (a fresh socket's buffer takes it).
    /// A memcached client gets `SERVER_ERROR <message>` instead.
    func writeRefusal(_ fd: Int32, _ status: Status, _ message: String, _ kind: ListenerKind = .strata) {
        stats.connectionsRefused.add(1, ordering: .relaxed)
        // No handshake has happened on a TLS connection: plaintext bytes would only confuse
        // its client, so it is closed without a word.
        if kind.usesTLS { return }
        if kind == .memcached {
            let line = Array("SERVER_ERROR \(message)\r\n".utf8)
            _ = line.withUnsafeBytes { try? Sys.send(fd, $0.baseAddress!, $0.count) }
            return
        }
        var f = Frame(magic: Wire.responseMagic, opcode: 0, requestID: 0)
        f.status = status.rawValue
        f.value = Array(message.utf8)
        let bytes = f.encoded()
        _ = bytes.withUnsafeBytes { try? Sys.send(fd, $0.baseAddress!, $0.count) }
    }

    /// An accept that failed: counted, and logged at most once a second (with how many lines
    /// were left out since the last one).
    func acceptFailed(_ error: SystemError, refused: Int) {
        stats.acceptErrors.add(1, ordering: .relaxed)
        guard let suppressed = acceptLogLimiter.admit(now: monotonicSeconds()) else { return }
        log.warn("accept_failed", [("error", "\(error)"), ("refused", String(refused)), ("suppressed", String(suppressed))])
    }

    /// How long a loop stops watching the listening socket after an accept error.
    static let acceptPause = 0.1
}

/// Accepts connections from the shared listening socket on one loop.
///
/// At the process's descriptor limit (EMFILE/ENFILE) it refuses every waiting connection
/// through its `SpareDescriptor` with TOO_MANY_CONNECTIONS (as at `--max-connections`), then
/// stops watching the socket for `Node.acceptPause` (100 ms) so the loop cannot spin on a
/// listen queue it cannot take from; any other accept error pauses the same way.
///
/// The loops' acceptors take each connection under one lock (`Acceptor.lock`): a spare
/// closed for a refusal frees the process's last descriptor slot, and another loop's
/// accept in that moment would take the slot for a connection of its own — the spare could
/// then not be reopened, and the node could refuse no one until a descriptor came back.
final class Acceptor: EventHandler {
    /// Held around every accept and refusal of every loop (accepts are rare next to requests).
    private static let lock = Lock()

    unowned let node: Node
    unowned let loop: EventLoop
    let listener: Int32
    let kind: ListenerKind
    private let spare = SpareDescriptor()
    private var paused = false

    init(node: Node, loop: EventLoop, listener: Int32, kind: ListenerKind) {
        self.node = node; self.loop = loop; self.listener = listener; self.kind = kind
    }

    func handle(readable: Bool, writable: Bool, hangup: Bool) {
        let kind = self.kind
        while !paused {
            let (result, refused) = Self.lock.withLock { () -> (AcceptResult, Int) in
                let result = Sys.acceptOne(listener)
                guard case .outOfDescriptors = result else { return (result, 0) }
                var refused = 0
                refusing: while refused < 4096 {
                    let outcome = spare.refuseOne(from: listener) {
                        node.writeRefusal($0, .tooManyConnections, "too many connections (the node is out of file descriptors)", kind)
                    }
                    switch outcome {
                    case .refused: refused += 1
                    case .noneWaiting, .noSpare: break refusing
                    }
                }
                return (result, refused)
            }
            switch result {
            case .connection(let c): node.accepted(c, on: loop, kind: kind)
            case .none: return
            case .outOfDescriptors(let e):
                node.acceptFailed(e, refused: refused)
                pause()
            case .failed(let e):
                node.acceptFailed(e, refused: 0)
                pause()
            }
        }
    }

    private func pause() {
        paused = true
        loop.unregister(listener)
        loop.schedule(after: Node.acceptPause) { [self] in
            paused = false
            // Shutdown drops the listening socket for good; a pause must not bring it back.
            guard !node.draining else { return }
            try? loop.register(listener, .accept, self)
        }
    }
}
