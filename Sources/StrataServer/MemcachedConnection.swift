#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataStore
import StrataWire

/// One memcached text-protocol client, owned by one event loop (every method runs on that
/// loop's thread).
///
/// Answers leave in the order commands arrived (the text protocol has no request ids): the
/// commands parsed from one read run as a batch — on the loop while they cannot wait on disk
/// (version, stats, memory-tier hits; everything on a memory-only listener), the rest of the
/// batch on one disk worker, in order, while parsing pauses (and reading, past 64 KiB).
/// Shares the binary listener's limits: `--max-connections`, the unauthenticated cap and `--auth-timeout`, `--frame-timeout`
/// for a command that has started to arrive (slowloris), `--idle-timeout`, `--output-cap`, and
/// the node-wide buffered-bytes bound. A line over `MemcachedParser.maxLine` is answered and
/// closes the connection; a data block over the node's max item is refused from its declared
/// length and dropped as it arrives. On `--memcached-tls-port` it reads and writes through a
/// TLS session, after a handshake that must be done within the frame timeout — the binary TLS
/// listener's code (OutputConnection+TLS.swift).
final class MemcachedConnection: EventHandler, ClientConnection, @unchecked Sendable {
    let fd: Int32
    let loop: EventLoop
    let node: Node
    let listener: MemcachedListener
    let id: Int

    var input: [UInt8] = []
    var inputStart = 0
    var output = OutputQueue()
    /// The listener's namespace's registry entry, for gets answered from memory in place.
    var memo = NamespaceMemo()
    var accounted = 0
    var wantWrite = false
    var flushScheduled = false
    var peerFinished = false
    var closeAfterFlush = false
    var registered: EventLoop.Interest = .read
    var lastWriteProgress = monotonicSeconds()
    var closed = false
    /// A batch is on a disk worker: nothing else runs and reading pauses until it is back.
    var busy = false
    /// Inside `submitSet`: a completion arriving now is deferred through the loop.
    var submitting = false
    /// Commands held by the node's output bound (`hold`): they run before anything else is
    /// parsed, once `mayStart` lets the first.
    var held: [MemcachedParse] = [] { didSet { heldBytes = held.reduce(0) { $0 + $1.consumedBytes } } }
    /// The bytes `held` was parsed from: still buffered bytes (`updateAccounting`).
    private(set) var heldBytes = 0
    /// Bytes of a refused data block still to drop.
    var swallow = 0
    var authenticated: Bool
    var awaitingAuth: Bool
    /// Who this connection is (`User.open` without credentials), and the credentials
    /// generation it was checked against (a reload makes it look its user up again).
    var user = User.open
    var userGeneration = 0
    /// Whether `user` may write the listener's namespace (kept with `user`).
    var userMayWrite = true
    /// A failed authentication's answer held back by the brute-force throttle until `due`
    /// (monotonic seconds); the tick sends it. The connection is `busy` meanwhile.
    var delayedAnswer: (due: Double, line: String)?
    /// The peer's address (no port), read once when first needed.
    lazy var peer: String = Sys.peerHost(fd) ?? "unknown"
    let acceptedAt: Double
    /// When the command now arriving started (nil between commands).
    var commandStarted: Double?
    var lastActive: Double
    /// The TLS session of a connection accepted on `--memcached-tls-port`, else nil.
    let tls: TLSSession?
    /// The session's read waits for the socket to take bytes (asks for EPOLLOUT).
    var readWantsWrite = false

    /// Commands run per batch at most (their answers leave together).
    static let maxBatch = 256

    init(fd: Int32, loop: EventLoop, node: Node, listener: MemcachedListener, id: Int, now: Double = monotonicSeconds(),
         tls: TLSSession? = nil) {
        self.fd = fd
        self.tls = tls
        self.loop = loop
        self.node = node
        self.listener = listener
        self.id = id
        authenticated = !node.authEnabled
        awaitingAuth = !authenticated
        acceptedAt = now
        lastActive = now
        listener.connectionsCurrent.add()
        listener.connectionsTotal.add()
    }

    var idle: Bool { !busy && output.isEmpty && held.isEmpty }

    var parser: MemcachedParser {
        MemcachedParser(maxValue: authenticated ? node.config.maxItem : min(node.config.maxItem, node.config.preAuthFrameLimit))
    }

    // MARK: Events

    func handle(readable: Bool, writable: Bool, hangup: Bool) {
        if handshakeTakes(readable: readable, writable: writable, hangup: hangup) { return }
        // Writable: once the output drains, commands held by the output bound run (as on the
        // binary listener) — not only at the next tick.
        if writable { flushAndResume() }
        if readable || (writable && readWantsWrite) { readAvailable() }
        if hangup && !closed && !readable { close(reason: "hangup") }
    }

    func readAvailable() {
        guard !closed else { return }
        readWantsWrite = false
        let scratch = node.scratch(for: loop)
        // A complete command always fits in this much (the longest line, a max item, CRLF).
        let bound = node.config.maxItem + (64 << 10) + 4096
        while !closed && !busyInputFull && held.isEmpty && readMayGoOn() && input.count - inputStart <= bound {
            let r: IOResult
            do { r = try receive(scratch) } catch {
                close(reason: "\(error)")
                return
            }
            guard case .done(let n) = r else { break }
            if n == 0 { peerFinished = true; break }
            input.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
            node.stats.bytesIn.add(n, ordering: .relaxed)
            listener.bytesRead.add(n)
            lastActive = loop.now
            if readWasShort(n, of: scratch.count) { break }
        }
        process()
        finish()
    }

    /// Parses and runs what the input holds, until it needs more bytes, a batch goes to a
    /// worker, or the connection is closing.
    func process() {
        if !held.isEmpty && !closed && !busy {
            guard mayStart(held[0]) else { return }
            let h = held
            held = []
            run(h)
        }
        while !closed && !closeAfterFlush && !busy && held.isEmpty {
            if swallow > 0 {
                let n = min(swallow, input.count - inputStart)
                inputStart += n
                swallow -= n
                if swallow > 0 {
                    if commandStarted == nil { commandStarted = monotonicSeconds() }
                    break
                }
                commandStarted = nil
                continue
            }
            if input.count == inputStart { break }
            if !authenticated {
                guard authenticateNext() else { break }
                continue
            }
            guard currentUser() else {
                emit { listener.error("CLIENT_ERROR authentication failure: the credentials of user '\(user.name)' were removed or changed", into: &$0) }
                closeAfterFlush = true
                break
            }
            if answerGetInPlace() { continue }
            var batch: [MemcachedParse] = []
            var stop = false
            while batch.count < Self.maxBatch && input.count > inputStart && !stop {
                let p = input.withUnsafeBytes { parser.parse(UnsafeRawBufferPointer(rebasing: $0[inputStart...])) }
                switch p {
                case .needMore:
                    if commandStarted == nil { commandStarted = monotonicSeconds() }
                    stop = true
                case .command(let c, let used):
                    inputStart += used
                    commandStarted = nil
                    // A set over the value limit: its block is dropped as it arrives (whatever
                    // else is answered), and nothing after it is parsed until then.
                    if case .tooLarge(_, let drop, _, _) = c { swallow = drop; stop = true }
                    if !userMayWrite && listener.writes(c) {
                        // A readonly user: refused in place, so answers keep their order.
                        node.stats.forbidden.add(1, ordering: .relaxed)
                        batch.append(.error("CLIENT_ERROR forbidden: user '\(user.name)' may only read", consumed: used, swallow: 0, close: false))
                        continue
                    }
                    if user.role != .admin, let why = node.versionRefusal(listener.callerVersion(c)) {
                        batch.append(.error("CLIENT_ERROR \(why)", consumed: used, swallow: 0, close: false))
                        continue
                    }
                    if case .flushAll(let delay, _) = c {
                        node.audit("flush", user: user.name, peer: peer, [("namespace", logSafe(listener.namespace)), ("all", "0"),
                                                                           ("tiers", "0"), // flush_all empties both tiers
                                                                           ("protocol", "memcached"), ("conn", String(id)),
                                                                           ("delay", String(delay))])
                    }
                    batch.append(p)
                    if case .quit = c { stop = true }
                case .error(_, let used, let drop, let fatal, _):
                    inputStart += used
                    commandStarted = nil
                    batch.append(p)
                    if drop > 0 { swallow = drop; stop = true }
                    if fatal { stop = true }
                }
            }
            if batch.isEmpty { break }
            run(batch)
            if batch.count < Self.maxBatch && swallow == 0 && !busy { break }
        }
        compactInput()
    }

    /// A single-key `get`/`gets` at the front of the input, answered from the memory tier
    /// straight from the input buffer (`MemcachedParser.singleGet`): no parsed command, key
    /// array or batch. False — nothing consumed or answered — for anything else, a key not
    /// live in memory, a draining node or an output bound that holds values back; the general
    /// path then runs the command as before.
    private func answerGetInPlace() -> Bool {
        guard !node.draining, !node.outputBudget.over, !othersOverBufferBound, output.count < node.outputBudget.share else { return false }
        let before = output.count
        var consumed = 0
        let hit = input.withUnsafeBytes { raw -> Bool in
            let buf = UnsafeRawBufferPointer(rebasing: raw[inputStart...])
            guard let g = MemcachedParser.singleGet(buf) else { return false }
            consumed = g.consumed
            let key = UnsafeRawBufferPointer(rebasing: buf[g.key])
            return output.appendOwned { listener.memoryGet(key: key, cas: g.cas, memo: &memo, into: &$0) }
        }
        guard hit else { return false }
        inputStart += consumed
        commandStarted = nil
        if output.count > before { queued(output.count - before) }
        return true
    }

    /// Runs a batch: on the loop while each command may, the rest on one disk worker; from
    /// the first command the output bound does not let start, the rest waits (`hold`).
    private func run(_ commands: [MemcachedParse]) {
        let batch = commands
        var i = 0
        while i < batch.count && !closed {
            guard mayStart(batch[i]) else {
                hold(Array(batch[i...]))
                return
            }
            switch batch[i] {
            case .error(let line, _, _, let fatal, let noreply):
                emit { listener.error(line, noreply: noreply, into: &$0) }
                if fatal { closeAfterFlush = true }
            case .command(let c, _):
                // Past the node's buffered-bytes bound only what holds no data runs (as the
                // binary listener's PING, STATS and HELLO).
                if othersOverBufferBound && !MemcachedListener.runsWhenOverloaded(c) {
                    noteBufferBusy()
                    flushAudit(c)?.refused(Self.overloadedLine) // audited as asked when parsed (an outside review, mc7)
                    emit { listener.error(Self.overloadedLine, noreply: c.noreply, into: &$0) }
                    i += 1
                    continue
                }
                if !node.draining, case .get(let keys, let cas) = c,
                   emit({ listener.memoryGet(keys, cas: cas, memo: &memo, into: &$0) }) {
                    i += 1 // answered from memory
                    continue
                }
                // One key left that missed memory: read from the disk tier here, on the loop,
                // while its files are in the page cache (as a binary GET, `runOnWorker`).
                if !node.draining, case .get(let keys, let cas) = c, keys.count == 1, !listener.memoryOnly,
                   !node.outputBudget.over, node.store.diskReadsMayRunInline,
                   emit({ listener.diskGetOnLoop(keys[0], cas: cas, into: &$0) }) {
                    node.stats.loopDiskReads.add(1, ordering: .relaxed)
                    i += 1
                    continue
                }
                if node.draining {
                    emit { listener.error("SERVER_ERROR the node is shutting down", noreply: c.noreply, into: &$0) }
                } else if listener.runsOnLoop(c) {
                    if !emit({ listener.execute(c, into: &$0, flushAudit: flushAudit(c), mayTakeLeases: userMayWrite) }) { closeAfterFlush = true }
                } else if i == batch.count - 1, case .store(let st) = c, submitSet(st) {
                    // the last command, a durable set: decided here, answered after the loop's log write
                    return
                } else {
                    submit(Array(batch[i...]))
                    return
                }
            case .needMore: break
            }
            i += 1
        }
    }

    /// For a `flush_all`: a delayed one, when its delay is up, runs only while its user still
    /// exists with the same token and may write the listener's namespace, and it is audited
    /// then (`action=flush_run` or `flush_dropped`); one refused when it runs (DISK_FULL, …) is
    /// audited as `action=flush_refused` with why. Nil for every other command.
    private func flushAudit(_ c: MemcachedCommand) -> FlushAudit? {
        guard case .flushAll(let delay, _) = c else { return nil }
        let node = self.node, name = user.name, hash = user.tokenHash, ns = listener.namespace, peer = self.peer, id = self.id
        let auth = node.authEnabled
        let fields = [("namespace", logSafe(ns)), ("all", "0"), ("tiers", "0"), ("protocol", "memcached"), ("conn", String(id)), ("delay", String(delay))]
        return FlushAudit(mayRunNow: {
            let allowed = !auth || (node.credentials.current?.current(name, hash: hash)?.mayWrite(ns) ?? false)
            node.audit(allowed ? "flush_run" : "flush_dropped", user: name, peer: peer,
                       fields + (allowed ? [] : [("why", "the user was removed, its token changed, or it may no longer write this namespace")]))
            return allowed
        }, refused: { why in
            node.audit("flush_refused", user: name, peer: peer, fields + [("why", why)]) // quoted and escaped by the log
        })
    }

    /// A plain set with no worker (`MemcachedListener.submitSet`); reading pauses until its
    /// answer is back, so answers keep their order. False when it must go to a worker.
    private func submitSet(_ st: MemcachedStore) -> Bool {
        busy = true
        submitting = true
        defer { submitting = false }
        let loop = self.loop
        let r = listener.submitSet(st) { [self] line in
            let out = line.map(Self.answerLine) ?? []
            // Answered at once (inside submitSet) or by another thread: back through the loop.
            if loop.isCurrentThread && !submitting { completed(out, quit: false, rest: []) } else {
                loop.execute { [self] in completed(out, quit: false, rest: []) }
            }
        }
        switch r {
        case .submitted:
            node.scheduleLogFlush(on: loop)
            return true
        case .notEligible:
            busy = false
            return false
        case .failed(let line):
            busy = false
            emit { listener.error(line, noreply: st.noreply, into: &$0) }
            return true
        }
    }

    /// `<line>\r\n`; the usual answers of a set without building them each time.
    static func answerLine(_ line: String) -> [UInt8] {
        switch line {
        case "STORED": return stored
        case "NOT_STORED": return notStored
        default: return Array((line + "\r\n").utf8)
        }
    }
    private static let stored = Array("STORED\r\n".utf8), notStored = Array("NOT_STORED\r\n".utf8)
    /// Whether a parsed line ended in its command's `noreply` (nothing is sent for it).
    static func noreply(_ p: MemcachedParse) -> Bool {
        switch p {
        case .command(let c, _): return c.noreply
        case .error(_, _, _, _, let n): return n
        case .needMore: return false
        }
    }
    static let overloadedLine = "SERVER_ERROR busy: the node is at its buffered-bytes limit; retry later"

    private func submit(_ rest: [MemcachedParse]) {
        if othersOverBufferBound {
            noteBufferBusy()
            for case .command(let c, _) in rest { flushAudit(c)?.refused(Self.overloadedLine) }
            emit { out in for p in rest { self.listener.error(Self.overloadedLine, noreply: Self.noreply(p), into: &out) } }
            return
        }
        busy = true
        let listener = self.listener
        let budget = node.outputBudget
        let mayTakeLeases = userMayWrite
        let accepted = node.workers.submit { [self] in
            var out: [UInt8] = []
            var quit = false
            var i = 0
            PrechargedOutput.begin()
            while i < rest.count && !quit {
                // Past the output bound, commands with values go back to the connection (held
                // there), so answers being made when it is crossed are at most one batch's.
                if budget.over && Self.answersWithValues(rest[i]) { break }
                switch rest[i] {
                case .error(let line, _, _, let fatal, let noreply):
                    listener.error(line, noreply: noreply, into: &out)
                    quit = fatal
                case .command(let c, _): quit = !listener.execute(c, into: &out, flushAudit: flushAudit(c), mayTakeLeases: mayTakeLeases)
                case .needMore: break
                }
                i += 1
            }
            let left = quit ? [] : Array(rest[i...])
            // Counted from now: answers on their way to the loop are output too (they replace
            // what their large reads charged).
            budget.add(out.count - PrechargedOutput.end())
            loop.execute { [self] in completed(out, quit: quit, rest: left, inTransit: out.count) }
        }
        if !accepted {
            busy = false
            node.stats.busyRefusals.add(1, ordering: .relaxed)
            emit { out in for _ in rest { listener.error("SERVER_ERROR busy: too much disk work queued; retry later", into: &out) } }
        }
    }

    private func completed(_ out: [UInt8], quit: Bool, rest: [MemcachedParse], inTransit: Int = 0) {
        busy = false
        // The answers move from "on their way" to this connection's output (counted by `queued`).
        node.outputBudget.add(-inTransit)
        guard !closed else { return }
        if !out.isEmpty {
            output.append(bytes: out)
            guard queued(out.count) else { return }
        }
        if quit { closeAfterFlush = true }
        if !rest.isEmpty { hold(rest) }
        process()
        finish()
    }

    /// After a read or a completion: interest, accounting, and closing at end of input.
    func finish() {
        guard !closed else { return }
        if (peerFinished || closeAfterFlush) && idle { close(reason: peerFinished ? "eof" : "done"); return }
        updateInterest()
        updateAccounting()
    }

    private func compactInput() {
        if inputStart == input.count {
            input.removeAll(keepingCapacity: input.capacity <= 1 << 20); inputStart = 0
        } else if inputStart > 64 << 10 && inputStart * 2 > input.count {
            input.removeFirst(inputStart); inputStart = 0
        }
    }
}
