import StrataCore
import StrataStore
import StrataClient

/// Everything a node can be told. Defaults follow memcached/Redis where they have one.
public struct NodeConfiguration: Sendable {
    public var host = "127.0.0.1"
    public var port: UInt16 = 7400
    public var dataDirectory = "./strata-data"
    public var memoryLimit = 256 << 20
    public var diskLimit = 4 << 30
    public var maxItem = 32 << 20
    /// Seconds; nil = items never expire unless a write says so.
    public var defaultTTL: Double? = nil
    /// `--max-age`: items whose write (their version) is older are never served and are swept
    /// (`StoreConfiguration.maxAge`; SDWebImage's maxCacheAge); nil = no limit.
    public var maxAge: Double? = nil
    /// `--memory-count-limit`, `--disk-count-limit`: most items per tier (YYCache's
    /// countLimit); least recently used go first. nil = no limit.
    public var memoryCountLimit: Int? = nil
    public var diskCountLimit: Int? = nil
    /// `--idle-age`: items not read or written for this many seconds are trimmed from both
    /// tiers in the background (YYCache's ageLimit, by last access); nil = no limit.
    public var idleAge: Double? = nil
    /// `--namespace-stats-limit`: namespaces listed by STATS `namespaces` and /metrics.
    public var namespaceStatsLimit = 100
    /// `--max-namespaces`: namespaces the node tracks at most (a write to a new one past it is
    /// refused).
    public var maxNamespaces = 1_000_000
    /// Event loops; 0 = one per core.
    public var threads = 0
    /// Threads that run disk-tier work (each waits on SQLite or a group commit).
    public var diskWorkers = 32
    /// `--disk-reads-on-loop`: a plain GET that misses memory reads the disk tier on its event
    /// loop while the database and WAL are wholly in the page cache (values ≤ 64 KiB stored).
    public var diskReadsOnLoop = true
    /// Disk jobs queued beyond the workers before new ones get BUSY.
    public var maxQueuedDiskJobs = 10_000
    /// `--auth-token-file`'s token: authenticates as the admin user `token` (also beside a
    /// credentials file).
    public var authToken: [UInt8]? = nil
    /// `--credentials FILE`: named users with roles and namespaces (`Credentials`), reloaded
    /// on SIGHUP (`Node.reload`).
    public var credentialsFile: String? = nil
    /// `--auth-delay-after`: failed authentications from one address within a minute that are
    /// answered at once; later ones wait 0.25 s doubling to 4 s (`AuthThrottle`). 0 = never delay.
    public var authDelayAfter = 5
    /// Allow a non-loopback address without a token.
    public var insecure = false
    /// Connections at once. Lowered at start, with a warning, to what the descriptor limit
    /// (RLIMIT_NOFILE) leaves after the node's own descriptors (`Node.effectiveMaxConnections`).
    public var maxConnections = 10_000
    /// Seconds a connection may stay unauthenticated when a token is set (then AUTH_REQUIRED,
    /// unsolicited, and close). Must be more than 0.
    public var authTimeout: Double = 5
    /// Seconds without any event loop running (SIGSTOP, a frozen VM, starvation) after which
    /// the node takes itself to have been paused: HELLO then reports a new start version, so
    /// clients verify its older items with their replicas (`--pause-threshold`).
    public var pauseThreshold: Double = 2
    /// Unauthenticated connections at once when a token is set; nil = half the effective
    /// connection limit, at least 1. Past it, each new connection closes the oldest
    /// unauthenticated one of its event loop.
    public var maxUnauthenticated: Int? = nil
    /// Seconds a connection may stay idle; nil = no timeout (memcached, Redis).
    public var idleTimeout: Double? = nil
    /// Seconds a frame that has started may take to arrive in full (stops slowloris).
    public var frameTimeout: Double = 10
    /// Unsent response bytes a connection may hold before it is cut off.
    public var outputCap = 64 << 20
    /// Bytes buffered (in + out) across all connections before new requests get BUSY.
    public var maxBufferedBytes = 1 << 30
    /// Unsent response bytes across all connections (`--max-output-bytes`): past it, a
    /// connection that has unsent output or requests in flight takes no new request (its
    /// bytes wait in the socket) until the sum falls below it. See `OutputBudget`.
    public var maxOutputBytes = 256 << 20
    /// Bytes of write-behind writes answered and not yet in the durability log
    /// (`--max-write-behind-bytes`); past it, write-behind writes wait like durable ones.
    public var maxWriteBehindBytes = 64 << 20
    /// Frame body limit before authentication when a token is set.
    public var preAuthFrameLimit = 16 << 10
    /// Seconds SIGTERM waits for in-flight requests.
    public var drainTime: Double = 10
    public var logLevel: LogLevel = .info
    /// Validate every value that looks like an image (PNG/WebP fully decoded) before storing it.
    public var validateImages = false
    /// Largest image (in pixels) the node will decode or accept when validating.
    public var imagePixelLimit = 25_000_000
    /// Most bytes a PNG's pixel data may inflate to when the node decodes it
    /// (`--image-decode-limit`); a PNG whose data inflates past what its header needs is refused.
    public var imageDecodeLimit = 128 << 20
    /// Serve /metrics and /healthz over HTTP on this port of `metricsHost` (nil = off; 0 = any
    /// free port).
    public var metricsPort: UInt16? = nil
    /// The address the metrics endpoint binds (it has no authentication; not `host`).
    public var metricsHost = "127.0.0.1"
    /// `--metrics-tls`: serve the metrics endpoint over HTTPS with the node's TLS certificate,
    /// key and CA (`tlsCertificate`, `tlsKey`, `tlsCA`; needs `metricsPort`).
    public var metricsTLS = false
    /// Serve memcached's text protocol on this port of `host` (nil = off; 0 = any free port).
    /// Same loops, store, connection limits, timeouts and output cap as the binary listener.
    public var memcachedPort: UInt16? = nil
    /// The namespace memcached keys live in (default: the default namespace, empty).
    public var memcachedNamespace: [UInt8] = []
    /// `--memory-compression`: the namespaces whose memory-tier values are held compressed with
    /// a zstd dictionary trained from the namespace's first values (nil: none).
    public var memoryCompression: NamespaceScope? = nil
    /// The memcached listener reads and writes the memory tier only (default: memory and disk).
    public var memcachedMemoryOnly = false

    /// Serve the binary protocol over TLS on this port of `host` too (nil = off; 0 = any free
    /// port), with `tlsCertificate` (PEM chain) and `tlsKey` (PEM). Same loops, limits,
    /// timeouts and token as the plaintext listener.
    public var tlsPort: UInt16? = nil
    public var tlsCertificate: String? = nil
    public var tlsKey: String? = nil
    /// `--tls-ca`: clients of the TLS port must present a certificate that chains to this CA
    /// (PEM; mutual TLS). nil = no client certificates asked for.
    public var tlsCA: String? = nil
    /// Serve memcached's text and meta protocols over TLS on this port of `host` (nil = off;
    /// 0 = any free port), with the TLS listener's certificate, key and CA (`tlsCertificate`,
    /// `tlsKey`, `tlsCA`), beside or instead of `memcachedPort`; the same namespace and tiers.
    public var memcachedTLSPort: UInt16? = nil
    /// `--tls-only`: no plaintext listener (needs `tlsPort`), and no plaintext memcached
    /// listener either (with `memcachedPort`, needs `memcachedTLSPort`).
    public var tlsOnly = false

    /// Seconds a read-through lease lasts before another client may take it.
    public var leaseTimeout: Double = 10
    /// Leases held at once (beyond it, GET with LEASE gets no lease and loads without one).
    public var maxLeases = 100_000
    /// Flush marks in force (cluster nodes, PROTOCOL.md §7.12) one user other than admin may
    /// have made (`--max-flush-marks-per-user`); past it that user's FLUSH of a namespace
    /// without a mark is BUSY. The node holds at most 100,000 in all.
    public var maxFlushMarksPerUser = 10_000

    /// Accepted for old configurations and ignored: durable writes are acknowledged at the
    /// durability log since schema 3, and the applier commits to SQLite in large batches of
    /// its own. (It was the longest a durable write waited for others to share a SQLite commit.)
    public var groupCommitWindow: Double = 0

    /// When the durability log is forced to the device (`--fsync`): `always` before each
    /// acknowledgement (one fdatasync per batch), `everysec` (default) once a second, `no`
    /// left to the kernel. Every policy survives a process crash with nothing acknowledged lost.
    public var fsync: FsyncPolicy = .everysec
    /// Most bytes of log records not yet applied to SQLite (`--log-limit`); past it, writes
    /// wait for the applier.
    public var logLimit: Int = 16 << 20
    /// When `diskLimit` is reached, items are evicted down to this fraction of it
    /// (`--disk-trim-to`; see `DiskBudget`).
    public var diskTrimTo = 0.9
    /// Which items go first at a disk limit (`--disk-evict lru|oldest`).
    public var diskEviction: DiskEviction = .lru

    /// The cluster's members (`--cluster`, resolved), this node among them; empty = no cluster.
    public var cluster: [NodeAddress] = []
    /// `--cluster` as given, when it has `dns:` or `file:` entries (their members can change
    /// while the node runs): re-read every `clusterRefresh` seconds. Nil for a fixed list.
    public var clusterSource: String? = nil
    /// Seconds between re-reads of `clusterSource` (`--cluster-refresh`); 0 = never.
    public var clusterRefresh: Double = 30
    /// This node's ring name in `cluster` (`--advertise`); nil = the member on this host and port.
    public var advertise: String? = nil
    /// Copies of each key in the cluster (`--replicas`, as the clients use).
    public var replicas = 2
    /// Seconds between anti-entropy rounds with each peer (`--sync-interval`).
    public var syncInterval: Double = 2
    /// `--cluster-tls-ca`: the `cluster` ports are TLS ports; peers are reached over TLS and
    /// must present a certificate chaining to this CA (this node presents `tlsCertificate`).
    public var clusterTLSCA: String? = nil
    public init() {}

    /// The largest frame body: max item + 64 KiB for key, namespace and extras.
    public var maxFrame: Int { maxItem + (64 << 10) }

    /// The `--output-cap` in force: never less than one answer of the largest item (the
    /// largest frame + 64 KiB, which holds a memcached `VALUE` line and `END` too), so a value
    /// the node stores can always be read (an outside review, nu5: `--max-item 100MiB` stored
    /// 70 MB values that every GET then cut off under the 64 MiB default).
    public var effectiveOutputCap: Int { max(outputCap, maxFrame + (64 << 10)) }
}

public enum LogLevel: Int, Sendable, Comparable {
    case debug = 0, info, warn, error
    public init?(name: String) {
        switch name {
        case "debug": self = .debug
        case "info": self = .info
        case "warn", "warning": self = .warn
        case "error": self = .error
        default: return nil
        }
    }
    public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
    var name: String { ["debug", "info", "warn", "error"][rawValue] }
}
