#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

// A memcached connection's output (the shared OutputConnection code: queue, output budget,
// cap, interest, accounting), the output bound's hold on its commands, its timers and closing
// (the state lives in MemcachedConnection.swift; the loop thread only).
extension MemcachedConnection: OutputConnection {
    // MARK: Output

    /// Runs `body` to append answers to the output in place, and queues what it appended
    /// (counted in the node's output budget, `--output-cap`, a flush at the end of this loop
    /// iteration). Returns what `body` returns.
    @discardableResult
    func emit<R>(_ body: (inout [UInt8]) -> R) -> R {
        guard !closed else {
            var sink: [UInt8] = []
            return body(&sink)
        }
        let before = output.count
        let r = output.appendOwned(body)
        if output.count > before { queued(output.count - before) }
        return r
    }

    func flush() {
        guard let sent = writeOutput() else { return }
        if sent > 0 { listener.bytesWritten.add(sent) }
        finish()
    }

    /// A flush from the loop (writable, or the end of an iteration); once the output has
    /// drained, commands held by the output bound, and commands already read, may run.
    func flushAndResume() {
        flush()
        if !closed && output.isEmpty && !busy && (!held.isEmpty || inputStart < input.count) {
            process()
            finish()
        }
    }

    /// Reading pauses while commands are held by the output bound, once `busyReadAhead` bytes
    /// wait behind a batch on a worker (so the input cannot grow without bound; below that the
    /// socket stays registered, which spares two `epoll_ctl` calls per durable set), while the
    /// connection is finishing, and for good at end of stream.
    var partialRequestSince: Double? { commandStarted }
    var readPaused: Bool { peerFinished || closeAfterFlush || !held.isEmpty || busyInputFull || waitsForBufferRoom }

    /// A batch is on a worker (or a set awaits its log write) and `busyReadAhead` bytes of
    /// input already wait behind it.
    var busyInputFull: Bool { busy && input.count - inputStart >= Self.busyReadAhead }
    static let busyReadAhead = 64 << 10

    // MARK: The output bound

    /// Commands whose answer may carry values (get/gets/gat/gats, mg): the ones the output
    /// bound holds even on a connection with nothing unsent.
    static func answersWithValues(_ p: MemcachedParse) -> Bool {
        guard case .command(let c, _) = p else { return false }
        switch c {
        case .get, .gat: return true
        case .meta(let m): return m.verb == .get
        default: return false
        }
    }

    /// The binary listener's rule (`Connection.mayStart`): any command while the node is under
    /// `--max-output-bytes` — but none with values past the connection's share of it
    /// (`OutputBudget.share`); past the bound, only a command without values on a connection
    /// with nothing unsent.
    func mayStart(_ p: MemcachedParse) -> Bool {
        if output.count >= node.outputBudget.share && Self.answersWithValues(p) { return false }
        // `stats` waits while 256 KiB of answers are unread, as the binary STATS does
        // (`Connection.statsHoldBytes`): a never-reading client cannot keep the node building them.
        if output.count >= Connection.statsHoldBytes, case .command(.stats, _) = p { return false }
        return !node.outputBudget.over || (output.isEmpty && !Self.answersWithValues(p))
    }

    /// `rest` waits (reading paused) until `mayStart` lets its first command run: after a
    /// flush that drained the output, or at the loop's tick.
    func hold(_ rest: [MemcachedParse]) {
        if node.outputBudget.over { node.outputBudget.heldRequests.add(1, ordering: .relaxed) }
        held = rest
    }

    // MARK: Timers and closing

    func checkTimers(now: Double) {
        guard !closed else { return }
        if closedForStalledHandshake(now: now) { return }
        // A failed authentication held back by the brute-force throttle: answered, then closed.
        if let d = delayedAnswer {
            guard now >= d.due else { return }
            delayedAnswer = nil
            busy = false
            emit { listener.error(d.line, into: &$0) }
            flush()
            finish()
            return
        }
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
        if closedForStalledOutput(now: now) || closedForStalledTurn(now: now) { return }
        if let idleLimit = node.config.idleTimeout, idle, now - lastActive > idleLimit {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "idle timeout")
            return
        }
        if let first = held.first, !busy, mayStart(first) {
            process()
            finish()
        }
        updateInterest() // a read paused for buffer room (`waitsForBufferRoom`) resumes
    }

    func closeForShutdown() { closeWithNotice(.shuttingDown, "the node is shutting down", reason: "shutdown") }

    /// `SERVER_ERROR <message>`, sent once without waiting, then close.
    func closeWithNotice(_ status: Status, _ message: String, reason: String) {
        guard !closed else { return }
        emit { MemcachedResponse.line("SERVER_ERROR \(message)", into: &$0) }
        flush()
        close(reason: reason)
    }

    func close(reason: String) {
        guard !closed else { return }
        closed = true
        closeSocket()
        releaseBuffers()
        held = []
        if awaitingAuth {
            awaitingAuth = false
            node.leftAuthQueue(on: loop)
        }
        listener.connectionsCurrent.add(-1)
        node.connectionClosed(self)
        node.log.debug("connection_closed", [("conn", String(id)), ("reason", reason), ("protocol", "memcached")])
    }
}
