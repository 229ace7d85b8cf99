#if canImport(Glibc)
import Glibc
#endif
import StrataCore
import StrataNet

/// How a client reaches a node's TLS port (`strata serve --tls-port`): the CA whose
/// certificates it trusts (PEM), its own certificate and key for mutual TLS (PEM, optional),
/// and the name the node's certificate must carry (default: the host connected to — an IP
/// address is checked against the certificate's IP SANs, any other name against its DNS
/// names). TLS 1.2 or later.
public struct TLSClientConfiguration: Sendable, Equatable {
    public var caFile: String
    public var certificateFile: String?
    public var keyFile: String?
    public var serverName: String?
    public init(caFile: String, certificateFile: String? = nil, keyFile: String? = nil, serverName: String? = nil) {
        self.caFile = caFile; self.certificateFile = certificateFile; self.keyFile = keyFile; self.serverName = serverName
    }
}

/// A TLS configuration with its files loaded once (an OpenSSL context shared by every
/// connection made with it). Thread-safe.
final class ClientTLS: Sendable {
    let context: TLSContext
    let serverName: String?

    init(_ c: TLSClientConfiguration) throws {
        do { context = try TLSContext.client(ca: c.caFile, certificate: c.certificateFile, key: c.keyFile) } catch {
            throw ClientError(.connection, "TLS: \(error)")
        }
        serverName = c.serverName
    }
}

/// A connected socket to a node, plaintext or TLS: blocking sends and reads bounded by the
/// timeouts. One reader and one sender may use it at once. Closed by its owner (`close`).
final class ClientSocket: @unchecked Sendable {
    let fd: Int32
    private let tls: TLSStream?
    let description: String

    /// Connects within `timeout` and, with `tls`, handshakes and verifies the node's
    /// certificate (chain and name). Throws `ClientError(.connection)` with the reason.
    init(_ address: SocketAddress, timeout: Double, tls: ClientTLS?) throws {
        description = address.description
        let fd: Int32
        do { fd = try Socket.connect(address, timeout: timeout) } catch {
            throw ClientError(.connection, "cannot connect to \(address): \(error)")
        }
        self.fd = fd
        guard let t = tls else { self.tls = nil; return }
        do {
            self.tls = try TLSStream(fd: fd, context: t.context, expectedName: t.serverName ?? address.host, timeout: timeout)
        } catch {
            Sys.close(fd)
            throw ClientError(.connection, "TLS handshake with \(address) failed: \(error.message)")
        }
    }

    /// Sends every byte; `false` when the send timed out or failed (the stream is then unusable).
    func sendAll(_ bytes: [UInt8]) -> Bool {
        if let t = tls {
            return bytes.withUnsafeBytes { p -> Bool in
                do { try t.write(p.baseAddress!, p.count) } catch { return false }
                return true
            }
        }
        var sent = 0
        while sent < bytes.count {
            guard let r = try? bytes.withUnsafeBytes({ try Sys.send(fd, $0.baseAddress! + sent, bytes.count - sent) }),
                  case .done(let n) = r else { return false }
            sent += n
        }
        return true
    }

    /// Reads what arrives: `.done(0)` at the end of the stream, `.wouldBlock` when the read
    /// timeout passed.
    func read(_ buffer: UnsafeMutableRawPointer, _ count: Int) throws -> IOResult {
        if let t = tls { return try t.read(buffer, count) }
        return try Sys.read(fd, buffer, count)
    }

    /// Seconds a read waits before returning `.wouldBlock`.
    func setReadTimeout(_ seconds: Double) {
        if let t = tls { t.readTimeout = seconds; return }
        var tv = Sys.timeval(seconds: seconds)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Ends the sending side (the node reads end of stream).
    func finishSending() { _ = Glibc.shutdown(fd, Int32(SHUT_WR)) }

    /// Wakes a reader blocked on this socket (it then sees an error or the end of stream).
    func shutdownBoth() { _ = Glibc.shutdown(fd, Int32(SHUT_RDWR)) }

    /// Sends close_notify (TLS) and closes the descriptor.
    func close() {
        tls?.shutdown()
        Sys.close(fd)
    }
}
