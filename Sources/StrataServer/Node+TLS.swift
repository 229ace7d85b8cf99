#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet

// The TLS listeners (`--tls-port` for the binary protocol, `--memcached-tls-port` for
// memcached's, `--metrics-tls` for the metrics endpoint): their settings checked at start,
// binding, a session per accepted connection (one context for all), and reloading the
// certificate, key and CA (SIGHUP).
extension Node {
    /// Checks the TLS settings and loads the context (nil when TLS is off). Throws a
    /// `NodeError` (exit 2) naming the file and OpenSSL's reason.
    static func loadTLS(_ config: NodeConfiguration) throws -> TLSContextSlot? {
        if config.tlsOnly && config.tlsPort == nil { throw NodeError(exitCode: 2, "--tls-only needs --tls-port") }
        if config.tlsOnly && config.memcachedPort != nil && config.memcachedTLSPort == nil {
            throw NodeError(exitCode: 2, "--tls-only with --memcached-port needs --memcached-tls-port (the memcached listener would stay plaintext)")
        }
        if config.metricsTLS && config.metricsPort == nil { throw NodeError(exitCode: 2, "--metrics-tls needs --metrics-port") }
        guard config.tlsPort != nil || config.memcachedTLSPort != nil || config.metricsTLS else {
            if config.tlsCertificate != nil || config.tlsKey != nil || config.tlsCA != nil {
                throw NodeError(exitCode: 2, "--tls-cert, --tls-key and --tls-ca need --tls-port, --memcached-tls-port or --metrics-tls")
            }
            return nil
        }
        guard config.tlsCertificate != nil, config.tlsKey != nil else {
            let user = config.tlsPort != nil ? "--tls-port" : config.memcachedTLSPort != nil ? "--memcached-tls-port" : "--metrics-tls"
            throw NodeError(exitCode: 2, "\(user) needs --tls-cert and --tls-key")
        }
        do { return TLSContextSlot(try makeTLSContext(config)) } catch {
            throw NodeError(exitCode: 2, "TLS: \(error)")
        }
    }

    private static func makeTLSContext(_ config: NodeConfiguration) throws(TLSError) -> TLSContext {
        try TLSContext.server(certificate: config.tlsCertificate!, key: config.tlsKey!, clientCA: config.tlsCA)
    }

    /// Binds `port` of `--host` (a listener `what`: "", " for TLS", …). On failure it closes
    /// every listening socket bound so far and the store, and throws (exit 3).
    func bindListener(_ port: UInt16, _ what: String) throws -> (Int32, UInt16) {
        let address = SocketAddress(host: config.host, port: port)!
        do { return try Socket.listen(address) } catch {
            for fd in [listenFD, tlsFD, memcachedFD, memcachedTLSFD] where fd >= 0 { Sys.close(fd) }
            store.close()
            throw NodeError(exitCode: 3, "cannot listen\(what) on \(address): \(error)")
        }
    }

    /// A server session for a connection accepted on a TLS port, with the context in force
    /// now; nil (the socket closed, a handshake failure counted) when OpenSSL cannot make one.
    func tlsSession(_ fd: Int32) -> TLSSession? {
        stats.tlsConnections.add(1, ordering: .relaxed)
        do { return try TLSSession(context: tlsContext!.context, fd: fd, server: true) } catch {
            stats.tlsHandshakeFailures.add(1, ordering: .relaxed)
            log.warn("tls_session_failed", [("reason", error.message)])
            Sys.close(fd)
            return nil
        }
    }

    /// Reloads the certificate, key and CA from their files (SIGHUP). New connections get the
    /// new context; open connections keep theirs. A reload that fails keeps the old context
    /// and logs why. Returns whether it took effect (false too when TLS is off).
    @discardableResult
    public func reloadTLS() -> Bool {
        guard let slot = tlsContext else { return false }
        do {
            slot.replace(try Self.makeTLSContext(config))
            stats.tlsReloads.add(1, ordering: .relaxed)
            log.info("tls_reloaded", [("cert", config.tlsCertificate!), ("key", config.tlsKey!), ("ca", config.tlsCA ?? "none")])
            return true
        } catch {
            stats.tlsReloadFailures.add(1, ordering: .relaxed)
            log.error("tls_reload_failed", [("reason", error.message), ("kept", "the previous certificate and key")])
            return false
        }
    }
}
