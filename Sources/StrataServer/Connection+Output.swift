#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

// A connection's output (queued in the shared OutputConnection code: queue, budget, cap,
// interest, accounting), its timers, and closing. Loop thread only.
extension Connection: OutputConnection {
    // MARK: Output

    /// Queues a response. Responses produced in one loop iteration leave in one send (a flush
    /// scheduled for the end of the iteration). Unsent bytes past `--output-cap` close the
    /// connection.
    func send(_ frame: Frame) {
        guard !closed else { return }
        output.append(frame)
        queued(frame.encodedSize)
    }

    /// Writes what the socket takes (OutputConnection); closes once a finishing connection
    /// has nothing left.
    func flush() {
        guard writeOutput() != nil else { return }
        updateInterest()
        if output.isEmpty && closeAfterFlush && inFlight == 0 && deferred.isEmpty { close(reason: "done") }
        updateAccounting()
    }

    /// A flush from the loop (writable, or the end of an iteration); once the output has
    /// drained, requests held by the output bound may start.
    func flushAndResume() {
        flush()
        if !closed && output.isEmpty && (!deferred.isEmpty || inputStart < input.count) { resume() }
    }

    func flushAndMaybeClose() {
        flush()
    }

    /// Reading pauses while requests wait behind others (or the connection is finishing, or
    /// the node's output bound holds it), so the input buffer cannot grow without bound, and
    /// stops for good at end of stream (a level-triggered EOF would otherwise wake the loop
    /// forever).
    var partialRequestSince: Double? { frameStarted }
    var readPaused: Bool { peerFinished || closeAfterFlush || deferredFull || heldByOutput || waitsForBufferRoom }

    // MARK: Timers and closing

    /// Called by the loop's tick: timeouts, and requests held by the output bound once the
    /// node is back under it.
    func checkTimers(now: Double) {
        guard !closed else { return }
        // A failed HELLO held back by the brute-force throttle: answered (then closed) once
        // due; until then no other timer applies (the delay is bounded, AuthThrottle.maxDelay).
        if let d = delayedAnswer {
            guard now >= d.due else { return }
            delayedAnswer = nil
            inFlight -= 1
            send(d.frame)
            flushAndMaybeClose()
            return
        }
        // A token is set and no HELLO carried it in time: counted from the accept, whatever the
        // connection did meanwhile (PINGs included).
        if awaitingAuth && now - acceptedAt >= node.config.authTimeout {
            node.stats.authTimeouts.add(1, ordering: .relaxed)
            closeWithNotice(.authRequired, "no HELLO with the token within the auth timeout (\(node.config.authTimeout) s)", reason: "auth timeout")
            return
        }
        if closedForStalledHandshake(now: now) { return }
        if let started = frameStarted, now - started > node.config.frameTimeout {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "frame timeout")
            return
        }
        if closedForStalledOutput(now: now) || closedForStalledTurn(now: now) { return }
        if let idleLimit = node.config.idleTimeout, idle, now - lastActive > idleLimit {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "idle timeout")
            return
        }
        if let first = deferred.first, mayStart(first.request) { resume() }
        updateInterest() // a read paused for buffer room (`waitsForBufferRoom`) resumes
    }

    /// SIGTERM: tells the peer why the connection ends, then closes.
    func closeForShutdown() { closeWithNotice(.shuttingDown, "the node is shutting down", reason: "shutdown") }

    /// Tells the peer why the connection ends — one unsolicited frame with `status` (opcode 0,
    /// request id 0; PROTOCOL.md §3), sent once without waiting — then closes.
    func closeWithNotice(_ status: Status, _ message: String, reason: String) {
        guard !closed else { return }
        var f = Frame(magic: Wire.responseMagic, opcode: 0, requestID: 0)
        f.status = status.rawValue
        f.value = Array(message.utf8)
        output.append(f)
        node.outputBudget.add(f.encodedSize)
        flush()
        close(reason: reason)
    }

    func close(reason: String) {
        guard !closed else { return }
        closed = true
        gone.store(true, ordering: .relaxed)
        closeSocket()
        releaseBuffers()
        deferred = []
        deferredBytes = 0
        if awaitingAuth {
            awaitingAuth = false
            node.leftAuthQueue(on: loop)
        }
        node.connectionClosed(self as any ClientConnection)
        node.log.debug("connection_closed", [("conn", String(id)), ("reason", reason)])
    }
}
