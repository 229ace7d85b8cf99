#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet

// The TLS listener (`--tls-port`): its settings checked at start, its socket, a session per
// accepted connection, and reloading the certificate, key and CA (SIGHUP).
extension Node {
    /// Checks the TLS settings and loads the context (nil when TLS is off). Throws a
    /// `NodeError` (exit 2) naming the file and OpenSSL's reason.
    static func loadTLS(_ config: NodeConfiguration) throws -> TLSContextSlot? {
        guard config.tlsPort != nil else {
            if config.tlsOnly { throw NodeError(exitCode: 2, "--tls-only needs --tls-port") }
            if config.tlsCertificate != nil || config.tlsKey != nil || config.tlsCA != nil {
                throw NodeError(exitCode: 2, "--tls-cert, --tls-key and --tls-ca need --tls-port")
            }
            return nil
        }
        guard config.tlsCertificate != nil, config.tlsKey != nil else {
            throw NodeError(exitCode: 2, "--tls-port needs --tls-cert and --tls-key")
        }
        do { return TLSContextSlot(try makeTLSContext(config)) } catch {
            throw NodeError(exitCode: 2, "TLS: \(error)")
        }
    }

    private static func makeTLSContext(_ config: NodeConfiguration) throws(TLSError) -> TLSContext {
        try TLSContext.server(certificate: config.tlsCertificate!, key: config.tlsKey!, clientCA: config.tlsCA)
    }

    /// Binds the TLS listener (when `--tls-port` is set) beside the plaintext one.
    func listenTLS() throws {
        guard let tp = config.tlsPort else { return }
        let address = SocketAddress(host: config.host, port: tp)!
        do {
            let (fd, bound) = try Socket.listen(address)
            tlsFD = fd
            tlsPort = bound
        } catch {
            if listenFD >= 0 { Sys.close(listenFD) }
            store.close()
            throw NodeError(exitCode: 3, "cannot listen for TLS on \(address): \(error)")
        }
    }

    /// A server session for a connection accepted on the TLS port, with the context in force
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
