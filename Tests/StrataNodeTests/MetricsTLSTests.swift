import Foundation
import XCTest
import StrataCore

/// The metrics endpoint over HTTPS (`--metrics-tls`, the real `strata` binary, certificates
/// made by `openssl` for each test): scrapes and probes through TLS, plaintext refused, the
/// node's CA for client certificates, and the settings checked at start.
final class MetricsTLSTests: XCTestCase {
    private var dirs: [TempDir] = []
    func tempPath() -> String {
        let d = TempDir()
        dirs.append(d)
        return d.path
    }

    func node(_ certs: TestCertificates, _ extra: [String] = []) throws -> NodeProcess {
        try NodeProcess(dataDir: tempPath(), extra: ["--metrics-port", "0", "--metrics-tls", "--tls-cert", certs.path("node.pem"),
                                                     "--tls-key", certs.path("node.key")] + extra)
    }

    func get(_ port: UInt16, _ path: String, _ certs: TestCertificates, client: String? = nil) throws -> String {
        let s = try TLSTextSocket(port: port, certs, client: client)
        try s.send("GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        return s.readToEnd()
    }

    func testScrapesAndProbesGoThroughTLSAndPlaintextIsRefused() throws {
        let certs = try TestCertificates()
        let node = try node(certs)
        let port = try XCTUnwrap(node.metricsPort, "no 'metrics on https://' line")
        let metrics = try get(port, "/metrics", certs)
        XCTAssertTrue(metrics.hasPrefix("HTTP/1.1 200 OK\r\n"), metrics)
        XCTAssertTrue(metrics.contains("strata_tls_connections_total 1"), metrics)
        XCTAssertTrue(try get(port, "/healthz", certs).hasSuffix("\r\n\r\nok\n"))

        // Plaintext HTTP to the HTTPS port: no HTTP answer, closed, counted.
        let plain = try TextSocket(port: port)
        plain.send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        let said = plain.readAll()
        XCTAssertFalse(said.contains("HTTP/1.1"), said)
        // A client that does not trust the node's CA refuses it.
        XCTAssertThrowsError(try TLSTextSocket(port: port, certs, ca: "other-ca")) {
            XCTAssertTrue("\($0)".contains("certificate verify failed"), "\($0)")
        }
        // A connection that never starts its handshake is cut at the 2 s request timeout.
        let silent = try TextSocket(port: port, timeout: 5)
        XCTAssertTrue(silent.peerCloses(within: 5), "a silent connection was not cut")
        // The endpoint still serves, and counts the failures.
        let after = try get(port, "/metrics", certs)
        XCTAssertTrue(after.hasPrefix("HTTP/1.1 200 OK\r\n"), after)
        XCTAssertTrue(try eventually(5) { (try nodeStats(try node.connect())["tls_handshake_failures"] as? Int ?? 0) >= 3 })
        XCTAssertTrue(node.stderr.contains("listener=metrics"), node.stderr)
    }

    func testWithTheTLSCAOnlyScrapersWithAClientCertificateGetIn() throws {
        let certs = try TestCertificates()
        let node = try node(certs, ["--tls-ca", certs.path("ca.pem")])
        let port = try XCTUnwrap(node.metricsPort)
        XCTAssertTrue(try get(port, "/healthz", certs, client: "client").hasPrefix("HTTP/1.1 200 OK\r\n"))
        // Refused after the client's side of a TLS 1.3 handshake: no answer.
        XCTAssertFalse((try? get(port, "/healthz", certs))?.contains("HTTP/1.1") ?? false)
        XCTAssertFalse((try? get(port, "/healthz", certs, client: "other-client"))?.contains("HTTP/1.1") ?? false)
    }

    func testSIGHUPRotatesTheMetricsCertificate() throws {
        let certs = try TestCertificates()
        let live = tempPath()
        let cert = live + "/node.pem", key = live + "/node.key"
        try FileManager.default.copyItem(atPath: certs.path("node.pem"), toPath: cert)
        try FileManager.default.copyItem(atPath: certs.path("node.key"), toPath: key)
        let node = try NodeProcess(dataDir: tempPath(), extra: ["--metrics-port", "0", "--metrics-tls", "--tls-cert", cert, "--tls-key", key])
        let port = try XCTUnwrap(node.metricsPort)
        XCTAssertTrue(try get(port, "/healthz", certs).hasPrefix("HTTP/1.1 200 OK\r\n"))
        try FileManager.default.removeItem(atPath: cert)
        try FileManager.default.removeItem(atPath: key)
        try FileManager.default.copyItem(atPath: certs.path("other-node.pem"), toPath: cert)
        try FileManager.default.copyItem(atPath: certs.path("other-node.key"), toPath: key)
        kill(node.process.processIdentifier, SIGHUP)
        XCTAssertTrue(try eventually(10) { (try nodeStats(try node.connect())["tls_reloads"] as? Int) == 1 })
        let s = try TLSTextSocket(port: port, certs, ca: "other-ca")
        try s.send("GET /healthz HTTP/1.1\r\n\r\n")
        XCTAssertTrue(s.readToEnd().hasPrefix("HTTP/1.1 200 OK\r\n"))
        XCTAssertThrowsError(try TLSTextSocket(port: port, certs)) { XCTAssertTrue("\($0)".contains("certificate verify failed"), "\($0)") }
    }

    func testMetricsTLSSettingsAreCheckedAtStart() throws {
        let certs = try TestCertificates()
        func serve(_ args: [String]) throws -> (Int32, String) {
            let r = try runCLI(["serve", "--port", "0", "--data", tempPath()] + args)
            return (r.code, r.err)
        }
        var (code, err) = try serve(["--metrics-tls", "--tls-cert", certs.path("node.pem"), "--tls-key", certs.path("node.key")])
        XCTAssertEqual(code, 2); XCTAssertTrue(err.contains("--metrics-tls needs --metrics-port"), err)
        (code, err) = try serve(["--metrics-tls", "--metrics-port", "0"])
        XCTAssertEqual(code, 2); XCTAssertTrue(err.contains("--metrics-tls needs --tls-cert and --tls-key"), err)
        // From the environment: the line says https.
        let fromEnv = try NodeProcess(dataDir: tempPath(), extra: ["--metrics-port", "0", "--tls-cert", certs.path("node.pem"),
                                                                   "--tls-key", certs.path("node.key")],
                                      env: ["STRATA_METRICS_TLS": "true"])
        XCTAssertTrue(try get(try XCTUnwrap(fromEnv.metricsPort), "/healthz", certs).hasPrefix("HTTP/1.1 200 OK\r\n"))
    }
}
