import StrataCore
import StrataNet

// The settings a node refuses at start (exit 2) and the ones it only warns about: checks that
// read the configuration alone, kept out of `Node.init`.
extension Node {
    /// Refuses settings that cannot work together (exit 2, naming them).
    static func checkSettings(_ config: NodeConfiguration, address: SocketAddress) throws {
        // Settings that only mean something beside another are refused alone, as the TLS files
        // are without a TLS port (an operator's review found them ignored without a word).
        if config.cluster.isEmpty && config.clusterSource == nil {
            if config.advertise != nil { throw NodeError(exitCode: 2, "--advertise needs --cluster") }
            if config.clusterTLSCA != nil { throw NodeError(exitCode: 2, "--cluster-tls-ca needs --cluster") }
        }
        // Peers reach each other on the plaintext port unless --cluster-tls-ca: with it closed
        // the nodes would start and never sync (an outside review found only a warn log).
        if config.tlsOnly && (!config.cluster.isEmpty || config.clusterSource != nil) && config.clusterTLSCA == nil {
            throw NodeError(exitCode: 2, "--tls-only with --cluster needs --cluster-tls-ca (peers talk over the plaintext port otherwise, which --tls-only closes)")
        }
        if config.memcachedPort == nil && config.memcachedTLSPort == nil {
            if !config.memcachedNamespace.isEmpty { throw NodeError(exitCode: 2, "--memcached-namespace needs --memcached-port or --memcached-tls-port") }
            if config.memcachedMemoryOnly { throw NodeError(exitCode: 2, "--memcached-memory-only needs --memcached-port or --memcached-tls-port") }
        }
        // Two of the node's own listeners on one port (and address) is a usage error, not a busy port.
        var listeners: [(String, String, UInt16)] = [("--tls-port", config.host, config.tlsPort ?? 0),
                                                     ("--memcached-port", config.host, config.memcachedPort ?? 0),
                                                     ("--memcached-tls-port", config.host, config.memcachedTLSPort ?? 0),
                                                     ("--metrics-port", config.metricsHost, config.metricsPort ?? 0)]
        if !config.tlsOnly { listeners.insert(("--port", config.host, config.port), at: 0) }
        for (i, a) in listeners.enumerated() where a.2 != 0 {
            if let b = listeners[(i + 1)...].first(where: { $0.2 == a.2 && $0.1 == a.1 }) {
                throw NodeError(exitCode: 2, "\(a.0) and \(b.0) are both \(a.2): each listener needs its own port")
            }
        }
        if !address.isLoopback && config.authToken == nil && config.credentialsFile == nil && !config.insecure {
            throw NodeError(exitCode: 2, "refusing to listen on \(address) without an auth token: set --auth-token-file or --credentials, or pass --insecure to allow it")
        }
    }

    /// Warns once, at start, about settings that take no effect or cannot work as given
    /// (`cluster_settings_unused`, `cluster_without_token`, `output_cap_raised`).
    func warnAboutSettings() {
        if config.effectiveOutputCap > config.outputCap {
            log.warn("output_cap_raised", [("requested", String(config.outputCap)), ("effective", String(config.effectiveOutputCap)),
                                           ("effect", "one answer of the largest item (--max-item + 128 KiB) always fits under --output-cap")])
        }
        // Cluster settings without a cluster take no effect: said once, so a cluster left out
        // by mistake (an empty `cluster` in the config file) is noticed (an operator's review).
        if config.cluster.isEmpty && config.clusterSource == nil {
            let defaults = NodeConfiguration()
            let unused = [("--replicas", config.replicas != defaults.replicas), ("--sync-interval", config.syncInterval != defaults.syncInterval),
                          ("--cluster-refresh", config.clusterRefresh != defaults.clusterRefresh),
                          ("--max-flush-marks-per-user", config.maxFlushMarksPerUser != defaults.maxFlushMarksPerUser)]
                .filter(\.1).map(\.0)
            if !unused.isEmpty {
                log.warn("cluster_settings_unused", [("settings", unused.joined(separator: ",")),
                                                     ("effect", "no effect without --cluster (a node without a cluster)")])
            }
        }
        // Peers authenticate with the node token; with credentials alone they cannot (an
        // outside review found only AUTH_FAILED contact losses, nothing at start).
        if (!config.cluster.isEmpty || config.clusterSource != nil) && config.credentialsFile != nil && config.authToken == nil {
            log.warn("cluster_without_token", [("effect", "peers authenticate with --auth-token-file's token: without it they cannot sync (AUTH_FAILED); give every node the same --auth-token-file")])
        }
    }
}
