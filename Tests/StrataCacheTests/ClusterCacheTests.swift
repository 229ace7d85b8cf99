import Foundation
import XCTest
import StrataCache
import StrataClient
import StrataCore

/// The facade against a real cluster: three `strata serve` processes, two copies per key.
final class ClusterCacheTests: XCTestCase {
    var nodes: [TestNode] = []
    var cache: StrataCache!

    override func setUpWithError() throws {
        nodes = try (0..<3).map { _ in try TestNode() }
        cache = try StrataCache(.nodes(nodes.map(\.address)))
    }

    override func tearDown() {
        cache = nil
        for n in nodes { n.stop() }
        nodes = []
    }

    func testCodableRoundTrip() async throws { try await SharedChecks.codableRoundTrip(cache) }
    func testConditionalWritesCountersAndErrorsMapToCacheError() async throws { try await SharedChecks.conditionalWritesAndErrors(cache) }
    func testNamespacesAreIsolatedAndRemoveAllEmptiesOnlyOne() async throws { try await SharedChecks.namespacesAreIsolated(cache) }
    func testReadThroughLoadsOnceFor100Tasks() async throws { try await SharedChecks.readThroughLoadsOnce(cache) }
    func testALoaderReadingItsOwnKeyIsRefused() async throws { try await SharedChecks.loaderReadingItsOwnKeyIsRefused(cache) }
    func testCancellationEndsTheWait() async throws { try await SharedChecks.cancellationEndsTheWait(cache) }
    func testInvalidatedValueIsServedStaleUntilRefreshed() async throws { try await SharedChecks.invalidateThenRefresh(cache) }
    func testConcurrentUseFrom100Tasks() async throws { try await SharedChecks.concurrentUseFrom100Tasks(cache) }

    /// Stats are every node's, summed: items count both copies of each key; reads go to the owner.
    func testNamespaceStatsSumEveryNode() async throws {
        try await SharedChecks.namespaceStats(cache, copies: 2)
        let s = try await cache.namespace("stats-ns").stats()
        XCTAssertEqual(s.byNode.count, 3)
        XCTAssertEqual(s.byNode.values.map(\.items).reduce(0, +), 20)
        XCTAssertTrue(s.unreachable.isEmpty)
    }

    /// removeAll flushes the namespace on every node: no copy survives on a replica that a
    /// read could fail over to.
    func testRemoveAllReachesEveryCopy() async throws {
        let ns = cache.namespace("flush-me")
        for i in 0..<30 { try await ns.set("k\(i)", i) }
        try await ns.removeAll()
        for n in nodes {
            let one = try StrataCache(.nodes([n.address])).namespace("flush-me")
            let s = try await one.stats()
            XCTAssertEqual(s.items, 0, "\(n.address) kept items")
        }
        for i in 0..<30 {
            let v = try await ns.get("k\(i)", as: Int.self)
            XCTAssertNil(v)
        }
    }

    /// With a node down, the facade reads a key from its other copy, and a namespace flush
    /// that cannot reach every node fails as unavailable (the node would keep its copies).
    func testANodeDown() async throws {
        var config = ClusterConfiguration(nodes: nodes.map { NodeAddress.parse($0.address)! })
        config.ack = .one
        config.timeout = 1
        let tolerant = try StrataCache(.cluster(config))
        for i in 0..<20 { try await tolerant.set("k\(i)", "v\(i)") }
        nodes[0].stop()
        for i in 0..<20 {
            let v = try await tolerant.get("k\(i)", as: String.self)
            XCTAssertEqual(v, "v\(i)")
        }
        await assertCacheError(.unavailable) { try await tolerant.removeAll() }
        let s = try await tolerant.stats()
        XCTAssertEqual(s.unreachable, [nodes[0].address])
    }
}
