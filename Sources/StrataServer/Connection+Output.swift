#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

// A connection's output (queue, flush, interest in the socket), its accounting in the node's
// buffered bytes and output budget, its timers, and closing. Loop thread only.
extension Connection {
    // MARK: Output

    /// Queues a response. Responses produced in one loop iteration leave in one send (a flush
    /// scheduled for the end of the iteration). Unsent bytes past `--output-cap` close the
    /// connection.
    func send(_ frame: Frame) {
        guard !closed else { return }
        if output.isEmpty { lastWriteProgress = monotonicSeconds() }
        output.append(frame)
        node.outputBudget.add(frame.encodedSize)
        if output.count > node.config.outputCap {
            node.stats.outputCapCutoffs.add(1, ordering: .relaxed)
            node.log.warn("output_cap_exceeded", [("conn", String(id)), ("unsent_bytes", String(output.count))])
            close(reason: "output cap")
            return
        }
        if !flushScheduled {
            flushScheduled = true
            loop.atEndOfIteration { [self] in
                flushScheduled = false
                flushAndResume()
            }
        }
    }

    /// Writes what the socket takes (gathered: small frames and shared values in one
    /// `sendmsg`); EPOLLOUT is asked for only while bytes remain.
    func flush() {
        guard !closed else { return }
        if let t = tls, !t.handshakeDone { return } // nothing may be sent before the handshake
        while !output.isEmpty {
            let r: IOResult
            do { r = try sendOutput() } catch {
                close(reason: "send: \(error)")
                return
            }
            guard case .done(let n) = r, n > 0 else { break }
            node.outputBudget.add(-n)
            lastWriteProgress = monotonicSeconds()
            node.stats.bytesOut.add(n, ordering: .relaxed)
        }
        let pending = !output.isEmpty
        wantWrite = pending
        updateInterest()
        if !pending && closeAfterFlush && inFlight == 0 && deferred.isEmpty { close(reason: "done") }
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
    var readPaused: Bool { peerFinished || closeAfterFlush || deferredFull || heldByOutput }

    func updateInterest() {
        guard !closed else { return }
        var want: EventLoop.Interest = []
        if !readPaused { want.insert(.read) }
        if wantWrite || readWantsWrite { want.insert(.write) }
        if want != registered {
            registered = want
            loop.modify(fd, want)
        }
    }

    /// Brings the node's buffered bytes (input + output) up to date with this connection.
    func updateAccounting() {
        guard !closed else { return }
        let now = (input.count - inputStart) + output.count
        if now != accounted {
            node.stats.bufferedBytes.add(now - accounted, ordering: .relaxed)
            accounted = now
        }
    }

    // MARK: Timers and closing

    /// Called by the loop's tick: timeouts, and requests held by the output bound once the
    /// node is back under it.
    func checkTimers(now: Double) {
        guard !closed else { return }
        // A token is set and no HELLO carried it in time: counted from the accept, whatever the
        // connection did meanwhile (PINGs included).
        if awaitingAuth && now - acceptedAt >= node.config.authTimeout {
            node.stats.authTimeouts.add(1, ordering: .relaxed)
            closeWithNotice(.authRequired, "no HELLO with the token within the auth timeout (\(node.config.authTimeout) s)", reason: "auth timeout")
            return
        }
        if let started = frameStarted, now - started > node.config.frameTimeout {
            node.stats.timeouts.add(1, ordering: .relaxed)
            if let t = tls, !t.handshakeDone {
                handshakeFailed("no complete handshake within the frame timeout (\(node.config.frameTimeout) s)")
                return
            }
            close(reason: "frame timeout")
            return
        }
        // Output that makes no progress for a frame timeout (a peer that stopped reading after
        // it finished sending, say) closes the connection; while the node is over its output
        // bound, one second without progress does (its bytes hold everyone's answers back).
        let stallLimit = node.outputBudget.over ? 1 : max(node.config.frameTimeout, 1)
        if !output.isEmpty && now - lastWriteProgress > stallLimit {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "output stalled")
            return
        }
        if let idleLimit = node.config.idleTimeout, idle, now - lastActive > idleLimit {
            node.stats.timeouts.add(1, ordering: .relaxed)
            close(reason: "idle timeout")
            return
        }
        if let first = deferred.first, mayStart(first.request) { resume() }
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
        loop.unregister(fd)
        tls?.shutdown() // close_notify, best effort (only after a handshake)
        Sys.close(fd)
        node.stats.bufferedBytes.add(-accounted, ordering: .relaxed)
        node.outputBudget.add(-output.count)
        accounted = 0
        input = []
        inputStart = 0
        output.removeAll()
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
