#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet
import StrataWire

// A memcached connection's output, timers and closing (the state lives in
// MemcachedConnection.swift; the loop thread only).
extension MemcachedConnection {
    // MARK: Output

    /// New bytes are in `output`: enforce the cap, flush at the end of this loop iteration.
    func outputAdded() {
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

    var readPaused: Bool { peerFinished || closeAfterFlush || busy }

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

    func checkTimers(now: Double) {
        guard !closed else { return }
        // A failed authentication held back by the brute-force throttle: answered, then closed.
        if let d = delayedAnswer {
            guard now >= d.due else { return }
            delayedAnswer = nil
            busy = false
            listener.error(d.line, into: &output)
            outputAdded()
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
