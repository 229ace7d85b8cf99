#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import StrataCore
import StrataNet
import StrataStore
import StrataWire
import StrataImage

/// A Strata node: the store behind epoll event loops speaking PROTOCOL.md.
///
/// Threads: one event loop per core (or `threads`), each accepting from the shared listening
/// socket and owning its connections; a worker pool for disk-tier work; the store's own
/// writer and notifier threads. Guarantees: bad input gets an error frame and never crashes
/// the node or touches other connections; `shutdown` answers everything in flight (up to the
/// drain time), flushes write-behind, checkpoints and releases the data directory.
public final class Node: @unchecked Sendable {
    public static let version = "0.1.0"

    public let config: NodeConfiguration
    public let store: TieredCache
    let log: Logger
    let stats = NodeStats()
    let outputBudget: OutputBudget
    /// The start version HELLO reports (PROTOCOL.md §7.1): the store's opened version (on a
    /// fresh directory too), or a version taken when the node noticed it had been paused —
    /// items older than it, and misses, may have missed writes made meanwhile.
    let verifiedSince = Atomic<UInt64>(0)
    /// When a loop last ran its tick (monotonic milliseconds; any loop).
    let lastAlive = Atomic<Int>(Int(monotonicSeconds() * 1000))
    let dispatcher: Dispatcher
    /// The users (`--credentials`, `--auth-token-file`); disabled when neither is set.
    let credentials: CredentialStore
    /// Failed authentications per source address, and the delays they earn (Node+Auth.swift).
    let authThrottle: AuthThrottle
    /// Bounds each user's audit lines (`Node.audit`).
    let auditBudget = AuditBudget()
    /// The node's cluster (`--cluster`), nil without one; its anti-entropy thread once started.
    let cluster: ClusterView?
    var antiEntropy: AntiEntropy?
    var handoff: Handoff?
    /// Re-reads a `dns:`/`file:` `--cluster` list (`--cluster-refresh`); nil otherwise.
    var membershipRefresh: MembershipRefresh?
    /// A re-read list did not name this node (logged once until it does again).
    let membershipIgnored = Atomic<Bool>(false)
    /// This data directory's identity (`DIR/node-id`).
    let nodeID: String
    let workers: WorkerPool
    let imageWorkers: WorkerPool
    let smallImageWorkers: WorkerPool
    private var loops: [EventLoop] = []
    var listenFD: Int32 = -1
    /// The TLS listener (`--tls-port`), or -1; its port; the context new TLS connections use
    /// (replaced by `reloadTLS`). Node+TLS.swift.
    var tlsFD: Int32 = -1
    public internal(set) var tlsPort: UInt16? = nil
    var tlsContext: TLSContextSlot? = nil
    /// The memcached text-protocol listeners: plaintext (`--memcached-port`, not with
    /// `--tls-only`) and TLS (`--memcached-tls-port`, with the TLS listener's context), or -1.
    var memcachedFD: Int32 = -1
    var memcachedTLSFD: Int32 = -1
    /// The memcached listener's settings and counters (nil when it is off).
    private(set) var memcached: MemcachedListener?
    private var scratchBuffers: [UnsafeMutableRawBufferPointer] = []
    /// Each loop's connections, touched only on that loop's thread (one box per loop, so loops
    /// never write to a shared collection).
    final class LoopConnections {
        var map: [Int: any ClientConnection] = [:]
        /// This loop's unauthenticated connections, oldest first (Admission.swift).
        let awaitingAuth = OldestFirst<any ClientConnection> { $0.awaitingAuth }
    }
    var connections: [LoopConnections] = []
    /// `--max-connections` as lowered to fit the descriptor limit (set by `start`).
    var effectiveMaxConnections = 0
    /// Unauthenticated connections allowed at once (set by `start`).
    var maxUnauthenticated = 0
    /// One `accept_failed` line a second at most (the rest are counted in it).
    /// Large disk SETs waiting at workers for room in the log (`Connection.mayStart`): at most
    /// `maxLargeSetsAtWorkers` node-wide, each holding its value; the rest wait on their
    /// connections with reading paused, as small ones do.
    let largeSetsAtWorkers = Atomic<Int>(0)
    static let maxLargeSetsAtWorkers = 4
    let acceptLogLimiter = LogRateLimiter(interval: 1)
    /// One `tls_handshake_failed` line a second at most.
    let tlsLogLimiter = LogRateLimiter(interval: 1)
    let nextConnectionID = Atomic<Int>(1)
    private let drainFlag = Atomic<Bool>(false)
    private let loopsStopped = Counter()
    private let allStopped = Completion<Void>()
    /// The port the node listens on (useful after binding port 0).
    public private(set) var port: UInt16 = 0
    /// The memcached listener's plaintext port (after binding port 0), when it is on.
    public var memcachedPort: UInt16? { memcached?.port }
    /// The memcached listener's TLS port, when it is on.
    public var memcachedTLSPort: UInt16? { memcached?.tlsPort }
    private var metrics: MetricsServer?
    /// The metrics endpoint's port, when it is on.
    public var metricsPort: UInt16? { metrics?.port }

    /// Checks the configuration and opens the store. Throws `NodeError` with a reason.
    public init(config: NodeConfiguration) throws {
        guard let address = SocketAddress(host: config.host, port: config.port) else {
            throw NodeError(exitCode: 2, "--host must be a numeric IPv4/IPv6 address or localhost, got '\(config.host)'")
        }
        try Self.checkSettings(config, address: address)
        self.config = config
        self.log = Logger(level: config.logLevel)
        credentials = CredentialStore(try Self.loadCredentials(config))
        authThrottle = AuthThrottle(threshold: config.authDelayAfter)
        tlsContext = try Self.loadTLS(config)
        cluster = try Node.makeCluster(config)
        outputBudget = OutputBudget(limit: config.maxOutputBytes)
        var sc = StoreConfiguration(directory: config.dataDirectory)
        sc.memoryCostLimit = config.memoryLimit
        sc.diskByteLimit = config.diskLimit
        sc.maxItemBytes = config.maxItem
        sc.defaultTTL = config.defaultTTL
        sc.fsync = config.fsync
        sc.logLimit = config.logLimit
        sc.diskTrimTo = config.diskTrimTo
        sc.diskEviction = config.diskEviction
        // The seed libraries' limits (issue 16): age from the write, counts, idle age.
        sc.maxAge = config.maxAge ?? 0
        sc.memoryCountLimit = config.memoryCountLimit ?? Int.max
        sc.diskCountLimit = config.diskCountLimit ?? Int.max
        sc.memoryAgeLimit = config.idleAge ?? 0
        sc.maxNamespaces = config.maxNamespaces
        if let scope = config.memoryCompression {
            sc.memoryCompression = { scope.contains($0) }
            sc.memoryCompressionExact = scope.exact
        }
        sc.diskAgeLimit = config.idleAge ?? 0
        sc.maxWriteBehindBytes = config.maxWriteBehindBytes
        // Replicas compare entries by version: an expired item stays an entry (a tombstone).
        sc.expiredItemsLeaveTombstones = cluster != nil
        // Large values are read one gate-full at a time, not while unsent output is over its
        // bound, and — unless one would be alone — only while the output and every large read
        // in flight fit under it: reads admitted together each add a whole value (an outside
        // review saw 24 non-reading connections take output to 32 + 40 MiB past a 32 MiB bound).
        let output = outputBudget
        sc.largeReadsMayStart = { held, alone in !output.over && (alone || output.bytes + held <= output.limit) }
        // Counted as output as soon as it is read; the worker hands the charge back once its
        // answer is counted (`PrechargedOutput`).
        sc.largeReadDone = { bytes in if PrechargedOutput.charge(bytes) { output.add(bytes) } }
        // One pooled reader per thread that may read at once (disk workers, image workers, the
        // loops): a reader beyond the pool is opened and closed around each read (file open,
        // schema, mmap and munmap every time) — that cost 80–170 µs of CPU per disk get.
        sc.diskReaders = config.diskWorkers + processorCount * 2
        sc.diskReadsInline = config.diskReadsOnLoop
        let logger = log
        sc.log = { line in logger.storeLine(line) }
        do {
            store = try TieredCache(configuration: sc)
        } catch let e as StoreError {
            // The data directory's problems name the flag (`--data: …`), not the store's code
            // (an outside review, nu5: "data_directory_locked: …").
            let dataDirectory = e.code == .locked || e.code == .directory
            throw NodeError(exitCode: dataDirectory || e.code == .schemaTooNew ? 2 : 3, dataDirectory ? "--data: \(e.message)" : e.description)
        }
        // Also on an empty directory: a wiped disk (or a node new to its keys) holds none of
        // what was written before, so its misses are checked with the replicas (issue 17).
        verifiedSince.store(store.openedVersion, ordering: .relaxed)
        do {
            let (id, replaced) = try Node.loadIdentity(directory: config.dataDirectory)
            nodeID = id
            if let why = replaced {
                log.warn("node_id_replaced", [("path", config.dataDirectory + "/node-id"), ("why", why), ("node_id", id),
                                              ("effect", "a new identity: peers treat this node as one they have not synced with")])
            }
        } catch {
            store.close()
            throw error
        }
        let d = Dispatcher(store: store)
        d.cluster = cluster
        if cluster != nil { d.flushMarks = FlushMarks(store: store, directory: config.dataDirectory, log: log,
                                                       maxMarksPerUser: config.maxFlushMarksPerUser) }
        d.stats = stats
        d.validateImages = config.validateImages
        d.imagePixelLimit = config.imagePixelLimit
        d.namespaceStatsLimit = config.namespaceStatsLimit
        d.imageDecodeLimit = config.imageDecodeLimit
        d.leases = LeaseTable(timeout: config.leaseTimeout, capacity: config.maxLeases)
        dispatcher = d
        workers = WorkerPool(threads: config.diskWorkers, queueLimit: config.maxQueuedDiskJobs)
        // Image decodes are CPU work: one thread per core, a short queue, BUSY past it; images
        // whose headers promise a small decode have a lane of their own, so they never wait
        // behind large ones (each decode's work is bounded by its header: ImageCodec).
        imageWorkers = WorkerPool(threads: processorCount, queueLimit: 64)
        smallImageWorkers = WorkerPool(threads: 1, queueLimit: 64)
        let pool = workers
        d.background = { job in pool.submit(job) }
        warnAboutSettings()
    }

    /// Binds, starts the event loops and returns once the node is accepting.
    public func start() throws {
        Sys.ignoreSIGPIPE()
        // The pause detector counts from here: the store's open (a log replay, a wait for a
        // full disk) is not a pause (an outside review saw `paused gap_ms=13317` at start).
        lastAlive.store(Int(monotonicSeconds() * 1000), ordering: .relaxed)
        var n = config.threads
        if n <= 0 { n = processorCount }
        try fitConnectionsToDescriptors(loops: n)
        var (fd, bound): (Int32, UInt16) = (-1, 0)
        if !config.tlsOnly { (fd, bound) = try bindListener(config.port, "") }
        listenFD = fd
        port = bound
        if let tp = config.tlsPort { (tlsFD, tlsPort) = try bindListener(tp, " for TLS") }
        // --tls-only turns the plaintext memcached port off too (loadTLS refuses it without a
        // TLS memcached port).
        let plainMemcached = config.tlsOnly ? nil : config.memcachedPort
        if plainMemcached != nil || config.memcachedTLSPort != nil {
            var mport: UInt16? = nil, mtlsPort: UInt16? = nil
            if let mp = plainMemcached { (memcachedFD, mport) = try bindListener(mp, " for memcached") }
            if let mp = config.memcachedTLSPort { (memcachedTLSFD, mtlsPort) = try bindListener(mp, " for memcached over TLS") }
            memcached = MemcachedListener(config: config, port: mport, tlsPort: mtlsPort, store: store, dispatcher: dispatcher, threads: n,
                                          maxConnections: effectiveMaxConnections)
        }
        connections = (0..<n).map { _ in LoopConnections() }
        logFlushDue = (0..<n).map { _ in FlushDue() }
        for i in 0..<n {
            let loop = try EventLoop(index: i)
            loops.append(loop)
            scratchBuffers.append(.allocate(byteCount: 64 << 10, alignment: 16))
            if fd >= 0 { try loop.register(fd, .accept, Acceptor(node: self, loop: loop, listener: fd, kind: .strata)) }
            if tlsFD >= 0 { try loop.register(tlsFD, .accept, Acceptor(node: self, loop: loop, listener: tlsFD, kind: .tls)) }
            if memcachedFD >= 0 {
                try loop.register(memcachedFD, .accept, Acceptor(node: self, loop: loop, listener: memcachedFD, kind: .memcached))
            }
            if memcachedTLSFD >= 0 {
                try loop.register(memcachedTLSFD, .accept, Acceptor(node: self, loop: loop, listener: memcachedTLSFD, kind: .memcachedTLS))
            }
        }
        for loop in loops {
            startThread(name: "strata-loop") { [self] in
                loop.run(tickInterval: 0.1) { self.tick(loop) }
                if loopsStopped.load() + 1 == loops.count { } // counted below
                loopsStopped.add(1)
                if loopsStopped.load() == loops.count { allStopped.fulfil(()) }
            }
        }
        // Variants stored before this start are dropped with their originals too.
        if store.openedWithData {
            let d = dispatcher
            startThread(name: "strata-lineage") { d.recoverLineage() }
        }
        if let mp = config.metricsPort {
            metrics = try MetricsServer(node: self, host: config.metricsHost, port: mp, tls: config.metricsTLS)
        }
        startCluster()
        log.info("listening", [("addr", SocketAddress(host: config.host, port: config.tlsOnly ? tlsPort! : bound)!.description),
                               ("tls", tlsPort.map { SocketAddress(host: config.host, port: $0)!.description + (config.tlsCA == nil ? "" : " mutual") } ?? "off"),
                               ("data", config.dataDirectory), ("threads", String(n)),
                               ("auth", authMode), ("version", Node.version)])
    }

    func scratch(for loop: EventLoop) -> UnsafeMutableRawBufferPointer { scratchBuffers[loop.index] }

    /// Whether a log flush is already due at the end of each loop's current iteration (each
    /// entry touched only by its loop's thread).
    private final class FlushDue { var value = false }
    private var logFlushDue: [FlushDue] = []

    /// Writes the log records this loop's requests appended, all in one `write()`, at the end
    /// of the loop's iteration — before any of their answers can leave (Redis's AOF does the
    /// same in `beforeSleep`), and before the connections' end-of-iteration flushes, so the
    /// answers it completes leave in the same send as the rest of their batch. Loop thread only.
    func scheduleLogFlush(on loop: EventLoop) {
        let due = logFlushDue[loop.index]
        guard !due.value else { return }
        due.value = true
        let store = self.store
        loop.beforeEndOfIteration {
            due.value = false
            store.flushLog()
        }
    }

    var draining: Bool { drainFlag.load(ordering: .relaxed) }

    /// Trims the heap after heavy traffic (`MemoryRelease`).
    let memoryRelease = MemoryRelease()

    // MARK: Connections (each loop's own map, touched on that loop only)

    func connectionClosed(_ c: any ClientConnection) {
        connections[c.loop.index].map[c.id] = nil
        stats.connectionsCurrent.add(-1, ordering: .relaxed)
    }

    private func tick(_ loop: EventLoop) {
        let now = monotonicSeconds()
        checkPause(now: now)
        if loop.index == 0 {
            memoryRelease.tick(bytesIn: stats.bytesIn.load(ordering: .relaxed),
                               transient: stats.bufferedBytes.load(ordering: .relaxed) + outputBudget.bytes, now: now)
        }
        for c in connections[loop.index].map.values { c.checkTimers(now: now) }
    }

    /// Notices a pause: no loop ran its tick for `--pause-threshold` seconds (SIGSTOP, a frozen
    /// VM, a starved process). Writes sent meanwhile went elsewhere or timed out, so from now
    /// on HELLO reports a new start version and clients compare this node's older items (and
    /// misses) with the key's replicas. Called by every tick and before HELLO answers (which
    /// may be read before the first tick after a SIGCONT). Any thread.
    func checkPause(now: Double = monotonicSeconds()) {
        let ms = Int(now * 1000)
        let last = lastAlive.exchange(ms, ordering: .relaxed)
        let gap = Double(ms - last) / 1000
        guard gap >= config.pauseThreshold else { return }
        let v = store.nextVersion()
        verifiedSince.store(v, ordering: .relaxed)
        stats.pausesNoticed.add(1, ordering: .relaxed)
        cluster?.unverifyAll()
        log.warn("paused", [("gap_ms", String(ms - last)), ("start_version", String(v))])
    }

    // MARK: Shutdown

    /// Answers in-flight requests (up to `drainTime`; a connection accepted meanwhile gets
    /// SHUTTING_DOWN and is closed), closes connections and the listening sockets, hands on the
    /// cluster's pending hints (up to `drainTime` more), flushes write-behind writes,
    /// checkpoints and closes the store.
    /// A signal that came while the node drains: logged (`shutdown_in_progress`), nothing else.
    public func signalWhileDraining(_ name: String) {
        log.warn("shutdown_in_progress", [("signal", name), ("drain_time", String(config.drainTime)),
                                          ("in_flight", String(workers.outstanding))])
    }

    public func shutdown() {
        guard !drainFlag.exchange(true, ordering: .relaxed) else { return }
        log.info("draining", [("in_flight", String(workers.outstanding))])
        membershipRefresh?.stop()
        antiEntropy?.stop()
        // (Handoff goes on: the writes answered while draining are handed on too, below.)
        // The loops keep accepting while the drain lasts: a connection accepted now is sent
        // SHUTTING_DOWN and closed at once (`accepted`), so a client is never left waiting on
        // a handshake the kernel completed for a socket nobody accepts (an outside review).
        let deadline = monotonicSeconds() + config.drainTime
        while monotonicSeconds() < deadline {
            if workers.outstanding == 0 && allIdle() { break }
            usleep(10_000)
        }
        for (i, loop) in loops.enumerated() {
            loop.execute { [self] in
                for fd in [listenFD, tlsFD, memcachedFD, memcachedTLSFD] where fd >= 0 { loop.unregister(fd) }
                for c in connections[i].map.values { c.closeForShutdown() }
                loop.stop()
            }
        }
        if !loops.isEmpty { allStopped.wait() }
        // No loop accepts any more: from here a connect is refused by the kernel.
        for fd in [listenFD, tlsFD, memcachedFD, memcachedTLSFD] where fd >= 0 { Sys.close(fd) }
        // Hand on the writes this node took that a peer may lack, for up to another drain
        // time: a node leaving the cluster (a removal) never returns to deliver them.
        if let h = handoff {
            let left = h.finish(by: monotonicSeconds() + config.drainTime)
            if left > 0 { log.warn("handoff_undelivered", [("hints", String(left))]) }
            h.stop()
        }
        metrics?.stop()
        workers.stop()
        imageWorkers.stop()
        smallImageWorkers.stop()
        store.close()
        log.info("stopped", [("connections_total", String(stats.connectionsTotal.load(ordering: .relaxed)))])
    }

    private func allIdle() -> Bool {
        let idleCount = Counter()
        let checked = Counter()
        for (i, loop) in loops.enumerated() {
            loop.execute { [self] in
                if connections[i].map.values.allSatisfy({ $0.idle }) { idleCount.add() }
                checked.add()
            }
        }
        let until = monotonicSeconds() + 1
        while checked.load() < loops.count && monotonicSeconds() < until { usleep(1000) }
        return idleCount.load() == loops.count
    }

    // MARK: Stats

    func statsJSON() -> String {
        var fields: [(String, String)] = [("version", "\"\(Node.version)\""), ("node_id", "\"\(nodeID)\"")]
        if let c = cluster { fields.append(("cluster_self", "\"\(c.selfName)\"")) }
        fields += numbers().map { ($0.stats, $0.statsText) }
        if let m = memcached { fields += m.jsonFields() }
        for f in ImageFormat.allCases {
            fields.append(("images_stored_\(f.metricName)", String(stats.imagesStored[Int(f.rawValue)].load())))
        }
        for op in Opcode.allCases {
            let n = stats.ops[Int(op.rawValue)].load()
            fields.append(("ops_\(op.name)", String(n)))
            if n > 0 {
                let h = stats.latency[Int(op.rawValue)]
                fields.append(("latency_us_\(op.name)_p50", fmt(h.percentile(0.5))))
                fields.append(("latency_us_\(op.name)_p99", fmt(h.percentile(0.99))))
                fields.append(("latency_us_\(op.name)_p999", fmt(h.percentile(0.999))))
            }
        }
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    private func fmt(_ x: Double) -> String { String(Double(Int(x * 10)) / 10) }
}

/// A node that cannot start: the message and the exit code the CLI should use.
public struct NodeError: Error, CustomStringConvertible {
    public let exitCode: Int32
    public let message: String
    public init(exitCode: Int32, _ message: String) { self.exitCode = exitCode; self.message = message }
    public var description: String { message }
}
