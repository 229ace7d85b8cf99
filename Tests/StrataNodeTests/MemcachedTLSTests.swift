import Foundation
import XCTest
import StrataCore
import StrataNet
@testable import StrataServer

/// A memcached text-protocol client over TLS for tests: connects to 127.0.0.1, handshakes
/// (checking the node's certificate against `ca` and the name 127.0.0.1, presenting `client`'s
/// certificate when given), then sends lines and reads answers, every wait bounded.
final class TLSTextSocket {
    let stream: TLSStream
    private var buffered: [UInt8] = []

    init(port: UInt16, _ certs: TestCertificates, ca: String = "ca", client: String? = nil, timeout: Double = 5) throws {
        let fd = try Socket.connect(SocketAddress(host: "127.0.0.1", port: port)!, timeout: timeout)
        do {
            let context = try TLSContext.client(ca: certs.path("\(ca).pem"), certificate: client.map { certs.path("\($0).pem") },
                                                key: client.map { certs.path("\($0).key") })
            stream = try TLSStream(fd: fd, context: context, expectedName: "127.0.0.1", timeout: timeout)
        } catch {
            Sys.close(fd)
            throw error
        }
    }

    deinit {
        stream.shutdown()
        Sys.close(stream.fd)
    }

    func send(_ s: String) throws {
        let bytes = Array(s.utf8)
        try bytes.withUnsafeBytes { try stream.write($0.baseAddress!, $0.count) }
    }

    /// Reads until the bytes received end with `suffix`; throws at the end of the stream, on a
    /// TLS error (an alert from the node) or after the read timeout.
    func read(until suffix: String) throws -> String {
        let want = Array(suffix.utf8)
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while !(buffered.count >= want.count && Array(buffered.suffix(want.count)) == want) {
            let r = try chunk.withUnsafeMutableBytes { try stream.read($0.baseAddress!, $0.count) }
            guard case .done(let n) = r else { throw TLSError("no answer within the read timeout") }
            guard n > 0 else { throw TLSError("the node closed the connection") }
            buffered += chunk[0..<n]
        }
        defer { buffered = [] }
        return String(decoding: buffered, as: UTF8.self)
    }

    /// Everything until the node ends the stream (close_notify or the socket's end); what came
    /// before an error or the read timeout otherwise.
    func readToEnd() -> String {
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            guard let r = try? chunk.withUnsafeMutableBytes({ try stream.read($0.baseAddress!, $0.count) }),
                  case .done(let n) = r, n > 0 else { break }
            buffered += chunk[0..<n]
        }
        defer { buffered = [] }
        return String(decoding: buffered, as: UTF8.self)
    }

    /// Sends `command` and reads its answer (up to `until`).
    func ask(_ command: String, until: String = "\r\n") throws -> String {
        try send(command)
        return try read(until: until)
    }
}

/// The memcached listener over TLS end to end (`--memcached-tls-port`; the real `strata`
/// binary, certificates made by `openssl` for each test): real clients, refusals of plaintext,
/// a wrong CA and missing client certificates, `--tls-only`, and certificate rotation on SIGHUP.
final class MemcachedTLSTests: XCTestCase {
    private var dirs: [TempDir] = []
    func tempPath() -> String {
        let d = TempDir()
        dirs.append(d)
        return d.path
    }

    func node(_ certs: TestCertificates, _ extra: [String] = []) throws -> NodeProcess {
        try NodeProcess(dataDir: tempPath(), extra: ["--memcached-tls-port", "0", "--tls-cert", certs.path("node.pem"),
                                                     "--tls-key", certs.path("node.key")] + extra)
    }

    func stat(_ node: NodeProcess, _ name: String) throws -> Int {
        try XCTUnwrap(try nodeStats(try node.connect())[name] as? Int, "no \(name) in STATS")
    }

    /// What a failed connection said (handshake, or the first command's answer).
    func refusal(_ body: () throws -> Void) -> String {
        do { try body() } catch { return "\(error)" }
        return "accepted"
    }

    func testPymemcacheEveryCommandOverTLS() throws {
        let python = try MemcachedClientTests.pymemcachePython()
        let certs = try TestCertificates()
        let node = try node(certs)
        let port = try XCTUnwrap(node.memcachedTLSPort, "no 'memcached tls on' line")
        let script = MemcachedClientTests.root.appendingPathComponent("Tests/clients/pymemcache_e2e.py").path
        let r = try runProcess(python, [script, String(port), certs.path("ca.pem")])
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.contains(", 0 failed"), r.output)
        XCTAssertTrue(node.process.isRunning, node.stderr)
        XCTAssertGreaterThanOrEqual(try stat(node, "tls_connections"), 3)
        XCTAssertEqual(try stat(node, "tls_handshake_failures"), 0)
    }

    func testKeysAreSharedWithTheBinaryProtocolAndTheTokenWorksOverTLS() throws {
        let certs = try TestCertificates()
        let tokenFile = tempPath() + "/token"
        try "s3cret\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
        let node = try node(certs, ["--auth-token-file", tokenFile, "--memcached-port", "0"])
        let port = try XCTUnwrap(node.memcachedTLSPort)
        XCTAssertNotNil(node.memcachedPort, "the plaintext memcached port stays on without --tls-only")
        let c = try TLSTextSocket(port: port, certs)
        XCTAssertEqual(try c.ask("get k\r\n"), "CLIENT_ERROR unauthenticated\r\n")
        XCTAssertEqual(try c.ask("set auth 0 0 12\r\ntoken s3cret\r\n"), "STORED\r\n")
        XCTAssertEqual(try c.ask("set k 5 0 8\r\nover tls\r\n"), "STORED\r\n")
        XCTAssertEqual(try c.ask("get k\r\n", until: "END\r\n"), "VALUE k 5 8\r\nover tls\r\nEND\r\n")
        // A value of many TLS records both ways.
        let big = String(repeating: "0123456789abcdef", count: 1 << 16)
        XCTAssertEqual(try c.ask("set big 0 0 \(big.utf8.count)\r\n\(big)\r\n"), "STORED\r\n")
        XCTAssertEqual(try c.ask("get big\r\n", until: "END\r\n"), "VALUE big 0 \(big.utf8.count)\r\n\(big)\r\nEND\r\n")
        // The same item through the binary protocol.
        let binary = try node.connect(token: b("s3cret"))
        XCTAssertEqual(try binary.get(b("k"))?.value, b("over tls"))
        let json = try nodeStats(binary)
        XCTAssertEqual(json["memcached_tls_port"] as? Int, Int(port))
        XCTAssertEqual(json["memcached_port"] as? Int, Int(try XCTUnwrap(node.memcachedPort)))
    }

    func testPlaintextAndStalledHandshakesAreCutWithoutHurtingOthers() throws {
        let certs = try TestCertificates()
        let node = try node(certs, ["--frame-timeout", "1", "--memcached-port", "0"])
        let port = try XCTUnwrap(node.memcachedTLSPort)
        let good = try TLSTextSocket(port: port, certs)
        XCTAssertEqual(try good.ask("set k 0 0 1\r\nv\r\n"), "STORED\r\n")

        // memcached's plaintext protocol to the TLS port: no answer in plaintext, closed.
        let plain = try TextSocket(port: port)
        plain.send("version\r\nset x 0 0 1\r\ny\r\n")
        let said = plain.readAll()
        XCTAssertFalse(said.contains("VERSION") || said.contains("STORED") || said.contains("ERROR"), said)
        XCTAssertTrue(plain.peerCloses(within: 5))
        // Nothing at all: the handshake is cut at the frame timeout (1 s).
        let silent = try TextSocket(port: port, timeout: 5)
        // A ClientHello record header promising more than is sent, then silence.
        let stalled = try TextSocket(port: port, timeout: 5)
        stalled.send([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03] + [UInt8](repeating: 0x41, count: 40))
        XCTAssertTrue(silent.peerCloses(within: 5), "a silent connection was not cut")
        XCTAssertTrue(stalled.peerCloses(within: 5), "a stalled handshake was not cut")

        // The node kept serving: the open TLS connection, a new one, and the plaintext port.
        XCTAssertEqual(try good.ask("get k\r\n", until: "END\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n")
        XCTAssertEqual(try TLSTextSocket(port: port, certs).ask("get k\r\n", until: "END\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n")
        let plainPort = try XCTUnwrap(node.memcachedPort)
        let plaintext = try TextSocket(port: plainPort)
        plaintext.send("get k\r\n")
        XCTAssertEqual(plaintext.read(until: "END\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n")
        XCTAssertTrue(try eventually(5) { try stat(node, "tls_handshake_failures") >= 3 })
        XCTAssertTrue(node.stderr.contains("tls_handshake_failed"), node.stderr)
    }

    func testAWrongCAIsRefusedAndMutualTLSNeedsAClientCertificateFromTheCA() throws {
        let certs = try TestCertificates()
        // The client refuses a node whose certificate its CA did not sign.
        let plainTLS = try node(certs)
        let wrongCA = refusal { _ = try TLSTextSocket(port: try XCTUnwrap(plainTLS.memcachedTLSPort), certs, ca: "other-ca") }
        XCTAssertTrue(wrongCA.contains("certificate verify failed"), wrongCA)

        // With --tls-ca the node refuses clients without a certificate from that CA.
        let node = try node(certs, ["--tls-ca", certs.path("ca.pem")])
        let port = try XCTUnwrap(node.memcachedTLSPort)
        let c = try TLSTextSocket(port: port, certs, client: "client")
        XCTAssertEqual(try c.ask("set k 0 0 2\r\nmt\r\n"), "STORED\r\n")
        // TLS 1.3 ends the client's handshake before the node has checked its certificate: the
        // refusal arrives as an alert on the first read.
        let without = refusal { _ = try TLSTextSocket(port: port, certs).ask("get k\r\n", until: "END\r\n") }
        XCTAssertNotEqual(without, "accepted")
        let otherCA = refusal { _ = try TLSTextSocket(port: port, certs, client: "other-client").ask("get k\r\n", until: "END\r\n") }
        XCTAssertNotEqual(otherCA, "accepted")
        XCTAssertTrue(try eventually(5) { try stat(node, "tls_handshake_failures") == 2 })
        // pymemcache with its client certificate.
        let python = try MemcachedClientTests.pymemcachePython()
        let r = try runProcess(python, ["-c", """
            import ssl, sys
            from pymemcache.client.base import Client
            ctx = ssl.create_default_context(cafile=sys.argv[2])
            ctx.load_cert_chain(sys.argv[3], sys.argv[4])
            c = Client(("127.0.0.1", int(sys.argv[1])), timeout=5, tls_context=ctx)
            print(c.get("k"))
            """, String(port), certs.path("ca.pem"), certs.path("client.pem"), certs.path("client.key")])
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.contains("b'mt'"), r.output)
    }

    func testTLSOnlyTurnsThePlaintextMemcachedPortOff() throws {
        let certs = try TestCertificates()
        // A port that is free now: the node is told to use it for plaintext memcached and must not.
        let probe = try NodeProcess(dataDir: tempPath(), extra: ["--memcached-port", "0"])
        let plainPort = try XCTUnwrap(probe.memcachedPort)
        probe.terminate()
        let node = try node(certs, ["--tls-only", "--tls-port", "0", "--memcached-port", String(plainPort)])
        XCTAssertNil(node.memcachedPort, "no 'memcached on' line with --tls-only")
        XCTAssertThrowsError(try TextSocket(port: plainPort, timeout: 2), "the plaintext memcached port is open")
        let port = try XCTUnwrap(node.memcachedTLSPort)
        XCTAssertTrue(try TLSTextSocket(port: port, certs).ask("version\r\n").hasPrefix("VERSION 1.6."))
        XCTAssertNoThrow(try node.connectTLS(certs.client()).ping())
        XCTAssertNil(try nodeStats(try node.connectTLS(certs.client()))["memcached_port"])

        // --tls-only with a plaintext memcached port and no TLS one would leave it in the clear.
        let bad = try runCLI(["serve", "--port", "0", "--data", tempPath(), "--tls-only", "--tls-port", "0", "--memcached-port", "0",
                              "--tls-cert", certs.path("node.pem"), "--tls-key", certs.path("node.key")])
        XCTAssertEqual(bad.code, 2)
        XCTAssertTrue(bad.err.contains("--tls-only with --memcached-port needs --memcached-tls-port"), bad.err)
    }

    func testSIGHUPRotatesTheCertificateForTheMemcachedTLSPort() throws {
        let certs = try TestCertificates()
        let live = tempPath()
        let cert = live + "/node.pem", key = live + "/node.key"
        try FileManager.default.copyItem(atPath: certs.path("node.pem"), toPath: cert)
        try FileManager.default.copyItem(atPath: certs.path("node.key"), toPath: key)
        let node = try NodeProcess(dataDir: tempPath(), extra: ["--memcached-tls-port", "0", "--tls-cert", cert, "--tls-key", key])
        let port = try XCTUnwrap(node.memcachedTLSPort)
        let before = try TLSTextSocket(port: port, certs)
        XCTAssertEqual(try before.ask("set k 0 0 1\r\n1\r\n"), "STORED\r\n")
        XCTAssertNotEqual(refusal { _ = try TLSTextSocket(port: port, certs, ca: "other-ca") }, "accepted")

        try FileManager.default.removeItem(atPath: cert)
        try FileManager.default.removeItem(atPath: key)
        try FileManager.default.copyItem(atPath: certs.path("other-node.pem"), toPath: cert)
        try FileManager.default.copyItem(atPath: certs.path("other-node.key"), toPath: key)
        kill(node.process.processIdentifier, SIGHUP)
        XCTAssertTrue(try eventually(10) { try stat(node, "tls_reloads") == 1 })

        // New connections get the new certificate; the one open before keeps working.
        let after = try TLSTextSocket(port: port, certs, ca: "other-ca")
        XCTAssertEqual(try after.ask("get k\r\n", until: "END\r\n"), "VALUE k 0 1\r\n1\r\nEND\r\n")
        let oldCA = refusal { _ = try TLSTextSocket(port: port, certs) }
        XCTAssertTrue(oldCA.contains("certificate verify failed"), oldCA)
        XCTAssertEqual(try before.ask("set k 0 0 1\r\n2\r\n"), "STORED\r\n")
        XCTAssertEqual(try before.ask("get k\r\n", until: "END\r\n"), "VALUE k 0 1\r\n2\r\nEND\r\n")
    }

    func testMemcachedTLSSettingsComeFromFlagsTheEnvironmentAndTheConfigFile() throws {
        let certs = try TestCertificates()
        func serve(_ args: [String]) throws -> (Int32, String) {
            let r = try runCLI(["serve", "--port", "0", "--data", tempPath()] + args)
            return (r.code, r.err)
        }
        var (code, err) = try serve(["--memcached-tls-port", "0"])
        XCTAssertEqual(code, 2); XCTAssertTrue(err.contains("--memcached-tls-port needs --tls-cert and --tls-key"), err)
        (code, err) = try serve(["--memcached-tls-port", "70000"])
        XCTAssertEqual(code, 2); XCTAssertTrue(err.contains("--memcached-tls-port must be 0…65535"), err)
        (code, err) = try serve(["--tls-cert", certs.path("node.pem"), "--tls-key", certs.path("node.key")])
        XCTAssertEqual(code, 2); XCTAssertTrue(err.contains("need --tls-port, --memcached-tls-port or --metrics-tls"), err)

        let config = tempPath() + "/c.json"
        try #"{"memcached_tls_port": 0, "tls_cert": "\#(certs.path("node.pem"))", "tls_key": "\#(certs.path("node.key"))"}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        // Neither names the flag, so the port is read from STATS (bound before the node prints).
        func tlsPort(_ node: NodeProcess) throws -> UInt16 {
            UInt16(try XCTUnwrap(try nodeStats(try node.connect())["memcached_tls_port"] as? Int, "no memcached_tls_port in STATS"))
        }
        let fromFile = try NodeProcess(dataDir: tempPath(), extra: ["--config", config])
        XCTAssertTrue(try TLSTextSocket(port: try tlsPort(fromFile), certs).ask("version\r\n").hasPrefix("VERSION"))
        let fromEnv = try NodeProcess(dataDir: tempPath(), extra: ["--tls-cert", certs.path("node.pem"), "--tls-key", certs.path("node.key")],
                                      env: ["STRATA_MEMCACHED_TLS_PORT": "0"])
        XCTAssertTrue(try TLSTextSocket(port: try tlsPort(fromEnv), certs).ask("version\r\n").hasPrefix("VERSION"))
    }
}

/// The queue a TLS connection sends from one chunk at a time (`OutputQueue.withHead`).
final class OutputQueueHeadTests: XCTestCase {
    /// A text-protocol command that appended nothing leaves an empty owned chunk first in line
    /// (a memory miss going on to a worker, whose answer comes as a chunk of its own): the head
    /// is the answer, not zero bytes — a TLS write of zero bytes made no progress, and the
    /// connection was cut as stalled.
    func testAnEmptyOwnedChunkIsSkippedToTheNextAnswer() {
        var q = OutputQueue()
        q.appendOwned { _ in }
        q.append(bytes: Array("END\r\n".utf8))
        XCTAssertEqual(q.count, 5)
        XCTAssertEqual(q.withHead { Array($0) }, Array("END\r\n".utf8))
        q.consume(5)
        XCTAssertTrue(q.isEmpty)
        // Answers appended in place after that are the head again.
        q.appendOwned { $0 += Array("STORED\r\n".utf8) }
        XCTAssertEqual(q.withHead { Array($0) }, Array("STORED\r\n".utf8))
    }
}
