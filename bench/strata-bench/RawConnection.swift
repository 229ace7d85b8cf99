import Glibc
import StrataClient
import StrataCore
import StrataNet
import StrataWire

/// A blocking socket that sends whole buffers and reads replies with a codec.
final class RawConnection {
    let fd: Int32
    private let tls: TLSStream?
    private var buffer: [UInt8] = []
    private var start = 0
    private var chunk = [UInt8](repeating: 0, count: 256 << 10)

    init(host: String, port: UInt16, tls tlsContext: TLSContext? = nil) throws {
        guard let a = SocketAddress(host: host, port: port) else { throw UsageError(message: "\(host) is not a numeric address") }
        let fd = try Socket.connect(a, timeout: 10)
        self.fd = fd
        tls = try tlsContext.map { try TLSStream(fd: fd, context: $0, expectedName: host, timeout: 10) }
    }
    deinit { tls?.shutdown(); Sys.close(fd) }

    func send(_ bytes: [UInt8]) throws {
        if let t = tls {
            try bytes.withUnsafeBytes { try t.write($0.baseAddress!, $0.count) }
            return
        }
        var sent = 0
        while sent < bytes.count {
            let r = try bytes.withUnsafeBytes { try Sys.send(fd, $0.baseAddress! + sent, bytes.count - sent) }
            guard case .done(let n) = r else { throw UsageError(message: "send timed out") }
            sent += n
        }
    }

    func readReply(_ codec: any LoadCodec) throws -> Reply {
        while true {
            if start < buffer.count {
                let parsed = buffer.withUnsafeBytes { codec.parse(UnsafeRawBufferPointer(rebasing: $0[start...])) }
                if let (reply, used) = parsed {
                    start += used
                    if start == buffer.count { buffer.removeAll(keepingCapacity: true); start = 0 }
                    return reply
                }
            }
            if start > 0 { buffer.removeFirst(start); start = 0 }
            let r = try chunk.withUnsafeMutableBytes { p in
                if let t = tls { return try t.read(p.baseAddress!, p.count) }
                return try Sys.read(fd, p.baseAddress!, p.count)
            }
            guard case .done(let n) = r else { throw UsageError(message: "read timed out") }
            if n == 0 { throw UsageError(message: "the server closed the connection") }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }
}
