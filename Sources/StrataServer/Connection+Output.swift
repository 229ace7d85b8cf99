#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

// A connection's output, timers and closing (the state lives in Connection.swift).
extension Connection {
    // MARK: Output

    func send(_ frame: Frame) {
        guard !closed else { return }
        if outputStart == output.count { output.removeAll(keepingCapacity: output.capacity <= 1 << 20); outputStart = 0 }
        frame.encode(into: &output)
        if output.count - outputStart > node.config.outputCap {
            node.stats.outputCapCutoffs.add(1, ordering: .relaxed)
            node.log.warn("output_cap_exceeded", [("conn", String(id)), ("unsent_bytes", String(output.count - outputStart))])
            close(reason: "output cap")
            return
        }
        // Responses produced in one loop iteration leave in one send.
        if !flushScheduled {
            flushScheduled = true
            loop.atEndOfIteration { [self] in
                flushScheduled = false
                flush()
            }
        }
    }

    func flush() {
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
        }
        // Sent bytes are dropped even when the buffer never drains completely.
        if outputStart > (1 << 20) && outputStart * 2 > output.count {
            output.removeFirst(outputStart)
            outputStart = 0
        }
        let pending = outputStart < output.count
        wantWrite = pending
        updateInterest()
        if pending { lastWriteProgress = monotonicSeconds() }
        if !pending && closeAfterFlush && inFlight == 0 && deferred.isEmpty { close(reason: "done") }
        updateAccounting()
    }

    func flushAndMaybeClose() {
        flush()
    }

    /// Reading pauses while requests wait behind others (or the connection is finishing), so
    /// the input buffer cannot grow without bound, and stops for good at end of stream (a
    /// level-triggered EOF would otherwise wake the loop forever).
    var readPaused: Bool { peerFinished || closeAfterFlush || deferred.count >= 4096 }

    func updateInterest() {
        guard !closed else { return }
        var want: EventLoop.Interest = []
        if !readPaused { want.insert(.read) }
        if wantWrite { want.insert(.write) }
        if want != registered {
            registered = want
            loop.modify(fd, want)
        }
    }

    func updateAccounting() {
        guard !closed else { return }
        let now = (input.count - inputStart) + (output.count - outputStart)
        if now != accounted {
            node.stats.bufferedBytes.add(now - accounted, ordering: .relaxed)
            accounted = now
        }
    }

    // MARK: Timers and closing

    /// Called by the loop's tick with the monotonic time.
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
            close(reason: "frame timeout")
            return
        }
        // Output that makes no progress for a frame timeout (a peer that stopped reading after
        // it finished sending, say) closes the connection.
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

    /// SIGTERM: tells the peer why the connection ends, then closes.
    func closeForShutdown() { closeWithNotice(.shuttingDown, "the node is shutting down", reason: "shutdown") }

    /// Tells the peer why the connection ends — one unsolicited frame with `status` (opcode 0,
    /// request id 0; PROTOCOL.md §3), sent once without waiting — then closes.
    func closeWithNotice(_ status: Status, _ message: String, reason: String) {
        guard !closed else { return }
        var f = Frame(magic: Wire.responseMagic, opcode: 0, requestID: 0)
        f.status = status.rawValue
        f.value = Array(message.utf8)
        f.encode(into: &output)
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
        input = []
        inputStart = 0
        output = []
        outputStart = 0
        if awaitingAuth {
            awaitingAuth = false
            node.leftAuthQueue(on: loop)
        }
        node.connectionClosed(self as any ClientConnection)
        node.log.debug("connection_closed", [("conn", String(id)), ("reason", reason)])
    }
}

/// Compares without an early exit, so the time taken does not reveal how much matched.
func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
    var diff = UInt8(a.count == b.count ? 0 : 1)
    let n = max(a.count, b.count)
    for i in 0..<n {
        let x = i < a.count ? a[i] : 0
        let y = i < b.count ? b[i] : 0
        diff |= x ^ y
    }
    return diff == 0
}
