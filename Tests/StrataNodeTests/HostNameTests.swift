import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataNet

/// Host names in member lists and `--server` (an outside review found every name refused as
/// "not a numeric address", so the Kubernetes manifest's pod names never synced). "LOCALHOST"
/// is a name only the system resolver knows here (`localhost` itself is read without it), and
/// resolves on every machine.
final class HostNameTests: XCTestCase {
    func testANameIsResolvedAndKeptAsTheName() throws {
        let a = try SocketAddress.resolving(host: "LOCALHOST", port: 7400)
        XCTAssertTrue(a.isLoopback)
        XCTAssertEqual(a.port, 7400)
        XCTAssertEqual(a.host, "LOCALHOST", "the name stays (TLS checks the certificate against it)")
        XCTAssertTrue(try SocketAddress.resolving(host: "127.0.0.1", port: 1).isLoopback)
        XCTAssertTrue(SocketAddress(host: "::1", port: 1)!.isLoopback)
        XCTAssertFalse(SocketAddress(host: "192.0.2.1", port: 1)!.isLoopback)
        XCTAssertThrowsError(try SocketAddress.resolving(host: "no-such-host.invalid", port: 1)) { e in
            XCTAssertTrue("\(e)".hasPrefix("cannot resolve no-such-host.invalid"), "\(e)")
        }
    }

    func testNodesNamedByHostNameSyncAndServeTheCLI() throws {
        let cluster = try SyncCluster(count: 2, host: "LOCALHOST")
        XCTAssertTrue(eventually(20, interval: 0.1) { [0, 1].allSatisfy(cluster.verified) },
                      "nodes named LOCALHOST:port never reached each other")
        let nodes = cluster.list([0, 1])
        let set = try runCLI(["set", "k", "v", "--nodes", nodes])
        XCTAssertEqual(set.code, 0, set.err)
        for i in 0..<2 {
            let r = try runCLI(["get", "k", "--server", cluster.name(i)])
            XCTAssertEqual(r.code, 0, r.err)
            XCTAssertEqual(String(decoding: r.out, as: UTF8.self), "v")
        }
        // A client naming the same nodes by address places keys by another ring: the nodes
        // count the writes of keys they do not replicate under their own list.
        let three = try SyncCluster(count: 3, host: "LOCALHOST")
        let other = (0..<3).map { "127.0.0.1:\(three.ports[$0])" }.joined(separator: ",")
        for i in 0..<40 { XCTAssertEqual(try runCLI(["set", "f\(i)", "v", "--nodes", other]).code, 0) }
        let foreign = try (0..<3).reduce(0) { sum, i in sum + ((try nodeStats(three.connect(i))["foreign_writes"] as? Int) ?? 0) }
        XCTAssertGreaterThan(foreign, 0, "writes placed by another spelling of the list are counted")
        let none = try SyncCluster(count: 3, host: "LOCALHOST")
        for i in 0..<40 { XCTAssertEqual(try runCLI(["set", "f\(i)", "v", "--nodes", none.list([0, 1, 2])]).code, 0) }
        XCTAssertEqual(try (0..<3).reduce(0) { sum, i in sum + ((try nodeStats(none.connect(i))["foreign_writes"] as? Int) ?? 0) }, 0,
                       "the nodes' own list: none")

        let bad = try runCLI(["get", "k", "--server", "no-such-host.invalid:7400"])
        XCTAssertEqual(bad.code, 3)
        XCTAssertTrue(bad.err.contains("cannot resolve no-such-host.invalid"), bad.err)
    }
}
