#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataStore
import StrataImage
import StrataNet
import StrataWire
import Synchronization

/// One client connection, owned by one event loop (every method runs on that loop's thread).
///
/// Reads into an input buffer, decodes frames (PROTOCOL.md §2.2), answers memory hits and
/// control operations at once, hands disk work to the worker pool and writes its response
/// when it comes back (responses are matched by request id, so order may differ). Closes on
/// a fatal protocol error (after answering it), on a frame that takes longer than the frame
/// timeout, on idleness past the idle timeout, and when unsent output passes the cap.
///
/// Memory it may hold: its input (the frame being received, or 256 KiB of read-ahead),
/// requests waiting their turn (at most 4096 and 8 MiB of frame bodies, then reading stops)
/// and its unsent output (`OutputQueue`; bounded per connection by `--output-cap` and across
/// connections by `--max-output-bytes`, see `OutputBudget`). Output and closing live in
/// Connection+Output.swift.
final class Connection: EventHandler, @unchecked Sendable {
    let fd: Int32
    // Strong, not `unowned`: every request reads `node` several times, and each load of an
    // unowned reference is an atomic retain and release. The cycle (node and loop hold their
    // connections) is broken when the connection closes (`unregister`, `connectionClosed`).
    let loop: EventLoop
    let node: Node
    let id: Int

    var input: [UInt8] = []
    var inputStart = 0
    var output = OutputQueue()
    /// What this connection has added to the node's buffered bytes (its output is in the
    /// output budget as it is queued and sent).
    var accounted = 0
    var wantWrite = false

    var authenticated: Bool
    /// Who this connection is (`User.open` on a node without credentials) and the credentials
    /// generation it was last checked against (a reload makes it look its user up again).
    var user = User.open
    var userGeneration = 0
    /// The user's rights on the namespace of its last request (most requests of a connection
    /// name the same one): saves hashing the namespace into the user's scope every time.
    var scopeMemo = ScopeMemo()
    /// The store's entry for the namespace of the last fast GET (Connection+FastGet.swift).
    var namespaceMemo = NamespaceMemo()
    /// A failed HELLO's answer held back by the brute-force throttle until `due` (monotonic
    /// seconds); the tick sends it (`checkTimers`). Counted in `inFlight` meanwhile.
    var delayedAnswer: (due: Double, frame: Frame)?
    /// The peer's address (no port), read once when first needed (logs, the throttle).
    lazy var peer: String = Sys.peerHost(fd) ?? "unknown"
    /// A token is set and this connection has not authenticated yet, nor closed: it counts
    /// against `--max-unauthenticated` and is closed at `--auth-timeout` (Admission.swift).
    var awaitingAuth: Bool
    /// When the node accepted it (monotonic seconds): the auth timeout counts from here.
    let acceptedAt: Double
    var closed = false
    /// `closed`, for the disk workers: a job of a connection that closed meanwhile is skipped
    /// (its answer would be dropped; a 32 MiB read for nobody holds a worker and the gate).
    let gone = Atomic<Bool>(false)
    var closeAfterFlush = false
    /// Disk jobs submitted and not yet answered.
    var inFlight = 0
    /// The first deferred request is held for the log's room and was counted (`mayStart`).
    var heldForLogRoom = false
    var flushScheduled = false
    var peerFinished = false
    var registered: EventLoop.Interest = .read
    var lastWriteProgress = monotonicSeconds()
    /// When the frame now being received started to arrive (nil when between frames).
    var frameStarted: Double?
    /// The TLS session of a connection accepted on the TLS port (OutputConnection+TLS.swift).
    let tls: TLSSession?
    /// The session's read waits for the socket to take bytes (asks for EPOLLOUT).
    var readWantsWrite = false
    private(set) var lastActive: Double

    init(fd: Int32, loop: EventLoop, node: Node, id: Int, now: Double = monotonicSeconds(), tls: TLSSession? = nil) {
        self.fd = fd
        self.tls = tls
        self.loop = loop
        self.node = node
        self.id = id
        authenticated = !node.authEnabled
        awaitingAuth = !authenticated
        acceptedAt = now
        lastActive = now
    }

    var idle: Bool { inFlight == 0 && deferred.isEmpty && output.isEmpty }

    // MARK: Events

    func handle(readable: Bool, writable: Bool, hangup: Bool) {
        if handshakeTakes(readable: readable, writable: writable, hangup: hangup) { return }
        if writable { flushAndResume() }
        if readable || (writable && readWantsWrite) { readAvailable() }
        if hangup && !closed && !readable { close(reason: "hangup") }
    }

    func readAvailable() {
        guard !closed else { return }
        readWantsWrite = false
        let scratch = node.scratch(for: loop)
        var sawEOF = false
        while !closed && !readPaused && readMayGoOn() && input.count - inputStart < readTarget() {
            let r: IOResult
            do { r = try receive(scratch) } catch {
                close(reason: "\(error)")
                return
            }
            guard case .done(let n) = r else { break }
            if n == 0 { sawEOF = true; break }
            input.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
            node.stats.bytesIn.add(n, ordering: .relaxed)
            lastActive = loop.now
            if readWasShort(n, of: scratch.count) { break }
        }
        processFrames()
        if sawEOF {
            // The peer finished sending; answer what it sent, then close.
            peerFinished = true
            if idle { close(reason: "eof") } else { closeAfterFlush = true }
        }
        updateInterest()
        updateAccounting()
    }

    /// How much input to hold: the whole frame being received (as its header says, up to
    /// the largest frame), else 256 KiB of read-ahead for pipelined small frames. A large
    /// frame's buffer is reserved once, at its size, instead of doubling as it arrives — only
    /// once the decoder has accepted its header (nothing is allocated from a bad header).
    private func readTarget() -> Int {
        let available = input.count - inputStart
        guard available >= Wire.headerSize else { return 256 << 10 }
        let body = input.withUnsafeBytes { p in
            Int(UInt32(bigEndian: p.loadUnaligned(fromByteOffset: inputStart + 12, as: UInt32.self)))
        }
        let frame = min(Wire.headerSize + body, node.config.maxFrame + Wire.headerSize)
        if frame > max(available, 1 << 20) && input.capacity - inputStart < frame && headerAccepted() {
            if inputStart > 0 { input.removeFirst(inputStart); inputStart = 0 }
            input.reserveCapacity(frame + (64 << 10))
        }
        return max(frame, 256 << 10)
    }

    /// Whether the decoder accepts the header at the front of the input (its lengths within
    /// this connection's limits).
    private func headerAccepted() -> Bool {
        let decoder = FrameDecoder(magic: Wire.requestMagic,
                                   maxBody: authenticated ? node.config.maxFrame : min(node.config.maxFrame, node.config.preAuthFrameLimit))
        return input.withUnsafeBytes { all in
            do throws(WireError) {
                _ = try decoder.decode(UnsafeRawBufferPointer(rebasing: all[inputStart..<(inputStart + Wire.headerSize)]))
                return true
            } catch { return false }
        }
    }

    /// Requests wait in `deferred` (their order, or the output budget); past 4096 of them or
    /// 8 MiB of their frames the connection stops parsing and reading.
    var deferredFull: Bool { deferred.count >= 4096 || deferredBytes >= 8 << 20 }

    /// Unsent output past which a connection's STATS requests wait until it reads.
    static let statsHoldBytes = 256 << 10
    /// The STATS JSON last built for this connection, and when.
    var lastStats: (at: Double, json: String)?

    /// Requests whose answer may carry values (GET, MGET, SCAN, IMAGE_VARIANT): the ones the
    /// output bound holds even on a connection with nothing pending.
    static func answersWithValues(_ r: Request) -> Bool {
        switch r {
        case .get, .mget, .scan, .imageVariant: return true
        default: return false
        }
    }

    /// Whether `r` may start now. OutputBudget: any request while the node is under its
    /// output bound; past it, only a request with a small answer on a connection with nothing
    /// unsent and nothing in flight (so PING, HELLO, STATS and writes from other clients are
    /// still served). The durability log: a SET of a small value to the disk tier waits while
    /// the log's backlog is at `--log-limit` — held here, with reading paused, rather than
    /// blocking the event loop (every connection on it) or piling frames onto workers; the
    /// tick starts it again once the applier made room. A large value goes to a worker instead
    /// (`runOnWorker`), which waits for its room and is woken when the applier makes it.
    func mayStart(_ r: Request) -> Bool {
        // tiers 1 = memory only. A large value is not held here while nothing else of its
        // connection is in flight: it goes to a worker, which waits for its room and is woken as
        // soon as the applier makes it (held here, it waited for the loop's next tick: 200 ms per
        // 500 KB SET under a 16 MiB disk limit).
        // One such set in flight per connection and `Node.maxLargeSetsAtWorkers` node-wide, so
        // the values they hold stay bounded (64 connections of 8 MiB SETs reached 2.8 GiB).
        if case .set(let s) = r, s.tiers != 1, !node.store.logHasRoom(for: s.value.count) {
            guard node.store.isLargeLogRecord(s.value.count), inFlight == 0,
                  node.largeSetsAtWorkers.load(ordering: .relaxed) < Node.maxLargeSetsAtWorkers else {
                // Held for the log's room: counted once per request, as a wait on a worker is
                // (`log_backpressure_waits`; an outside review, dur16, saw it stay 0 while small
                // SETs were held here).
                if !heldForLogRoom { heldForLogRoom = true; node.store.noteBackpressureWait() }
                return false
            }
        }
        heldForLogRoom = false
        if output.count >= node.outputBudget.share && Self.answersWithValues(r) { return false } // its share (OutputBudget)
        // STATS is built on the loop (~10–20 KB of JSON): a connection that does not read its
        // answers gets no more once 256 KiB of them wait (an outside review: 24 never-reading
        // connections pipelining STATS stalled every other client for 10–20 s).
        if output.count >= Self.statsHoldBytes, case .stats = r { return false }
        if output.count >= Self.statsHoldBytes, case .namespaceStats = r { return false }
        return !node.outputBudget.over || (output.isEmpty && inFlight == 0 && !Self.answersWithValues(r))
    }

    /// Held by a bound (the output bound, or the log's backlog for a disk SET): the first
    /// waiting request waits for it, and nothing more is parsed or read.
    var heldByOutput: Bool {
        guard let first = deferred.first else { return false }
        return !mayStart(first.request)
    }

    func processFrames() {
        // A client that pipelines many requests on one key waits here (its bytes stay in the
        // input buffer) rather than growing the deferred list without bound.
        while !closed && !closeAfterFlush && !deferredFull && !heldByOutput {
            // Plain GETs that hit memory are answered in place (Connection+FastGet.swift);
            // whatever else comes next takes the general path below.
            answerFastGets()
            let available = input.count - inputStart
            if available == 0 || closed { break }
            // Built per frame: a HELLO earlier in the same batch may have lifted the pre-auth cap.
            let decoder = FrameDecoder(magic: Wire.requestMagic,
                                       maxBody: authenticated ? node.config.maxFrame : min(node.config.maxFrame, node.config.preAuthFrameLimit))
            let result: Result<(frame: Frame, consumed: Int)?, WireError> = input.withUnsafeBytes { all in
                do throws(WireError) {
                    return .success(try decoder.decode(UnsafeRawBufferPointer(rebasing: all[inputStart...])))
                } catch { return .failure(error) }
            }
            switch result {
            case .failure(let e):
                node.stats.malformedFrames.add(1, ordering: .relaxed)
                node.log.debug("frame_refused", [("conn", String(id)), ("status", e.status.description), ("reason", e.message)])
                send(Responses.error(e))
                closeAfterFlush = true
                frameStarted = nil
                if idle { flushAndMaybeClose() }
                return
            case .success(nil):
                if frameStarted == nil { frameStarted = monotonicSeconds() }
                compactInput()
                return
            case .success(let (frame, used)?):
                inputStart += used
                frameStarted = nil
                handleFrame(frame)
            }
        }
        compactInput()
    }

    private func compactInput() {
        if inputStart == input.count {
            input.removeAll(keepingCapacity: input.capacity <= 1 << 20)
            inputStart = 0
        } else if inputStart > 64 << 10 && inputStart * 2 > input.count {
            input.removeFirst(inputStart)
            inputStart = 0
        }
    }

    // MARK: Requests

    var deferred: [Pending] = []
    var deferredBytes = 0
    /// Deferred requests' frames are buffered bytes (the node's `--max-buffered-bytes`) like
    /// the input they were parsed from: an outside review saw them leave the count.
    var heldBytes: Int { deferredBytes }
    var inFlightKeys: [ItemKey: Int] = [:]
    var barriersInFlight = 0

    private func handleFrame(_ f: Frame) {
        let received = monotonicSeconds()
        let request: Request
        do { request = try Request.parse(f) } catch {
            send(Responses.error(to: f, error.status, error.message))
            return
        }
        // Nothing in flight, nothing waiting, nothing unsent: any request may run now (the
        // common case).
        if deferred.isEmpty && inFlight == 0 && output.isEmpty && mayStart(request) {
            run(Pending(frame: f, request: request, scope: nil, received: received))
            return
        }
        let p = Pending(frame: f, request: request, scope: Self.scope(of: request), received: received)
        // Keep the connection's order: once something waits, everything after it waits too.
        let allowed = mayStart(request)
        if !deferred.isEmpty || !canRun(p.scope!) || !allowed {
            if deferred.isEmpty && !allowed && node.outputBudget.over { node.outputBudget.heldRequests.add(1, ordering: .relaxed) }
            hold(p, first: false)
            return
        }
        run(p)
    }

    /// Starts what waits once the reason it waited is gone (output sent, the node back
    /// under its output bound): deferred requests, then frames already read.
    func resume() {
        guard !closed else { return }
        runDeferred()
        if !deferredFull && !heldByOutput && inputStart < input.count { processFrames() }
        if closeAfterFlush { flushAndMaybeClose() }
        updateInterest()
        updateAccounting()
    }

    func run(_ p: Pending) {
        let f = p.frame
        let started = p.received
        let request = p.request
        if node.draining {
            send(Responses.error(to: f, .shuttingDown, "the node is shutting down"))
            return
        }
        if !authenticated {
            switch request {
            case .hello, .ping, .quit: break // QUIT too: an unauthenticated client may close politely
            default:
                send(Responses.error(to: f, .authRequired, "authenticate with HELLO first"))
                return
            }
        }
        // The user's role and namespaces (PROTOCOL.md §4.1); Connection+Auth.swift.
        if authenticated && user.role != .admin || userGeneration != node.credentials.generation {
            guard authorize(request, f) else { return }
        }
        let quiet = f.requestFlags.contains(.quiet)
        switch request {
        case .ping:
            if !quiet { send(Responses.status(to: f, .ok)) }
            node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            return
        case .quit:
            if !quiet { send(Responses.status(to: f, .ok)) }
            node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            closeAfterFlush = true
            flushAndMaybeClose()
            return
        case let .hello(lo, hi, token):
            defer { node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6) }
            guard lo <= Wire.version && Wire.version <= hi else {
                send(Responses.error(to: f, .unsupportedVersion, "this node speaks protocol version \(Wire.version) only"))
                return
            }
            guard authenticate(token, f) else { return }
            node.checkPause() // a SIGCONT's first requests may come before the loop's first tick
            send(Responses.hello(to: f, version: Wire.version, authenticated: authenticated,
                                 startVersion: node.verifiedSince.load(ordering: .relaxed),
                                 server: "strata \(Node.version)"))
            return
        case .stats:
            // A client that has not read its last answers is pipelining STATS: it gets the
            // JSON built for it less than a second ago instead of a new one each (building it
            // on the loop is the cost; an outside review stalled other clients with a flood).
            let now = monotonicSeconds()
            if output.isEmpty || lastStats == nil || now - lastStats!.at >= 1 { lastStats = (now, node.statsJSON()) }
            send(Responses.stats(to: f, json: lastStats!.json))
            node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            return
        default:
            break
        }
        if othersOverBufferBound {
            noteBufferBusy()
            send(Responses.error(to: f, .busy, "the node is at its buffered-bytes limit; retry later"))
            return
        }
        if case let .flush(ns, all, tiers, _) = request { auditFlush(ns, all: all, tiers: tiers) }
        if let refused = node.dispatcher.flushedRefusal(request, f) {
            send(refused)
            node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            return
        }
        if case .get(let g) = request, let hit = node.dispatcher.memoryHit(g, f) {
            send(hit)
            node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            return
        }
        if Dispatcher.runsOnLoop(request) {
            if let resp = node.dispatcher.execute(request, f) { send(resp) }
            node.stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            return
        }
        runOnWorker(p, request, f, started: started)
    }
}
