#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataCore
import StrataClient
import StrataServer
import StrataStore

let serveUsage = """
usage: strata serve [--host 127.0.0.1] [--port 7400] [--data ./strata-data] [--memory-limit 256MiB]
                    [--disk-limit 4GiB] [--max-item 32MiB] [--default-ttl SECONDS] [--threads N]
                    [--auth-token-file FILE] [--credentials FILE.json] [--auth-delay-after 5]
                    [--insecure] [--config FILE.json]
                    [--log-level info]
                    [--max-connections 10000] [--auth-timeout 5] [--max-unauthenticated N]
                    [--idle-timeout SECONDS] [--frame-timeout 10]
                    [--output-cap 64MiB] [--drain-time 10] [--disk-workers 32] [--disk-reads-on-loop true] [--metrics-port PORT]
                    [--metrics-host 127.0.0.1]
                    [--validate-images] [--image-pixel-limit 25000000] [--lease-timeout 10]
                    [--max-leases 100000] [--max-flush-marks-per-user 10000] [--fsync always|everysec|no] [--log-limit 16MiB]
                    [--disk-trim-to 0.9] [--disk-evict lru|oldest] [--pause-threshold 2]
                    [--max-age SECONDS] [--memory-count-limit N] [--disk-count-limit N]
                    [--idle-age SECONDS] [--namespace-stats-limit 100] [--max-namespaces 1000000]
                    [--memory-compression NS,prefix*,…]
                    [--max-output-bytes 256MiB] [--max-buffered-bytes 1GiB] [--max-write-behind-bytes 64MiB]
                    [--image-decode-limit 128MiB]
                    [--memcached-port PORT] [--memcached-namespace NAME] [--memcached-memory-only]
                    [--tls-port PORT --tls-cert FILE --tls-key FILE [--tls-ca FILE] [--tls-only]]
                    [--memcached-tls-port PORT] [--metrics-tls]
                    [--cluster H:P,H:P,…|dns:NAME:PORT|file:PATH] [--advertise NAME] [--replicas 2]
                    [--sync-interval 2] [--cluster-tls-ca FILE] [--cluster-refresh 30]

Starts a node in the foreground. Settings come from the JSON file given by --config (or
STRATA_CONFIG), then
STRATA_* environment variables (STRATA_PORT, STRATA_DATA, STRATA_MEMORY_LIMIT, …: the flag's
name in upper case with _ for -), then flags; the later wins. Sizes are bytes or take B, KiB,
MiB, GiB, TiB (K/KB, M/MB, G/GB, T/TB are read as KiB, MiB, GiB, TiB; any case);
durations are seconds from 0 to 2147483647; switches given as STRATA_* variables take true/false,
1/0, yes/no or on/off, and so does a switch given a value after = on the command line
(--insecure=false turns off what the environment or the file turned on). --group-commit-window (0…0.1) is accepted for old configurations and has
no effect since the durability log.
Binding an address other than loopback needs --auth-token-file, --credentials or --insecure.
--credentials names users with roles (admin, readwrite, readonly) and namespaces; write it with
the hashes `strata credentials hash` prints (docs/OPERATING.md "Credentials"). SIGHUP reloads it
(a bad file keeps the old users and logs credentials_reload_failed).
--max-flush-marks-per-user bounds the flush marks (a --cluster node's record of a FLUSH, kept 24 h)
one user other than admin may have in force; past it that user's FLUSH of a namespace without
one is BUSY.
--max-connections is lowered, with a warning, to what the descriptor limit (ulimit -n) allows.
--memcached-port also serves memcached's text protocol on that port of --host (off by default;
0 = any free port), on the same store: see proto-spec/MEMCACHED.md.
--tls-port also serves the binary protocol over TLS (1.2 or later) on that port of --host, with
the certificate chain --tls-cert and key --tls-key (PEM); --tls-ca makes clients present a
certificate that chains to that CA (mutual TLS); --tls-only turns the plaintext port off (the
"listening on" line then shows the TLS port). A token is still needed beyond loopback.
--memcached-tls-port serves memcached's text protocol over TLS on that port of --host, with the
same --tls-cert, --tls-key and --tls-ca (it works without --tls-port too); with --tls-only the
plaintext --memcached-port is not opened (and --memcached-port without --memcached-tls-port is
refused). --metrics-tls serves --metrics-port over HTTPS with the same certificate (and, with
--tls-ca, only to scrapers with a client certificate from that CA).
SIGHUP: reload --credentials, and --tls-cert, --tls-key and --tls-ca for new connections on
every TLS port (open TLS connections keep theirs; a reload that fails keeps the old ones and logs
credentials_reload_failed or tls_reload_failed).
--cluster names every node of the cluster, this one included (the same list, and the same
--replicas, as the clients use); the node then repairs its keys with the other replicas in the
background (anti-entropy, every --sync-interval seconds) and flags answers it has not verified
yet (UNVERIFIED). --advertise picks this node's entry when it is not the one on --host and
--port (or --tls-port). Nodes authenticate to each other with --auth-token-file's token;
with --cluster-tls-ca the --cluster ports are TLS ports, and peers are reached over TLS,
verified against that CA (this node presents its --tls-cert and --tls-key). An entry
dns:NAME:PORT stands for every address NAME resolves to, file:PATH for the entries in that file
(commas or lines, # comments); such a list is read again every --cluster-refresh seconds (0 =
never) and a change of members is applied while running, as a restart with the new list would
(audited; every peer unsynced until a round with it finishes). See docs/OPERATING.md, "Clusters".
SIGTERM or SIGINT: stop accepting, finish in-flight requests, flush, exit 0.
"""

/// The settings `serve` knows, by flag name (without dashes); each maps to the config.
let serveSettings: [String] = ["host", "port", "data", "memory-limit", "disk-limit", "max-item", "default-ttl",
                               "threads", "auth-token-file", "log-level", "max-connections", "idle-timeout",
                               "frame-timeout", "output-cap", "drain-time", "disk-workers", "metrics-port", "metrics-host", "image-pixel-limit",
                               "auth-timeout", "max-unauthenticated",
                               "lease-timeout", "max-leases", "group-commit-window", "fsync", "log-limit",
                               "disk-trim-to", "disk-evict", "pause-threshold",
                               "max-age", "memory-count-limit", "disk-count-limit", "idle-age", "namespace-stats-limit",
                               "max-output-bytes", "max-buffered-bytes", "max-write-behind-bytes", "image-decode-limit", "memcached-port",
                               "memcached-namespace", "credentials", "auth-delay-after", "tls-port", "tls-cert", "tls-key", "tls-ca",
                               "memcached-tls-port", "cluster", "advertise", "replicas", "sync-interval", "cluster-tls-ca",
                               "cluster-refresh", "disk-reads-on-loop", "memory-compression", "max-namespaces",
                               "max-flush-marks-per-user"]

func serveCommand(_ args: [String]) throws -> Int32 {
    let opts = try ParsedOptions(args, valued: Set(serveSettings.map { "--" + $0 } + ["--config"]),
                                 switches: ["--insecure", "--help", "--validate-images", "--memcached-memory-only", "--tls-only", "--metrics-tls"], maxPositionals: 0)
    if opts.switches.contains("--help") {
        printOut(serveUsage)
        return 0
    }
    // Layering: file, then environment, then flags.
    var settings: [String: String] = [:]
    // Where each setting that is not a flag came from, for errors: "STRATA_PORT", "config 'port' in 'FILE'".
    var sources: [String: String] = [:]
    var insecure = false
    // The file: --config, else STRATA_CONFIG (an operator read "each flag has a STRATA_* form"
    // and saw the variable ignored).
    if let path = opts.string("--config") ?? ProcessInfo.processInfo.environment["STRATA_CONFIG"] {
        let (fileSettings, fileInsecure, keys) = try loadConfigFile(path)
        settings.merge(fileSettings) { $1 }
        for name in fileSettings.keys { sources[name] = "config '\(keys[name] ?? name)' in '\(path)'" }
        insecure = fileInsecure ?? insecure
    }
    let env = ProcessInfo.processInfo.environment
    for name in serveSettings + ["validate-images", "memcached-memory-only", "tls-only", "metrics-tls"] {
        let envName = "STRATA_" + name.uppercased().replacingOccurrences(of: "-", with: "_")
        if let v = env[envName] { settings[name] = v; sources[name] = envName }
    }
    if let v = env["STRATA_INSECURE"] { insecure = try parseBool(v, name: "STRATA_INSECURE") }
    for name in serveSettings { if let v = opts.string("--" + name) { settings[name] = v; sources[name] = nil } }
    for name in ["validate-images", "memcached-memory-only", "tls-only", "metrics-tls"] {
        if let on = opts.switchValue("--" + name) { settings[name] = on ? "true" : "false"; sources[name] = nil }
    }
    if let on = opts.switchValue("--insecure") { insecure = on }

    var config = NodeConfiguration()
    config.insecure = insecure
    // A setting from the environment or the file is named as the operator wrote it — in value
    // errors and in the node's own checks (`--x needs --y`; an outside review, op7).
    func named(_ message: String) -> String? {
        for (name, source) in sources where message.hasPrefix("--\(name) ") || message.hasPrefix("--\(name):") {
            return "\(source) (--\(name))" + message.dropFirst(name.count + 2)
        }
        return nil
    }
    do { try apply(settings, to: &config) } catch let e as UsageError {
        throw named(e.message).map { UsageError(message: $0) } ?? e
    }

    // Signals are blocked before any thread starts, so every thread inherits the mask and
    // only sigwait below sees them.
    var set = sigset_t()
    sigemptyset(&set)
    sigaddset(&set, SIGTERM)
    sigaddset(&set, SIGINT)
    sigaddset(&set, SIGHUP)
    pthread_sigmask(SIG_BLOCK, &set, nil)

    let node: Node
    do { node = try Node(config: config) } catch let e as NodeError where e.exitCode == 2 {
        throw named(e.message).map { NodeError(exitCode: 2, $0) } ?? e
    }
    try node.start()
    let listenHost = config.host.contains(":") ? "[\(config.host)]" : config.host // an IPv6 address in brackets
    printOut("strata \(Node.version) listening on \(listenHost):\(config.tlsOnly ? node.tlsPort! : node.port), data in \(config.dataDirectory)")
    if let tp = node.tlsPort {
        let h = config.host.contains(":") ? "[\(config.host)]" : config.host
        printOut("tls on \(h):\(tp) (\(config.tlsCA == nil ? "no client certificates" : "client certificates required")\(config.tlsOnly ? ", TLS only" : ""))")
    }
    if let mp = node.metricsPort {
        let h = config.metricsHost.contains(":") ? "[\(config.metricsHost)]" : config.metricsHost
        printOut("metrics on \(config.metricsTLS ? "https" : "http")://\(h):\(mp)/metrics")
    }
    if let mp = node.memcachedPort {
        let h = config.host.contains(":") ? "[\(config.host)]" : config.host
        printOut("memcached on \(h):\(mp) (namespace '\(String(decoding: config.memcachedNamespace, as: UTF8.self))', \(config.memcachedMemoryOnly ? "memory only" : "the node's tiers"))")
    }
    if let mp = node.memcachedTLSPort {
        let h = config.host.contains(":") ? "[\(config.host)]" : config.host
        printOut("memcached tls on \(h):\(mp) (namespace '\(String(decoding: config.memcachedNamespace, as: UTF8.self))', \(config.memcachedMemoryOnly ? "memory only" : "the node's tiers"), \(config.tlsCA == nil ? "no client certificates" : "client certificates required"))")
    }
    var sig: Int32 = 0
    while true {
        sigwait(&set, &sig)
        if sig == SIGHUP { node.reload(); node.reloadTLS(); continue }
        break
    }
    // A signal during the drain is logged, not acted on: the drain finishes and the node
    // exits (SIGKILL stops it at once; what it acknowledged survives that too).
    let waitSet = set
    _ = startThread(name: "signals") {
        var later: Int32 = 0, s = waitSet
        while true {
            sigwait(&s, &later)
            node.signalWhileDraining(later == SIGHUP ? "SIGHUP" : later == SIGINT ? "SIGINT" : "SIGTERM")
        }
    }
    node.shutdown()
    return 0
}

func apply(_ s: [String: String], to c: inout NodeConfiguration) throws {
    func size(_ name: String) throws -> Int? {
        guard let v = s[name] else { return nil }
        guard let n = parseByteSize(v) else { throw UsageError(message: "--\(name) must be a size — bytes, or a number with B, KiB, MiB, GiB or TiB (K/KB, M/MB, G/GB, T/TB read the same; any case) such as 512MiB — got '\(v)'") }
        return n
    }
    func int(_ name: String, min: Int = 0) throws -> Int? {
        guard let v = s[name] else { return nil }
        guard let n = Int(v), n >= min else { throw UsageError(message: "--\(name) must be an integer ≥ \(min), got '\(v)'") }
        return n
    }
    func seconds(_ name: String) throws -> Double? {
        guard let v = s[name] else { return nil }
        return try parseSeconds(v, name: "--\(name)")
    }
    func bool(_ name: String) throws -> Bool? {
        guard let v = s[name] else { return nil }
        return try parseBool(v, name: "--\(name)")
    }
    if let v = s["host"] { c.host = v }
    if let v = try int("port") {
        guard v <= 65535 else { throw UsageError(message: "--port must be 0…65535, got \(v)") }
        c.port = UInt16(v)
    }
    if let v = s["data"] { c.dataDirectory = v }
    if let v = try size("memory-limit") { c.memoryLimit = v }
    if let v = try size("disk-limit") {
        // 0: no byte limit. Under 1 MiB the WAL's and the log's room alone would not fit.
        guard v == 0 || v >= 1 << 20 else { throw UsageError(message: "--disk-limit must be 0 (no limit) or at least 1MiB, got '\(s["disk-limit"]!)'") }
        c.diskLimit = v
    }
    if let v = try size("max-item") {
        // A frame's body length is 32 bits, and frames may be 64 KiB larger than the value.
        guard v > 0 && v <= largestValue else {
            throw UsageError(message: "--max-item must be 1B…4294901759B (4 GiB less 64 KiB and one byte: a frame's length is 32 bits), got '\(s["max-item"]!)'")
        }
        c.maxItem = v
    }
    if let v = try seconds("default-ttl") { c.defaultTTL = v > 0 ? v : nil }
    if let v = try int("threads") { c.threads = v }
    if let v = try int("disk-workers", min: 1) { c.diskWorkers = v }
    if let v = try int("image-pixel-limit", min: 1) { c.imagePixelLimit = v }
    if let v = try bool("validate-images") { c.validateImages = v }
    if let v = try bool("disk-reads-on-loop") { c.diskReadsOnLoop = v }
    if let v = try int("metrics-port") {
        guard v <= 65535 else { throw UsageError(message: "--metrics-port must be 0…65535, got \(v)") }
        c.metricsPort = UInt16(v)
    }
    if let v = try int("max-connections", min: 1) { c.maxConnections = v }
    if let v = try seconds("auth-timeout") {
        guard v > 0 else { throw UsageError(message: "--auth-timeout must be more than 0 seconds") }
        c.authTimeout = v
    }
    if let v = try int("max-unauthenticated") { c.maxUnauthenticated = v > 0 ? v : nil } // 0: half the limit
    if let v = s["metrics-host"] {
        // Checked as the other settings that mean something only beside another.
        guard s["metrics-port"] != nil else { throw UsageError(message: "--metrics-host needs --metrics-port") }
        c.metricsHost = v
    }
    if let v = try int("memcached-port") {
        guard v <= 65535 else { throw UsageError(message: "--memcached-port must be 0…65535, got \(v)") }
        c.memcachedPort = UInt16(v)
    }
    if let v = s["memcached-namespace"] {
        guard v.utf8.count <= 64 else { throw UsageError(message: "--memcached-namespace must be at most 64 bytes") }
        c.memcachedNamespace = Array(v.utf8)
    }
    if let v = try bool("memcached-memory-only") { c.memcachedMemoryOnly = v }
    if let v = s["memory-compression"] {
        // Comma-separated names and `prefix*` patterns; `""` is the default namespace, `*` every
        // one; an empty value, none (so a config file's list can be turned off).
        let patterns = v.trimmingCharacters(in: .whitespaces).isEmpty ? []
            : v.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        let usage = "--memory-compression takes namespace names and prefix* patterns separated by commas (\"\" for the default namespace, * for all; an empty value for none)"
        for p in patterns {
            guard !p.isEmpty else { throw UsageError(message: "\(usage), got '\(v)': an empty entry") }
            let body = p.hasSuffix("*") ? String(p.dropLast()) : p
            guard !body.contains("*") else { throw UsageError(message: "\(usage), got '\(p)': * only ends a pattern") }
            guard p == "\"\"" || !body.contains("\"") else { throw UsageError(message: "\(usage), got '\(p)': quotes only as \"\" (the default namespace)") }
            guard body.utf8.count <= 64 else { throw UsageError(message: "\(usage), got '\(p)': a namespace name is at most 64 bytes") }
        }
        c.memoryCompression = patterns.isEmpty ? nil : NamespaceScope(patterns: patterns.map { $0 == "\"\"" ? "" : $0 })
    }
    if let v = try int("tls-port") {
        guard v <= 65535 else { throw UsageError(message: "--tls-port must be 0…65535, got \(v)") }
        c.tlsPort = UInt16(v)
    }
    if let v = try int("memcached-tls-port") {
        guard v <= 65535 else { throw UsageError(message: "--memcached-tls-port must be 0…65535, got \(v)") }
        c.memcachedTLSPort = UInt16(v)
    }
    if let v = s["tls-cert"] { c.tlsCertificate = v }
    if let v = s["tls-key"] { c.tlsKey = v }
    if let v = s["tls-ca"] { c.tlsCA = v }
    if let v = try bool("tls-only") { c.tlsOnly = v }
    if let v = try bool("metrics-tls") { c.metricsTLS = v }
    if let v = try seconds("idle-timeout") { c.idleTimeout = v > 0 ? v : nil }
    if let v = try seconds("frame-timeout") {
        guard v > 0 else { throw UsageError(message: "--frame-timeout must be more than 0 seconds") }
        c.frameTimeout = v
    }
    if let v = try size("output-cap") {
        guard v >= 64 << 10 else { throw UsageError(message: "--output-cap must be at least 64KiB, got '\(s["output-cap"]!)'") }
        c.outputCap = v
    }
    if let v = try seconds("drain-time") { c.drainTime = v }
    if let v = try seconds("lease-timeout") {
        guard v > 0 else { throw UsageError(message: "--lease-timeout must be more than 0 seconds") }
        c.leaseTimeout = v
    }
    if let v = try int("max-leases", min: 1) { c.maxLeases = v }
    if let v = try int("max-flush-marks-per-user", min: 1) { c.maxFlushMarksPerUser = v }
    if let v = try seconds("group-commit-window") {
        guard v <= 0.1 else { throw UsageError(message: "--group-commit-window must be 0…0.1 seconds, got \(v)") }
        c.groupCommitWindow = v // accepted and ignored since the durability log (see README)
    }
    if let v = s["fsync"] {
        guard let p = FsyncPolicy(rawValue: v) else { throw UsageError(message: "--fsync must be always, everysec or no, got '\(v)'") }
        c.fsync = p
    }
    if let v = try size("log-limit") {
        guard v >= 1 << 20 else { throw UsageError(message: "--log-limit must be at least 1MiB, got '\(s["log-limit"]!)'") }
        c.logLimit = v
    }
    if let v = s["disk-trim-to"] {
        guard let f = Double(v), f >= 0.05, f <= 1 else {
            throw UsageError(message: "--disk-trim-to must be a fraction of --disk-limit from 0.05 to 1, got '\(v)'")
        }
        c.diskTrimTo = f
    }
    if let v = try seconds("pause-threshold") {
        guard v >= 0.2 else { throw UsageError(message: "--pause-threshold must be at least 0.2 seconds, got \(v)") }
        c.pauseThreshold = v
    }
    if let v = s["disk-evict"] {
        guard let e = DiskEviction(rawValue: v) else { throw UsageError(message: "--disk-evict must be lru or oldest, got '\(v)'") }
        c.diskEviction = e
    }
    // The seed libraries' limits: 0 = none, as for --default-ttl.
    if let v = try seconds("max-age") { c.maxAge = v > 0 ? v : nil }
    if let v = try seconds("idle-age") { c.idleAge = v > 0 ? v : nil }
    if let v = try int("memory-count-limit") { c.memoryCountLimit = v > 0 ? v : nil }
    if let v = try int("disk-count-limit") { c.diskCountLimit = v > 0 ? v : nil }
    if let v = try int("max-namespaces", min: 1) { c.maxNamespaces = v }
    if let raw = s["namespace-stats-limit"] {
        guard let v = Int(raw), (1...1000).contains(v) else { throw UsageError(message: "--namespace-stats-limit must be 1…1000, got '\(raw)'") }
        c.namespaceStatsLimit = v
    }
    if let v = try size("max-output-bytes") {
        guard v >= 1 << 20 else { throw UsageError(message: "--max-output-bytes must be at least 1MiB, got '\(s["max-output-bytes"]!)'") }
        c.maxOutputBytes = v
    }
    if let v = try size("max-buffered-bytes") {
        guard v >= 1 << 20 else { throw UsageError(message: "--max-buffered-bytes must be at least 1MiB, got '\(s["max-buffered-bytes"]!)'") }
        c.maxBufferedBytes = v
    }
    if let v = try size("max-write-behind-bytes") { c.maxWriteBehindBytes = v }
    if let v = try size("image-decode-limit") {
        guard v > 0 else { throw UsageError(message: "--image-decode-limit must be at least 1 byte (a size such as 128MiB), got '\(s["image-decode-limit"]!)'") }
        c.imageDecodeLimit = v
    }
    if let v = s["log-level"] {
        guard let l = LogLevel(name: v) else { throw UsageError(message: "--log-level must be debug, info, warn or error, got '\(v)'") }
        c.logLevel = l
    }
    if let path = s["auth-token-file"] { c.authToken = try readToken(path) }
    if let v = try int("auth-delay-after") { c.authDelayAfter = v }
    // "" (the example config's value) = no credentials file.
    if let path = s["credentials"], !path.isEmpty { c.credentialsFile = path }
    // "" (the example config's value) = no cluster.
    if let list = s["cluster"], !list.isEmpty {
        do { c.cluster = try NodeAddress.parseList(list, option: "--cluster") } catch let e as ClientError {
            throw e.kind == .connection ? NodeError(exitCode: 3, e.message) : UsageError(message: e.message)
        }
        guard !c.cluster.isEmpty else { throw UsageError(message: "--cluster needs at least one HOST:PORT") }
        if NodeAddress.listCanChange(list) { c.clusterSource = list }
    }
    if let v = try seconds("cluster-refresh") {
        guard v == 0 || (v >= 0.1 && v <= 86400) else { throw UsageError(message: "--cluster-refresh must be 0 (never) or 0.1…86400 seconds, got \(v)") }
        c.clusterRefresh = v
    }
    if let v = s["advertise"], !v.isEmpty { c.advertise = v }
    if let v = s["cluster-tls-ca"], !v.isEmpty { c.clusterTLSCA = v }
    if let v = try int("replicas", min: 1) { c.replicas = v }
    if let v = try seconds("sync-interval") {
        guard v >= 0.1 && v <= 3600 else { throw UsageError(message: "--sync-interval must be 0.1…3600 seconds, got \(s["sync-interval"] ?? String(v))") }
        c.syncInterval = v
    }
}

/// The token in `path`, trailing newline removed. Empty or unreadable files are usage errors.
func readToken(_ path: String) throws -> [UInt8] {
    guard let data = FileManager.default.contents(atPath: path) else {
        throw UsageError(message: "cannot read the auth token file '\(path)'")
    }
    var bytes = [UInt8](data)
    while let last = bytes.last, last == 10 || last == 13 { bytes.removeLast() }
    guard !bytes.isEmpty else { throw UsageError(message: "the auth token file '\(path)' is empty") }
    // One line: `strata credentials hash` hashes a file's first line, so a second one made a
    // token whose hash no credentials file could hold (an outside review).
    guard !bytes.contains(10) && !bytes.contains(13) else {
        throw UsageError(message: "the auth token file '\(path)' holds more than one line: a token is one line")
    }
    return bytes
}
