import Foundation
import XCTest
import StrataNet

/// `TLSSession` on its own: two sessions on a non-blocking socketpair, stepped by hand the way
/// an event loop steps them (every call returns at once: done, or which readiness to wait for).
final class TLSSessionTests: XCTestCase {
    func pair() throws -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        XCTAssertEqual(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds), 0)
        Sys.setNonBlocking(fds[0])
        Sys.setNonBlocking(fds[1])
        return (fds[0], fds[1])
    }

    /// Steps both handshakes until both are done (bounded); returns the client's error, if any.
    func handshake(_ server: TLSSession, _ client: TLSSession) -> String? {
        var serverDone = false, clientDone = false
        for _ in 0..<100 where !(serverDone && clientDone) {
            do {
                if !clientDone, case .done = try client.handshake() { clientDone = true }
            } catch { return "client: \(error)" }
            do {
                if !serverDone, case .done = try server.handshake() { serverDone = true }
            } catch { return "server: \(error)" }
        }
        return serverDone && clientDone ? nil : "no progress"
    }

    func testHandshakeStepsWithoutBlockingThenBytesCrossBothWays() throws {
        let certs = try TestCertificates()
        let (a, b) = try pair()
        defer { close(a); close(b) }
        let server = try TLSSession(context: try TLSContext.server(certificate: certs.path("node.pem"), key: certs.path("node.key")), fd: a, server: true)
        let client = try TLSSession(context: try TLSContext.client(ca: certs.path("ca.pem")), fd: b, server: false, expectedName: "127.0.0.1")
        // Nothing has arrived yet: the server waits to read, without blocking.
        XCTAssertEqual(try server.handshake(), .wantRead)
        XCTAssertNil(handshake(server, client))
        XCTAssertTrue(server.handshakeDone && client.handshakeDone)
        XCTAssertTrue(["TLSv1.2", "TLSv1.3"].contains(client.version), client.version)

        let message = Array("hello over tls".utf8)
        XCTAssertEqual(try message.withUnsafeBytes { try client.write($0.baseAddress!, $0.count) }, .done(message.count))
        var buf = [UInt8](repeating: 0, count: 64 << 10)
        let r = try buf.withUnsafeMutableBytes { try server.read($0.baseAddress!, $0.count) }
        XCTAssertEqual(r, .done(message.count))
        XCTAssertEqual(Array(buf[0..<message.count]), message)
        // Nothing more: the read wants the socket, it does not block.
        XCTAssertEqual(try buf.withUnsafeMutableBytes { try server.read($0.baseAddress!, $0.count) }, .wantRead)

        // A full socket: writes take part, then ask to wait for room.
        let big = [UInt8](repeating: 7, count: 4 << 20)
        var sent = 0
        var sawWantWrite = false
        for _ in 0..<10_000 where sent < big.count {
            switch try big.withUnsafeBytes({ try server.write($0.baseAddress! + sent, big.count - sent) }) {
            case .done(let n): sent += n
            case .wantWrite: sawWantWrite = true
            default: XCTFail("unexpected")
            }
            if sawWantWrite { break }
        }
        XCTAssertTrue(sawWantWrite)
        XCTAssertLessThan(sent, big.count)

        // close_notify reads as the end of the stream.
        client.shutdown()
        var ended = false
        for _ in 0..<10_000 {
            let o = try buf.withUnsafeMutableBytes { try server.read($0.baseAddress!, $0.count) }
            if o == .closed { ended = true; break }
            if o == .wantRead { break }
        }
        XCTAssertTrue(ended)
    }

    func testPlaintextToATLSServerFailsTheHandshakeWithAReason() throws {
        let certs = try TestCertificates()
        let (a, b) = try pair()
        defer { close(a); close(b) }
        let server = try TLSSession(context: try TLSContext.server(certificate: certs.path("node.pem"), key: certs.path("node.key")), fd: a, server: true)
        let hello = Array("GET / HTTP/1.1\r\n\r\n".utf8)
        _ = hello.withUnsafeBytes { write(b, $0.baseAddress!, $0.count) }
        XCTAssertThrowsError(try server.handshake()) { XCTAssertTrue("\($0)".contains("handshake"), "\($0)") }
    }

    func testContextsRefuseBadFilesWithTheFileAndTheReason() throws {
        let certs = try TestCertificates()
        XCTAssertThrowsError(try TLSContext.server(certificate: certs.path("nope.pem"), key: certs.path("node.key"))) {
            XCTAssertTrue("\($0)".contains("cannot load the certificate") && "\($0)".contains("nope.pem"), "\($0)")
        }
        XCTAssertThrowsError(try TLSContext.server(certificate: certs.path("node.pem"), key: certs.path("client.key"))) {
            XCTAssertTrue("\($0)".contains("does not match"), "\($0)")
        }
        XCTAssertThrowsError(try TLSContext.client(ca: certs.path("nope.pem"))) {
            XCTAssertTrue("\($0)".contains("cannot load the CA"), "\($0)")
        }
        XCTAssertThrowsError(try TLSContext.client(ca: certs.path("ca.pem"), certificate: certs.path("client.pem"))) {
            XCTAssertTrue("\($0)".contains("needs its key"), "\($0)")
        }
        XCTAssertFalse(try TLSContext.server(certificate: certs.path("node.pem"), key: certs.path("node.key")).verifiesPeer)
        XCTAssertTrue(try TLSContext.server(certificate: certs.path("node.pem"), key: certs.path("node.key"), clientCA: certs.path("ca.pem")).verifiesPeer)
    }
}
