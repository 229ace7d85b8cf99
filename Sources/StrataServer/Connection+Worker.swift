import StrataCore
import StrataStore
import StrataWire
import Synchronization

// A request that may touch SQLite (Connection.run's second half): an unconditional durable SET
// decided on the loop and logged with the iteration's batch; anything else run by a worker
// pool, its answer handed back to the loop. Loop thread only (the job itself on a worker).
extension Connection {
    func runOnWorker(_ p: Pending, _ request: Request, _ f: Frame, started: Double) {
        // Disk work: a worker runs it, the loop writes the answer.
        inFlight += 1
        let scope = p.scope ?? Self.scope(of: request)
        switch scope {
        case .barrier: barriersInFlight += 1
        case .keys(let keys): for k in keys { inFlightKeys[k, default: 0] += 1 }
        }
        let dispatcher = node.dispatcher
        let stats = node.stats
        let loop = self.loop
        // An unconditional durable set needs no worker thread: it is decided here and its log
        // record joins this iteration's batch, which the loop writes with one `write()` at the
        // end of the iteration (`Node.scheduleLogFlush`); the outcome comes back on this loop
        // then (or on whichever thread wrote the batch, which hands it back with `execute`).
        let imageCheck: Bool = {
            switch request {
            case .set(let s): return node.dispatcher.needsImageValidation(s)
            case .imageInfo, .imageVariant: return true // decoding is CPU work: the image pool
            default: return false
            }
        }()
        // STATS `namespaces` lists only what the user may read; its flush marks count as its own.
        let caller = user
        // A large value the log has no room for yet (`TieredCache.logHasRoom(for:)`) goes to a
        // worker instead, which waits for the applier (woken as soon as it applies: holding it
        // on the loop until the next tick cost each 500 KB SET under a 16 MiB disk limit 200 ms).
        // (A SET with VERIFIED_ONLY is checked by `Dispatcher.execute` on a worker: a cluster
        // client's conditional write, rare.)
        if case .set(let s) = request, !imageCheck, s.mode != .lease, !s.verifiedOnly, TieredCache.submitsWithoutBlocking(Dispatcher.setOptions(s)),
           !node.store.isLargeLogRecord(s.value.count) || node.store.logHasRoom(for: s.value.count) {
            do {
                try node.store.submitSet(s.key, s.value, namespace: s.namespace, options: Dispatcher.setOptions(s),
                                         quickCompletion: true, flushLater: true) { [self] result in
                    let resp: Frame?
                    switch result {
                    case .success(let out):
                        node.dispatcher.setDone(s, out)
                        resp = Dispatcher.setResponse(out, f)
                    case .failure(let e): resp = Responses.error(to: f, node.dispatcher.refusalStatus(for: e), e.message)
                    }
                    stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
                    if loop.isCurrentThread { completed(resp, scope) } else { loop.execute { [self] in completed(resp, scope) } }
                }
                node.scheduleLogFlush(on: loop)
            } catch let e as StoreError {
                release(scope)
                send(Responses.error(to: f, node.dispatcher.refusalStatus(for: e), e.message))
                stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            } catch {
                release(scope)
                send(Responses.error(to: f, .serverError, "\(error)"))
                stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            }
            return
        }
        // A plain GET whose disk read cannot wait for the device (the files are in the page
        // cache) runs here, on the loop: no hand-off to a worker and back (ARCHITECTURE.md
        // "Disk reads on the loop"). A read that bails (a value over 64 KiB, …) counted nothing
        // and goes to a worker below.
        // (`--disk-reads-on-loop false` turns `diskReadsMayRunInline` off.)
        if case .get(let g) = request, !g.lease, g.touch == nil, !node.outputBudget.over, node.store.diskReadsMayRunInline {
            InlineDiskRead.begin()
            let resp = dispatcher.execute(request, f, caller: caller)
            if !InlineDiskRead.end() {
                node.stats.loopDiskReads.add(1, ordering: .relaxed)
                stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
                // No `resume()`: the loop that parses this connection's frames goes on (a
                // pipeline of disk GETs must not recurse).
                release(scope)
                if let r = resp { send(r) }
                return
            }
        }
        let pool = !imageCheck ? node.workers : Dispatcher.isSmallImageJob(request) ? node.smallImageWorkers : node.imageWorkers
        // A request whose answer may carry values goes back to its connection if the node is
        // over its output bound by the time a worker takes it (OutputBudget): so answers
        // being made when the bound is crossed are at most one per busy worker.
        let mayHold = Self.answersWithValues(request)
        let budget = node.outputBudget
        // A large SET the log has no room for yet waits at the worker: counted node-wide.
        var waitsForLog = false
        if case .set(let s) = request, s.tiers != 1, node.store.isLargeLogRecord(s.value.count), !node.store.logHasRoom(for: s.value.count) {
            waitsForLog = true
            node.largeSetsAtWorkers.add(1, ordering: .relaxed)
        }
        let owner = node
        let auditRefusal = flushRefusalAudit(request)
        let accepted = pool.submit { [self] in
            defer { if waitsForLog { owner.largeSetsAtWorkers.add(-1, ordering: .relaxed) } }
            if gone.load(ordering: .relaxed) {
                loop.execute { [self] in completed(nil, scope) }
                return
            }
            if mayHold && budget.over {
                loop.execute { [self] in heldByWorker(Pending(frame: f, request: request, scope: scope, received: started)) }
                return
            }
            PrechargedOutput.begin()
            let resp = dispatcher.execute(request, f, caller: caller)
            auditRefusal?(resp)
            // Counted from now: an answer on its way to the loop is output too (it replaces
            // what its large reads charged).
            let size = resp?.encodedSize ?? 0
            budget.add(size - PrechargedOutput.end())
            stats.recordOp(f.opcode, micros: (monotonicSeconds() - started) * 1e6)
            loop.execute { [self] in completed(resp, scope, inTransit: size) }
        }
        if !accepted {
            if waitsForLog { owner.largeSetsAtWorkers.add(-1, ordering: .relaxed) }
            release(scope)
            node.stats.busyRefusals.add(1, ordering: .relaxed)
            send(Responses.error(to: f, .busy, imageCheck ? "the image pool is full; retry later" : "too much disk work queued; retry later"))
        }
    }

    func completed(_ resp: Frame?, _ scope: Scope, inTransit: Int = 0) {
        release(scope)
        // The answer moves from "on its way" to this connection's output (counted by `send`).
        node.outputBudget.add(-inTransit)
        guard !closed else { return }
        if let r = resp { send(r) }
        updateAccounting()
        resume()
    }

    /// A worker gave the request back (the node was over its output bound): it waits first
    /// in line, as if it had not started.
    func heldByWorker(_ p: Pending) {
        release(p.scope!)
        guard !closed else { return }
        node.outputBudget.heldRequests.add(1, ordering: .relaxed)
        hold(p, first: true)
        resume()
    }
}
