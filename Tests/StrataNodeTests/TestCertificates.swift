import Foundation
import XCTest
import StrataClient

/// Certificates made for a test by the `openssl` CLI in a temporary directory: a local CA and,
/// signed by it, a node certificate (IP SAN 127.0.0.1, DNS localhost), a client certificate, an
/// expired node certificate and a node certificate naming only `localhost`; and a second CA
/// with a node and a client certificate of its own. Paths: `path("ca.pem")` etc.
final class TestCertificates: @unchecked Sendable {
    let dir = TempDir()

    func path(_ name: String) -> String { dir.path + "/" + name }

    init() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl") else {
            throw XCTSkip("the openssl CLI is not installed (make deps installs it)")
        }
        try makeCA("ca")
        try makeCA("other-ca")
        try sign("node", ca: "ca", cn: "127.0.0.1", ext: Self.serverExt("IP:127.0.0.1,DNS:localhost"))
        try sign("client", ca: "ca", cn: "strata-client", ext: Self.clientExt)
        try sign("dns-only", ca: "ca", cn: "localhost", ext: Self.serverExt("DNS:localhost"))
        try sign("other-node", ca: "other-ca", cn: "127.0.0.1", ext: Self.serverExt("IP:127.0.0.1,DNS:localhost"))
        try sign("other-client", ca: "other-ca", cn: "strata-client", ext: Self.clientExt)
        try signExpired("expired", ca: "ca")
    }

    static func serverExt(_ san: String) -> String {
        "subjectAltName=\(san)\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    }
    static let clientExt = "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"

    /// A client configuration trusting `ca` (with the client certificate `client`, if given).
    func client(ca: String = "ca", client: String? = nil, serverName: String? = nil) -> TLSClientConfiguration {
        TLSClientConfiguration(caFile: path("\(ca).pem"), certificateFile: client.map { path("\($0).pem") },
                               keyFile: client.map { path("\($0).key") }, serverName: serverName)
    }

    private func openssl(_ args: [String]) throws {
        let (status, out) = try runProcess("/usr/bin/openssl", args, in: dir.path)
        guard status == 0 else { throw NSError(domain: "openssl", code: Int(status), userInfo: [NSLocalizedDescriptionKey: "openssl \(args.joined(separator: " ")): \(out)"]) }
    }

    private func makeCA(_ name: String) throws {
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key",
                     "-out", "\(name).pem", "-days", "30", "-subj", "/CN=\(name) test CA",
                     "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    }

    private func request(_ name: String, cn: String, ext: String) throws {
        try openssl(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(name).key",
                     "-out", "\(name).csr", "-subj", "/CN=\(cn)"])
        try ext.write(toFile: path("\(name).ext"), atomically: true, encoding: .utf8)
    }

    private func sign(_ name: String, ca: String, cn: String, ext: String) throws {
        try request(name, cn: cn, ext: ext)
        try openssl(["x509", "-req", "-in", "\(name).csr", "-CA", "\(ca).pem", "-CAkey", "\(ca).key", "-CAcreateserial",
                     "-out", "\(name).pem", "-days", "30", "-extfile", "\(name).ext"])
    }

    /// Valid for one day in 2020 (`openssl ca` is the one that takes explicit dates).
    private func signExpired(_ name: String, ca: String) throws {
        try request(name, cn: "127.0.0.1", ext: Self.serverExt("IP:127.0.0.1,DNS:localhost"))
        try "".write(toFile: path("index.txt"), atomically: true, encoding: .utf8)
        try "01\n".write(toFile: path("serial"), atomically: true, encoding: .utf8)
        try """
        [ca]
        default_ca = d
        [d]
        database = index.txt
        new_certs_dir = .
        serial = serial
        default_md = sha256
        policy = p
        unique_subject = no
        [p]
        commonName = supplied

        """.write(toFile: path("ca.cnf"), atomically: true, encoding: .utf8)
        try openssl(["ca", "-batch", "-config", "ca.cnf", "-cert", "\(ca).pem", "-keyfile", "\(ca).key", "-in", "\(name).csr",
                     "-out", "\(name).pem", "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
                     "-extfile", "\(name).ext", "-notext"])
    }
}
