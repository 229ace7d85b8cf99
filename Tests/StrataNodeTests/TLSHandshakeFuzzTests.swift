import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataNet
import StrataWire

/// Mutated and truncated TLS handshakes against a real node's TLS port: a real ClientHello
/// (made by `TLSSession` on a socketpair) with bytes flipped, cut short, or extended with
/// garbage, one connection each. The node must close each one, count it, and keep serving a
/// TLS connection opened before. 150 cases in `make test`, 3000 in `make soak` (STRATA_SOAK=1).
final class TLSHandshakeFuzzTests: XCTestCase {
    /// The first flight a client sends (its ClientHello records).
    func clientHello(_ certs: TestCertificates) throws -> [UInt8] {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        defer { close(fds[0]); close(fds[1]) }
        Sys.setNonBlocking(fds[0])
        Sys.setNonBlocking(fds[1])
        let client = try TLSSession(context: try TLSContext.client(ca: certs.path("ca.pem")), fd: fds[0], server: false, expectedName: "127.0.0.1")
        XCTAssertEqual(try client.handshake(), .wantRead)
        var buf = [UInt8](repeating: 0, count: 64 << 10)
        let n = read(fds[1], &buf, buf.count)
        XCTAssertGreaterThan(n, 5)
        return Array(buf[0..<max(0, n)])
    }

    /// Reads (whatever the node sends: TLS records, alerts) until the node closes; true when it
    /// did within `seconds` (the socket's receive timeout is 5 s).
    func closesWithin(_ fd: Int32, _ seconds: Double) -> Bool {
        let deadline = monotonicSeconds() + seconds
        var buf = [UInt8](repeating: 0, count: 16 << 10)
        while monotonicSeconds() < deadline {
            do {
                guard case .done(let n) = try buf.withUnsafeMutableBytes({ try Sys.read(fd, $0.baseAddress!, $0.count) }) else { return false }
                if n == 0 { return true }
            } catch { return (error as? SystemError)?.errno == ECONNRESET }
        }
        return false
    }

    func testMutatedHandshakesAreClosedAndCountedWhileOthersAreServed() throws {
        let certs = try TestCertificates()
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--tls-port", "0", "--tls-cert", certs.path("node.pem"),
                                                              "--tls-key", certs.path("node.key"), "--frame-timeout", "2"])
        let tlsPort = try XCTUnwrap(node.tlsPort)
        let good = try node.connectTLS(certs.client())
        try good.set(SetRequest(key: b("k"), value: b("v")))
        let hello = try clientHello(certs)
        let cases = ProcessInfo.processInfo.environment["STRATA_SOAK"] == nil ? 150 : 3000
        var rng = SplitMix(seed: 19)
        var sent = 0
        for i in 0..<cases {
            var bytes = hello
            switch i % 4 {
            case 0: // flip a few bytes
                for _ in 0..<(1 + Int(rng.next() % 4)) { bytes[Int(rng.next() % UInt64(bytes.count))] ^= UInt8(1 + rng.next() % 255) }
            case 1: // cut short
                bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count))))
            case 2: // a valid hello followed by garbage records
                bytes += (0..<Int(rng.next() % 2048)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            default: // a record header with a random length, then random bytes
                bytes = [0x16, 0x03, 0x01, UInt8(truncatingIfNeeded: rng.next()), UInt8(truncatingIfNeeded: rng.next())]
                    + (0..<Int(rng.next() % 512)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            }
            let fd = try Socket.connect(SocketAddress(host: "127.0.0.1", port: tlsPort)!, timeout: 5)
            defer { Sys.close(fd) }
            if !bytes.isEmpty { _ = bytes.withUnsafeBytes { try? Sys.send(fd, $0.baseAddress!, $0.count) } }
            // A hello followed by garbage is refused by the node at once: wait for its close.
            // The others may leave the node waiting for more (up to the frame timeout, which
            // TLSTests covers): close them from this side, a truncated handshake to the node.
            if i % 4 == 2 { XCTAssertTrue(closesWithin(fd, 5), "case \(i)") }
            sent += 1
            if i % 50 == 49 { XCTAssertEqual(try good.get(b("k"))?.value, b("v"), "after \(i + 1) cases") }
        }
        XCTAssertEqual(sent, cases)
        XCTAssertEqual(try good.get(b("k"))?.value, b("v"))
        XCTAssertNoThrow(try node.connectTLS(certs.client()).ping())
        // Every case ends as a failed handshake (a flipped byte may also land where it does no
        // harm: then the handshake waits for a client that is gone, and fails all the same).
        XCTAssertTrue(try eventually(10) { (try nodeStats(good)["tls_handshake_failures"] as? Int ?? 0) >= cases * 3 / 4 })
        XCTAssertTrue(try eventually(10) { (try nodeStats(good)["connections_current"] as? Int ?? -1) == 1 })
        XCTAssertTrue(node.process.isRunning)
    }
}
