import StrataCore
import StrataStore
import StrataWire

// The GET fast path (issue 21): a plain GET that hits the memory tier is answered on the loop
// straight from the input buffer — header and key read in place, the item looked up under
// the shard's lock, the answer encoded into the output queue with one copy of the value — with
// no `Frame`, `Request`, `CacheItem` or response `Frame` in between. Loop thread only.
//
// "Plain": opcode GET, protocol version 1, no flag but QUIET, no extras (so no touch and no
// lease), tiers 0, 1 or 3 (memory included), a key of 1…1024 bytes, a namespace of ≤ 64,
// nothing else in the body. The answer is byte for byte what the general path sends
// (`Dispatcher.memoryHit` → `Responses.get`) and is counted the same way (op count and
// latency, the shard's and the namespace's hits, stale and negative hits).
//
// Anything the fast path cannot decide cheaply goes to the general path, one frame at a time,
// unchanged: another opcode or flag, an incomplete frame, a miss (the full read counts it and
// may go to the disk tier), a namespace the user may not read (FORBIDDEN is answered there),
// a key with a request of this connection in flight, anything waiting in `deferred` or a
// keyless request in flight (Connection+Order.swift: the order a client sees stays the
// general path's), the output bound or the buffered-bytes limit reached, a connection not
// authenticated or whose credentials changed, a draining node, and a cluster node not yet
// verified (its answers may need the UNVERIFIED flag).
extension Connection {
    /// Answers plain GETs that hit memory from the front of the input, stopping at the first
    /// frame that is anything else.
    func answerFastGets() {
        guard fastGetAhead() else { return }
        let dispatcher = node.dispatcher
        if let cluster = dispatcher.cluster {
            dispatcher.pauseCheck?()
            guard cluster.verified else { return }
        }
        let store = node.store
        let started = monotonicSeconds()
        // One reading of the store's clock for the batch (the loop's current event): an item
        // whose expiry is at or before it is not served.
        let now = loop.oncePerEvent { store.clock.nowMicros() }
        var answered = 0, stale = 0, negative = 0
        while !closed {
            // Answers leave the input buffer's closure every 64 KiB to be counted (`queued`:
            // the output budget, the output cap — which may close the connection).
            let batch = input.withUnsafeBytes { all in
                answerFastGets(all, now: now, store: store, stale: &stale, negative: &negative)
            }
            answered += batch.answered
            if batch.bytes > 0 { queued(batch.bytes) }
            if !batch.more { break }
        }
        guard answered > 0 else { return }
        frameStarted = nil
        let stats = node.stats
        if stale > 0 { stats.staleHits.add(stale) }
        if negative > 0 { stats.negativeHits.add(negative) }
        stats.recordOps(Opcode.get.rawValue, count: answered, micros: (monotonicSeconds() - started) * 1e6 / Double(answered))
    }

    /// Whether the connection is open to the fast path and a GET header is at the front of
    /// the input (cheap: checked before every frame of the general path).
    private func fastGetAhead() -> Bool {
        guard input.count - inputStart >= Wire.headerSize, authenticated, !closed, !closeAfterFlush,
              deferred.isEmpty, barriersInFlight == 0 else { return false }
        let op = input.withUnsafeBytes { $0[inputStart + 2] }
        guard op == Opcode.get.rawValue else { return false }
        let node = self.node
        return userGeneration == node.credentials.generation && !node.draining && !othersOverBufferBound
    }

    /// The plain GET at `at` in `all`, if a whole one is there: where its namespace and key
    /// are and where it ends. Nil for anything else (the general path takes it).
    @inline(__always)
    private func plainGet(_ all: UnsafeRawBufferPointer, at: Int, maxBody: Int) -> (ns: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, end: Int)? {
        guard all.count - at >= Wire.headerSize else { return nil }
        let h = UnsafeRawBufferPointer(rebasing: all[at..<(at + Wire.headerSize)])
        let nsLen = Int(h[7])
        let keyLen = Int(h[8]) << 8 | Int(h[9])
        let body = Int(h[12]) << 24 | Int(h[13]) << 16 | Int(h[14]) << 8 | Int(h[15])
        let tiers = h[6]
        guard h[0] == Wire.requestMagic, h[1] == Wire.version, h[2] == Opcode.get.rawValue,
              h[3] & ~RequestFlags.quiet.rawValue == 0, tiers <= 3, tiers != 2, h[10] == 0, h[11] == 0,
              keyLen >= 1, keyLen <= Wire.maxKey, nsLen <= Wire.maxNamespace, body == nsLen + keyLen, body <= maxBody,
              all.count - at >= Wire.headerSize + body else { return nil }
        let nsStart = at + Wire.headerSize
        return (UnsafeRawBufferPointer(rebasing: all[nsStart..<(nsStart + nsLen)]),
                UnsafeRawBufferPointer(rebasing: all[(nsStart + nsLen)..<(nsStart + body)]), nsStart + body)
    }

    /// The loop over frames in `all` (the input buffer). Stops at the first frame the fast
    /// path does not answer (`more` false) or after 64 KiB of answers (`more` true). The
    /// memory records of up to 16 GETs ahead are prefetched together
    /// (`TieredCache.prefetchMemorySlot`), so their cache misses overlap.
    private func answerFastGets(_ all: UnsafeRawBufferPointer, now: Int64, store: TieredCache,
                                stale: inout Int, negative: inout Int) -> (answered: Int, bytes: Int, more: Bool) {
        let admin = user.role == .admin
        let maxBody = node.config.maxFrame
        let outputCap = node.config.effectiveOutputCap
        let budget = node.outputBudget
        var answered = 0, bytes = 0
        var prefetchedTo = inputStart
        // The prefetched group: each entry with the input offset of its frame, so the hit
        // reuses the hash the prefetch took (`next` is the first entry not yet used).
        var n = 0, next = 0
        return withUnsafeTemporaryAllocation(of: (at: Int, p: MemoryPrefetch).self, capacity: 16) { group in
            while true {
                let at = inputStart
                if at >= prefetchedTo {
                    var pos = at
                    n = 0
                    next = 0
                    while n < 16, let f = plainGet(all, at: pos, maxBody: maxBody) {
                        if let p = store.prefetchMemorySlot(namespace: f.ns, key: f.key, memo: &namespaceMemo) {
                            group.initializeElement(at: n, to: (pos, p))
                            n += 1
                        }
                        pos = f.end
                    }
                    for i in 0..<n { store.prefetchMemoryRecord(group[i].p) }
                    prefetchedTo = pos
                }
                while next < n && group[next].at < at { next += 1 }
                let prefetched = next < n && group[next].at == at ? group[next].p : nil
                guard let f = plainGet(all, at: at, maxBody: maxBody),
                      admin || scopeMemo.rights(user, f.ns).read, !budget.over, output.count < budget.share else { return (answered, bytes, false) }
                if !inFlightKeys.isEmpty && inFlightKeys[ItemKey(namespace: [UInt8](f.ns), key: [UInt8](f.key))] != nil {
                    return (answered, bytes, false)
                }
                let h = UnsafeRawBufferPointer(rebasing: all[at..<(at + Wire.headerSize)])
                var size = 0
                var marks = (stale: false, negative: false)
                let hit = store.withMemoryHit(namespace: f.ns, key: f.key, now: now, memo: &namespaceMemo, prefetched: prefetched) { item in
                    size = appendGetAnswer(request: h, item)
                    marks = (item.stale, item.negative)
                }
                guard hit else { return (answered, bytes, false) }
                if marks.negative { negative += 1 } else if marks.stale { stale += 1 }
                inputStart = f.end
                answered += 1
                bytes += size
                if bytes >= 64 << 10 || output.count > outputCap { return (answered, bytes, true) }
            }
        }
    }

    /// Appends the answer to the GET whose header is `h` (`Responses.get` for a memory hit, no
    /// metadata): returns its size.
    @inline(__always)
    private func appendGetAnswer(request h: UnsafeRawBufferPointer, _ item: MemoryHitView) -> Int {
        let extras = 14 + item.extended.count
        let body = extras + item.value.count
        withUnsafeTemporaryAllocation(byteCount: Wire.headerSize + 14, alignment: 8) { head in
            head[0] = Wire.responseMagic
            head[1] = Wire.version
            head[2] = h[2] // opcode
            head[3] = h[3] // the request's flags, echoed
            head.storeBytes(of: (item.negative ? Status.negative : Status.ok).rawValue.bigEndian, toByteOffset: 4, as: UInt16.self)
            head[6] = Tiers.memory.rawValue
            head[7] = 0 // namespace length
            head.storeBytes(of: UInt32(extras).bigEndian, toByteOffset: 8, as: UInt32.self) // key length 0, extras length
            head.storeBytes(of: UInt32(truncatingIfNeeded: body).bigEndian, toByteOffset: 12, as: UInt32.self)
            (head.baseAddress! + 16).copyMemory(from: h.baseAddress! + 16, byteCount: 4) // request id, as sent
            head.storeBytes(of: item.version.bigEndian, toByteOffset: 20, as: UInt64.self)
            head.storeBytes(of: (item.stale ? ResponseFlags.stale.rawValue : 0).bigEndian, toByteOffset: 28, as: UInt32.self)
            head.storeBytes(of: item.flags.bigEndian, toByteOffset: 32, as: UInt32.self)
            head.storeBytes(of: UInt64(bitPattern: item.expiresAt).bigEndian, toByteOffset: 36, as: UInt64.self)
            head.storeBytes(of: UInt16(item.extended.count).bigEndian, toByteOffset: 44, as: UInt16.self)
            output.append(head: UnsafeRawBufferPointer(head), extended: item.extended, value: item.value)
        }
        return Wire.headerSize + body
    }
}
