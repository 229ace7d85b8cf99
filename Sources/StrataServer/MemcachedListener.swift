#if canImport(Glibc)
import Glibc
#endif
import Dispatch
import StrataCore
import StrataImage
import StrataStore
import StrataWire
import Synchronization

/// The memcached text-protocol listener's settings, counters and command execution
/// (proto-spec/MEMCACHED.md). Thread-safe: `execute` runs on loop threads (memory-only work)
/// and on disk workers; the counters are relaxed atomics.
///
/// Guarantees: every command maps onto one `TieredCache` call in the listener's namespace and
/// tiers (append/prepend: a read, then a CAS write, retried on a race), so an item written here
/// reads the same through the binary protocol. Costs: what the store call costs; answers are
/// appended to a caller's `[UInt8]` buffer.
final class MemcachedListener: Sendable {
    /// The version line: memcached 1.6 so clients and testers pick the modern behaviour.
    static let version = "1.6.21-strata-\(Node.version)"
    /// CAS and append/prepend retry this many times before answering NOT_STORED.
    static let appendAttempts = 16

    /// The plaintext port and the TLS port (`--memcached-tls-port`); at least one is set.
    let port: UInt16?
    let tlsPort: UInt16?
    let namespace: [UInt8]
    let tiers: Tiers
    let store: TieredCache
    let maxValue: Int
    let memoryLimit: Int
    let started = monotonicSeconds()
    let threads: Int
    let maxConnections: Int
    /// The binary protocol's dispatcher: its lease table and variant lineage, which every
    /// write here must keep true (a write revokes the key's lease and drops its variants).
    let dispatcher: Dispatcher

    // Counters (STATS, /metrics).
    let commands: [Counter] = MemcachedCommand.names.map { _ in Counter() }
    let unknownCommands = Counter() // answered ERROR
    let clientErrors = Counter()
    let serverErrors = Counter()
    let getHits = Counter(), getMisses = Counter(), totalItems = Counter()
    let deleteHits = Counter(), deleteMisses = Counter(), touchHits = Counter(), touchMisses = Counter()
    let incrHits = Counter(), incrMisses = Counter(), decrHits = Counter(), decrMisses = Counter()
    let casHits = Counter(), casMisses = Counter(), casBadval = Counter()
    let authCommands = Counter(), authErrors = Counter()
    let connectionsCurrent = Counter(), connectionsTotal = Counter()
    let bytesRead = Counter(), bytesWritten = Counter()
    /// Counts flush_all commands: a delayed one runs only if no later flush_all came meanwhile
    /// (a later one replaces it, as in memcached).
    let flushGeneration = Atomic<UInt64>(0)

    init(config: NodeConfiguration, port: UInt16?, tlsPort: UInt16?, store: TieredCache, dispatcher: Dispatcher, threads: Int, maxConnections: Int) {
        self.port = port
        self.tlsPort = tlsPort
        self.dispatcher = dispatcher
        self.threads = threads
        self.maxConnections = maxConnections
        namespace = config.memcachedNamespace
        tiers = config.memcachedMemoryOnly ? .memory : .all
        self.store = store
        maxValue = config.maxItem
        memoryLimit = config.memoryLimit
    }

    var memoryOnly: Bool { tiers == .memory }

    func count(_ c: MemcachedCommand) {
        commands[c.nameIndex].add()
    }

    /// Appends an error line and counts it by kind.
    /// Counts an error and appends its line — unless its command ended in `noreply`: then
    /// nothing is sent, as memcached sends nothing (a proxy such as twemproxy shares one
    /// connection among its clients and would hand the line to the next one's request).
    func error(_ line: String, noreply: Bool = false, into out: inout [UInt8]) {
        if line.hasPrefix("CLIENT_ERROR") { clientErrors.add() } else if line.hasPrefix("SERVER_ERROR") { serverErrors.add() } else { unknownCommands.add() }
        if !noreply { MemcachedResponse.line(line, into: &out) }
    }

    /// Whether `c` runs while the node is past its buffered-bytes bound: it holds no data
    /// (`version`, `verbosity`, `stats`, `quit`, as the binary listener's PING and STATS).
    static func runsWhenOverloaded(_ c: MemcachedCommand) -> Bool {
        switch c {
        case .version, .verbosity, .quit, .stats: return true
        case .meta(let m): return m.verb == .noop
        default: return false
        }
    }

    /// The version a meta command asks its write to take (`E`), if it names one.
    func callerVersion(_ c: MemcachedCommand) -> UInt64? {
        guard case .meta(let m) = c, m.verb == .set || m.verb == .delete || m.verb == .arithmetic else { return nil }
        return m.number("E").uint64
    }

    /// Whether `c` may run on an event loop thread: it cannot wait on SQLite or the log, nor
    /// validate an image.
    func runsOnLoop(_ c: MemcachedCommand) -> Bool {
        if Self.runsWhenOverloaded(c) { return true } // holds no data
        if case .flushAll = c { return false }
        if dispatcher.validateImages {
            switch c {
            case .store: return false
            case .meta(let m) where m.verb == .set: return false
            default: break
            }
        }
        return memoryOnly
    }

    /// With --validate-images, a value that looks like an image (its magic bytes) is stored
    /// only if it passes validation, as a binary SET's is: the answer line that refuses it
    /// (not sent for noreply), or nil to store it.
    func imageRefusal(_ value: [UInt8]) -> String? {
        guard dispatcher.validateImages, ImageSniffer.sniff(value) != nil else { return nil }
        do {
            try ImageCodec.validate(value, pixelLimit: dispatcher.imagePixelLimit, decodeLimit: dispatcher.imageDecodeLimit)
            return nil
        } catch {
            return "SERVER_ERROR invalid image: \(error.message)"
        }
    }

    /// The store's expiry for a memcached exptime (`MemcachedExpiry`; 0 = the node's default,
    /// which is never unless --default-ttl).
    func expiry(_ exptime: Int64) -> Expiry { Self.expiry(exptime, nowUnixSeconds: store.clock.nowSeconds()) }

    static func expiry(_ exptime: Int64, nowUnixSeconds: Int64) -> Expiry {
        // Seconds from now count from now to the microsecond: resolved against whole seconds,
        // an item expired up to a second early (an outside review, dur13: `touch k 2` kept it 1.03–1.86 s).
        if exptime > 0 && exptime <= MemcachedExpiry.relativeLimit { return .seconds(Double(exptime)) }
        switch MemcachedExpiry.resolve(exptime, nowUnixSeconds: nowUnixSeconds) {
        case .never: return .storeDefault
        case .expired: return .at(unixMicros: 1)
        // An absolute time past what microseconds hold (year 294,000) is kept as the latest
        // one: multiplied, it overflowed and crashed the node (an outside review).
        case .at(let s): return .at(unixMicros: s > Int64.max / 1_000_000 ? Int64.max : s * 1_000_000)
        }
    }

    /// Runs one command and appends its answer (nothing for noreply, errors included).
    /// Returns false for `quit`: the connection closes after its output.
    /// `flushAudit`: for `flush_all`, what the connection audits beyond the line written when it
    /// was asked (`FlushAudit`). Nil: a delayed flush runs, a refusal is only answered.
    func execute(_ c: MemcachedCommand, into out: inout [UInt8], flushAudit: FlushAudit? = nil,
                 mayTakeLeases: Bool = true) -> Bool {
        count(c)
        // A write that changed the key revokes its read-through lease (a fill loaded before it
        // must not land), drops its image variants and is handed on, as binary writes do: a
        // store that stored, a counter that counted, any delete (it is meant to invalidate,
        // and leaves a tombstone to hand on). A refused or no-op write keeps the lease (an
        // outside review, mc11: an `add` answered NOT_STORED let a second client win the
        // refill). A touch never revokes — the value a fill loaded is still the value — and
        // hands itself on where it touched something (`touched`).
        var changed = false
        defer { if changed { keysWritten(by: c).forEach(written) } }
        do {
            return try run(c, into: &out, flushAudit: flushAudit, mayTakeLeases: mayTakeLeases, changed: &changed)
        } catch let e as StoreError {
            error(serverErrorLine(e), noreply: c.noreply, into: &out)
        } catch {
            self.error("SERVER_ERROR \(error)", noreply: c.noreply, into: &out)
        }
        return true
    }

    /// What `submitSet` did.
    enum Submitted { case submitted, notEligible, failed(String) }

    /// A plain `set` to the disk tier without blocking the caller (the event loop): decided now,
    /// its log record joins the loop's batch (the caller schedules the loop's log flush), and
    /// `done` gets the answer line (nil for noreply) once the record is written — on any
    /// thread, possibly before this returns. Other storage commands, and any set while the
    /// durability log is at `--log-limit`, are `.notEligible`.
    func submitSet(_ s: MemcachedStore, _ done: @escaping @Sendable (String?) -> Void) -> Submitted {
        guard s.verb == .set, !memoryOnly, !(dispatcher.validateImages && ImageSniffer.sniff(s.value) != nil) else { return .notEligible }
        var o = SetOptions()
        o.flags = s.flags
        o.expiry = expiry(s.exptime)
        o.tiers = tiers
        // At the log's limit the set goes to the connection's worker (which may wait for room;
        // the connection stops reading meanwhile), never blocking the event loop.
        guard TieredCache.submitsWithoutBlocking(o), store.logHasRoom(for: s.value.count) else { return .notEligible }
        count(.store(s))
        do {
            try store.submitSet(s.key, s.value, namespace: namespace, options: o, quickCompletion: true, flushLater: true) { [self] result in
                switch result {
                case .success(.stored):
                    written(s.key)
                    totalItems.add()
                    done(s.noreply ? nil : "STORED")
                case .success: done(s.noreply ? nil : "NOT_STORED")
                case .failure(let e):
                    serverErrors.add()
                    done(s.noreply ? nil : serverErrorLine(e))
                }
            }
            return .submitted
        } catch let e as StoreError {
            return .failed(serverErrorLine(e))
        } catch {
            return .failed("SERVER_ERROR \(error)")
        }
    }

    /// The keys a command may change (none for reads, except gat and mg with T, which touch).
    func keysWritten(by c: MemcachedCommand) -> [[UInt8]] {
        switch c {
        case .store(let s): return [s.key]
        case .delete(let k, _), .arithmetic(let k, _, _, _), .touch(let k, _, _), .tooLarge(let k, _, _, _): return [k]
        case .gat(_, let keys, _): return keys
        case .meta(let m):
            switch m.verb {
            case .set, .delete, .arithmetic: return [m.key]
            case .get: return m.has("T") ? [m.key] : []
            default: return []
            }
        default: return []
        }
    }

    /// Whether a command changes anything (a readonly user's are refused): every command that
    /// writes keys, flush_all, and mg with N or R (a lease: the promise to fill the key).
    func writes(_ c: MemcachedCommand) -> Bool {
        if case .flushAll = c { return true }
        if case .meta(let m) = c, m.verb == .get, m.number("N") != .absent || m.number("R") != .absent { return true }
        return !keysWritten(by: c).isEmpty
    }

    func written(_ key: [UInt8]) {
        dispatcher.leases.revoke(ItemKey(namespace: namespace, key: key))
        touched(key)
    }

    /// A touch that touched the key (touch, gat, mg T), and the rest of every write: the key's
    /// image variants dropped (as a binary TOUCH does) and the write handed on to the key's
    /// other replicas on a cluster node (the version is looked up when sent). No lease revoked.
    func touched(_ key: [UInt8]) {
        dispatcher.originalChanged(ItemKey(namespace: namespace, key: key))
        dispatcher.replicated(namespace, key, 0, tiers: tiers)
    }

    /// A delete's version: the client's (`md E`), else on a cluster node a new one, so the
    /// delete leaves a tombstone that anti-entropy and handoff spread (PROTOCOL.md §9).
    func deleteVersion(_ explicit: UInt64?) -> UInt64? {
        explicit ?? (dispatcher.cluster != nil && tiers.contains(.disk) ? store.nextVersion() : nil)
    }

    /// `serverError`, counting the refusals for lack of disk space (STATS `disk_full_refusals`).
    func serverErrorLine(_ e: StoreError) -> String {
        if e.code == .diskFull { dispatcher.stats?.diskFullRefusals.add(1, ordering: .relaxed) }
        return Self.serverError(e)
    }

    static func serverError(_ e: StoreError) -> String {
        switch e.code {
        case .valueTooLarge: return "SERVER_ERROR object too large for cache"
        case .diskFull: return "SERVER_ERROR out of memory storing object"
        default: return "SERVER_ERROR \(e.message)"
        }
    }

    private func run(_ c: MemcachedCommand, into out: inout [UInt8], flushAudit: FlushAudit?, mayTakeLeases: Bool,
                     changed: inout Bool) throws -> Bool {
        func reply(_ s: String, _ noreply: Bool) { if !noreply { MemcachedResponse.line(s, into: &out) } }
        switch c {
        case .get(let keys, let cas):
            try retrieve(keys, cas: cas, touch: nil, into: &out)
        case .gat(let exptime, let keys, let cas):
            try retrieve(keys, cas: cas, touch: expiry(exptime), into: &out)
        case .store(let s):
            if s.verb != .set, let refused = unverifiedRefusal(s.key) { error(refused, noreply: s.noreply, into: &out); return true }
            let answer = try storeCommand(s)
            changed = answer == "STORED"
            if answer.hasPrefix("SERVER_ERROR") { error(answer, noreply: s.noreply, into: &out) } else { reply(answer, s.noreply) }
        case .tooLarge(let key, _, _, let noreply):
            try unlinkAfterTooLarge(key)
            changed = true
            error("SERVER_ERROR object too large for cache", noreply: noreply, into: &out)
        case .delete(let key, let noreply):
            changed = true
            let r = try store.remove(key, namespace: namespace, tiers: tiers, version: deleteVersion(nil))
            if r == .removed { deleteHits.add() } else { deleteMisses.add() }
            reply(r == .removed ? "DELETED" : "NOT_FOUND", noreply)
        case .arithmetic(let key, let delta, let increment, let noreply):
            if let refused = unverifiedRefusal(key) { error(refused, noreply: noreply, into: &out); return true }
            let r = increment ? try store.increment(key, by: delta, namespace: namespace, tiers: tiers)
                              : try store.decrement(key, by: delta, namespace: namespace, tiers: tiers)
            switch r {
            case .value(let v, _):
                changed = true
                (increment ? incrHits : decrHits).add()
                reply(String(v), noreply)
            case .notFound:
                (increment ? incrMisses : decrMisses).add()
                reply("NOT_FOUND", noreply)
            case .notANumber:
                clientErrors.add()
                reply("CLIENT_ERROR cannot increment or decrement non-numeric value", noreply)
            case .superseded:
                reply("SERVER_ERROR superseded", noreply) // never: the text protocol names no version
            }
        case .touch(let key, let exptime, let noreply):
            if let refused = unverifiedRefusal(key) { error(refused, noreply: noreply, into: &out); return true }
            let v = try store.touchVersioned(key, namespace: namespace, expiry: expiry(exptime), tiers: tiers)
            if v != nil { touchHits.add(); touched(key) } else { touchMisses.add() }
            reply(v != nil ? "TOUCHED" : "NOT_FOUND", noreply)
        case .flushAll(let asked, let noreply):
            let generation = flushGeneration.add(1, ordering: .relaxed).newValue
            // A delay over 30 days is a Unix time, as an exptime (memcached's realtime()); one
            // already past flushes now (an outside review, mc10: it waited ~57 years).
            let delay = asked > MemcachedExpiry.relativeLimit ? max(0, asked - store.clock.nowSeconds()) : asked
            if delay > 0 {
                DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(Int(min(delay, Int64(Int32.max))))) { [self] in
                    guard flushGeneration.load(ordering: .relaxed) == generation else { return } // replaced
                    // A user removed (or no longer allowed to write here) meanwhile: its flush
                    // does not run (an outside review: a revoked tenant's flush_all 4 still
                    // wiped the namespace).
                    guard flushAudit?.mayRunNow() ?? true else { return }
                    do { try dispatcher.flush(namespace: namespace, all: false, tiers: .all) } catch { flushAudit?.refused("\(error)") }
                }
            } else {
                do { try dispatcher.flush(namespace: namespace, all: false, tiers: .all) } catch {
                    flushAudit?.refused("\(error)") // the line written when it was asked said nothing of this
                    throw error
                }
            }
            reply("OK", noreply)
        case .stats(let args):
            if args.isEmpty {
                for (k, v) in statsFields() { MemcachedResponse.line("STAT \(k) \(v)", into: &out) }
                out.append(contentsOf: MemcachedResponse.end)
            } else if args == ["reset"] {
                MemcachedResponse.line("RESET", into: &out)
            } else {
                // settings, items, slabs, sizes, conns: nothing of memcached's slab allocator to show.
                out.append(contentsOf: MemcachedResponse.end)
            }
        case .version:
            MemcachedResponse.line("VERSION \(Self.version)", into: &out)
        case .verbosity(let noreply):
            reply("OK", noreply)
        case .quit:
            return false
        case .meta(let m):
            try meta(m, into: &out, mayTakeLeases: mayTakeLeases, changed: &changed)
        }
        return true
    }

    /// The most one get/gets/gat/gats answers: the binary protocol's frame limit (`--max-item`
    /// + 64 KiB). A get naming one large value a thousand times would otherwise build an
    /// answer of gigabytes on the loop before any output bound could act.
    var maxGetAnswer: Int { maxValue + (64 << 10) }
}
