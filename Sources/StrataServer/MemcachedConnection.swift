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
/// batch on one disk worker, in order, while reading pauses. Shares the binary listener's
/// limits: `--max-connections`, the unauthenticated cap and `--auth-timeout`, `--frame-timeout`
/// for a command that has started to arrive (slowloris), `--idle-timeout`, `--output-cap`, and
/// the node-wide buffered-bytes bound. A line over `MemcachedParser.maxLine` is answered and
/// closes the connection; a data block over the node's max item is refused from its declared
/// length and dropped as it arrives.
final class MemcachedConnection: EventHandler, ClientConnection, @unchecked Sendable {
    let fd: Int32
    let loop: EventLoop
    let node: Node
    let listener: MemcachedListener
    let id: Int

    private var input: [UInt8] = []
    private var inputStart = 0
    private var output: [UInt8] = []
    private var outputStart = 0
    private var accounted = 0
    private var wantWrite = false
    private var flushScheduled = false
    private var peerFinished = false
    private var closeAfterFlush = false
    private var registered: EventLoop.Interest = .read
    private var lastWriteProgress = monotonicSeconds()
    private var closed = false
    /// A batch is on a disk worker: nothing else runs and reading pauses until it is back.
    private var busy = false
    /// Bytes of a refused data block still to drop.
    private var swallow = 0
    private var authenticated: Bool
    private(set) var awaitingAuth: Bool
    private let acceptedAt: Double
    /// When the command now arriving started (nil between commands).
    private var commandStarted: Double?
    private var lastActive: Double

    /// Commands run per batch at most (their answers leave together).
    static let maxBatch = 256

    init(fd: Int32, loop: EventLoop, node: Node, listener: MemcachedListener, id: Int, now: Double = monotonicSeconds()) {
        self.fd = fd
        self.loop = loop
        self.node = node
        self.listener = listener
        self.id = id
        authenticated = node.config.authToken == nil
        awaitingAuth = !authenticated
        acceptedAt = now
        lastActive = now
        listener.connectionsCurrent.add()
        listener.connectionsTotal.add()
    }

    var idle: Bool { !busy && outputStart == output.count }

    private var parser: MemcachedParser {
        MemcachedParser(maxValue: authenticated ? node.config.maxItem : min(node.config.maxItem, node.config.preAuthFrameLimit))
    }

    // MARK: Events

    func handle(readable: Bool, writable: Bool, hangup: Bool) {
        if writable { flush() }
        if readable { readAvailable() }
        if hangup && !closed && !readable { close(reason: "hangup") }
    }

    private func readAvailable() {
        guard !closed else { return }
        let scratch = node.scratch(for: loop)
        // A complete command always fits in this much (the longest line, a max item, CRLF).
        let bound = node.config.maxItem + (64 << 10) + 4096
        while !closed && !busy && input.count - inputStart <= bound {
            let r: IOResult
            do { r = try Sys.read(fd, scratch.baseAddress!, scratch.count) } catch {
                close(reason: "read: \(error)")
                return
            }
            guard case .done(let n) = r else { break }
            if n == 0 { peerFinished = true; break }
            input.append(contentsOf: UnsafeRawBufferPointer(rebasing: scratch[0..<n]))
            node.stats.bytesIn.add(n, ordering: .relaxed)
            listener.bytesRead.add(n)
            lastActive = monotonicSeconds()
            if n < scratch.count { break }
        }
        process()
        finish()
    }

    /// Parses and runs what the input holds, until it needs more bytes, a batch goes to a
    /// worker, or the connection is closing.
    private func process() {
        while !closed && !closeAfterFlush && !busy {
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
                    batch.append(p)
                    if case .quit = c { stop = true }
                case .error(_, let used, let drop, let fatal):
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

    /// Before authentication only `set <any> <flags> <exptime> <len>` with the data
    /// `<user> <token>` is accepted (memcached's `-Y` authfile form); anything else gets
    /// CLIENT_ERROR unauthenticated. A wrong token is answered and closes the connection.
    /// Returns false when more bytes are needed.
    private func authenticateNext() -> Bool {
        let p = input.withUnsafeBytes { parser.parse(UnsafeRawBufferPointer(rebasing: $0[inputStart...])) }
        switch p {
        case .needMore:
            if commandStarted == nil { commandStarted = monotonicSeconds() }
            return false
        case .error(let line, let used, let drop, let fatal):
            inputStart += used
            commandStarted = nil
            swallow = drop
            listener.error(line, into: &output)
            if fatal { closeAfterFlush = true }
        case .command(let c, let used):
            inputStart += used
            commandStarted = nil
            if case .quit = c { closeAfterFlush = true; break }
            guard case .store(let s) = c, s.verb == .set else {
                listener.error("CLIENT_ERROR unauthenticated", into: &output)
                break
            }
            listener.authCommands.add()
            let parts = s.value.split(separator: 0x20, maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, let expected = node.config.authToken, constantTimeEqual(Array(parts[1]), expected) {
                authenticated = true
                awaitingAuth = false
                node.leftAuthQueue(on: loop)
                MemcachedResponse.line("STORED", into: &output)
            } else {
                listener.authErrors.add()
                node.stats.authFailures.add(1, ordering: .relaxed)
                node.log.warn("auth_failed", [("conn", String(id)), ("protocol", "memcached")])
                listener.error("CLIENT_ERROR authentication failure", into: &output)
                closeAfterFlush = true
            }
        }
        outputAdded()
        return true
    }

    /// Runs a batch: on the loop while each command may, the rest on one disk worker.
    private func run(_ batch: [MemcachedParse]) {
        var i = 0
        while i < batch.count {
            switch batch[i] {
            case .error(let line, _, _, let fatal):
                listener.error(line, into: &output)
                if fatal { closeAfterFlush = true }
            case .command(let c, _):
                if node.draining {
                    listener.error("SERVER_ERROR the node is shutting down", into: &output)
                } else if case .get(let keys, let cas) = c, !listener.memoryOnly, listener.memoryGet(keys, cas: cas, into: &output) {
                    // answered from memory
                } else if listener.runsOnLoop(c) {
                    if !listener.execute(c, into: &output) { closeAfterFlush = true }
                } else {
                    submit(Array(batch[i...]))
                    outputAdded()
                    return
                }
            case .needMore: break
            }
            i += 1
        }
        outputAdded()
    }

    private func submit(_ rest: [MemcachedParse]) {
        if node.overloaded {
            node.stats.busyRefusals.add(1, ordering: .relaxed)
            for _ in rest { listener.error("SERVER_ERROR busy: the node is at its buffered-bytes limit; retry later", into: &output) }
            return
        }
        busy = true
        let listener = self.listener
        let accepted = node.workers.submit { [self] in
            var out: [UInt8] = []
            var quit = false
            for p in rest where !quit {
                switch p {
                case .error(let line, _, _, let fatal):
                    listener.error(line, into: &out)
                    quit = fatal
                case .command(let c, _): quit = !listener.execute(c, into: &out)
                case .needMore: break
                }
            }
            loop.execute { [self] in completed(out, quit: quit) }
        }
        if !accepted {
            busy = false
            node.stats.busyRefusals.add(1, ordering: .relaxed)
            for _ in rest { listener.error("SERVER_ERROR busy: too much disk work queued; retry later", into: &output) }
        }
    }

    private func completed(_ out: [UInt8], quit: Bool) {
        busy = false
        guard !closed else { return }
        output.append(contentsOf: out)
        if quit { closeAfterFlush = true }
        outputAdded()
        process()
        finish()
    }

    /// After a read or a completion: interest, accounting, and closing at end of input.
    private func finish() {
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

    // MARK: Output

    /// New bytes are in `output`: enforce the cap, flush at the end of this loop iteration.
    private func outputAdded() {
        guard !closed, outputStart < output.count else { return }
        if output.count - outputStart > node.config.outputCap {
            node.stats.outputCapCutoffs.add(1, ordering: .relaxed)
            node.log.warn("output_cap_exceeded", [("conn", String(id)), ("unsent_bytes", String(output.count - outputStart))])
            close(reason: "output cap")
            return
        }
        if !flushScheduled {
            flushScheduled = true
            loop.atEndOfIteration { [self] in
                flushScheduled = false
                flush()
            }
        }
    }

    private func flush() {
        guard !closed else { return }
        while outputStart < output.count {
            let r: IOResult
            do {
                r = try output.withUnsafeBytes { try Sys.send(fd, $0.baseAddress! + outputStart, output.count - outputStart) }
            } catch {
                close(reason: "send: \(error)")
                return
            }
            guard case .done(let n) = r else { break }
            outputStart += n
            if n > 0 { lastWriteProgress = monotonicSeconds() }
            node.stats.bytesOut.add(n, ordering: .relaxed)
            listener.bytesWritten.add(n)
        }
        if outputStart == output.count {
            output.removeAll(keepingCapacity: output.capacity <= 1 << 20); outputStart = 0
        } else if outputStart > (1 << 20) && outputStart * 2 > output.count {
            output.removeFirst(outputStart); outputStart = 0
        }
        wantWrite = outputStart < output.count
        if wantWrite { lastWriteProgress = monotonicSeconds() }
        finish()
    }

    private var readPaused: Bool { peerFinished || closeAfterFlush || busy }

    private func updateInterest() {
        guard !closed else { return }
        var want: EventLoop.Interest = []
        if !readPaused { want.insert(.read) }
        if wantWrite { want.insert(.write) }
        if want != registered {
            registered = want
            loop.modify(fd, want)
        }
    }

    private func updateAccounting() {
        guard !closed else { return }
        let now = (input.count - inputStart) + (output.count - outputStart)
        if now != accounted {
            node.stats.bufferedBytes.add(now - accounted, ordering: .relaxed)
            accounted = now
        }
    }

    // MARK: Timers and closing

    func checkTimers(now: Double) {
        guard !closed else { return }
        if awaitingAuth && now - acceptedAt >= node.config.authTimeout {
            node.stats.authTimeouts.add(1, ordering: .relaxed)
            closeWithNotice(.authRequired, "unauthenticated: no authentication within the auth timeout (\(node.config.authTimeout) s)",
                            reason: "auth timeout")
            return
        }
        if let started = commandStarted, now - started > node.config.frameTimeout {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "command timeout")
            return
        }
        if outputStart < output.count && now - lastWriteProgress > max(node.config.frameTimeout, 1) {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "output stalled")
            return
        }
        if let idleLimit = node.config.idleTimeout, idle, now - lastActive > idleLimit {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "idle timeout")
        }
    }

    func closeForShutdown() { closeWithNotice(.shuttingDown, "the node is shutting down", reason: "shutdown") }

    /// `SERVER_ERROR <message>`, sent once without waiting, then close.
    func closeWithNotice(_ status: Status, _ message: String, reason: String) {
        guard !closed else { return }
        MemcachedResponse.line("SERVER_ERROR \(message)", into: &output)
        flushScheduled = true // no deferred flush: this one is the last
        flush()
        close(reason: reason)
    }

    func close(reason: String) {
        guard !closed else { return }
        closed = true
        loop.unregister(fd)
        Sys.close(fd)
        node.stats.bufferedBytes.add(-accounted, ordering: .relaxed)
        accounted = 0
        (input, inputStart, output, outputStart) = ([], 0, [], 0)
        if awaitingAuth {
            awaitingAuth = false
            node.leftAuthQueue(on: loop)
        }
        listener.connectionsCurrent.add(-1)
        node.connectionClosed(self)
        node.log.debug("connection_closed", [("conn", String(id)), ("reason", reason), ("protocol", "memcached")])
    }
}
