import Foundation
import XCTest
import StrataCache
import StrataClient
import StrataCore
import StrataImage

/// The facade against one real node (`strata serve` on 127.0.0.1), as a one-node cluster.
final class NodeCacheTests: XCTestCase {
    var node: TestNode!
    var cache: StrataCache!

    override func setUpWithError() throws {
        node = try TestNode(extra: ["--max-item", "64KiB"])
        cache = try StrataCache(.nodes([node.address]))
    }

    override func tearDown() {
        cache = nil
        node?.stop()
        node = nil
    }

    func testCodableRoundTrip() async throws { try await SharedChecks.codableRoundTrip(cache) }
    func testStringDataAndBytesAreStoredAsTheirBytes() async throws { try await SharedChecks.plainValuesAreTheirBytes(cache) }
    func testItemCarriesVersionExpiryFlagsAndExtended() async throws { try await SharedChecks.itemCarriesMetadata(cache) }
    func testConditionalWritesCountersAndErrorsMapToCacheError() async throws { try await SharedChecks.conditionalWritesAndErrors(cache) }
    func testNamespacesAreIsolatedAndRemoveAllEmptiesOnlyOne() async throws { try await SharedChecks.namespacesAreIsolated(cache) }
    func testNamespaceStats() async throws { try await SharedChecks.namespaceStats(cache) }
    func testReadThroughLoadsOnceFor100Tasks() async throws { try await SharedChecks.readThroughLoadsOnce(cache) }
    func testALoaderReadingItsOwnKeyIsRefused() async throws { try await SharedChecks.loaderReadingItsOwnKeyIsRefused(cache) }
    func testLoaderErrorReachesTheCallerWithItsOwnError() async throws { try await SharedChecks.loaderErrorsReachTheCaller(cache) }
    func testCancellationEndsTheWait() async throws { try await SharedChecks.cancellationEndsTheWait(cache) }
    func testInvalidatedValueIsServedStaleUntilRefreshed() async throws { try await SharedChecks.invalidateThenRefresh(cache) }
    func testConcurrentUseFrom100Tasks() async throws { try await SharedChecks.concurrentUseFrom100Tasks(cache) }

    func testUsableFromAnActor() async throws {
        let p = try await ProfileService(cache: cache).profile(5)
        XCTAssertEqual(p.id, 5)
    }

    func testNodeStatusesMapIntoCacheError() async throws {
        // The node's own limit (--max-item 64KiB): TOO_LARGE from the node itself.
        await assertCacheError(.tooLarge, status: .tooLarge) { try await self.cache.set("big", [UInt8](repeating: 1, count: 100_000)) }
        // Options a cluster cannot honour are refused before anything is sent.
        await assertCacheError(.unsupported) { try await self.cache.set("k", "v", options: WriteOptions(tiers: .memory)) }
        let absent = try await cache.get("k", as: String.self)
        XCTAssertNil(absent)
        // Write-behind reaches the nodes (answered before their logs have it) and reads back.
        try await cache.set("wb", "w", options: WriteOptions(writeBehind: true))
        let wb = try await cache.get("wb", as: String.self)
        XCTAssertEqual(wb, "w")
    }

    func testNoNodeIsUnavailableWithoutStatus() async throws {
        node.stop()
        do {
            _ = try await cache.get("k", as: String.self)
            XCTFail("no error")
        } catch let e as CacheError {
            XCTAssertEqual(e.code, .unavailable, "\(e)")
            XCTAssertNil(e.status)
        }
        await assertCacheError(.invalidArgument) { try StrataCache(.nodes(["not-an-address"])) }
    }

    func testSubSecondAndDatedExpiry() async throws {
        try await cache.set("brief", "x", ttl: .milliseconds(300))
        try await cache.set("past", "y", expiry: .at(Date().addingTimeInterval(-5)))
        let past = try await cache.get("past", as: String.self)
        XCTAssertNil(past)
        let deadline = Date().addingTimeInterval(5)
        var gone = false
        while Date() < deadline {
            if try await cache.get("brief", as: String.self) == nil { gone = true; break }
            try await Task.sleep(for: .milliseconds(50))
        }
        XCTAssertTrue(gone, "a 300 ms TTL did not expire within 5 s")
    }

    func testImageFactsAndVariantsFromTheNode() async throws {
        let rgba = [UInt8](repeating: 90, count: 64 * 48 * 4)
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: 64, height: 48))
        try await cache.set("photo", png)
        let image = try await cache.image("photo")
        let photo = try XCTUnwrap(image)
        XCTAssertEqual(photo.facts.format, .png)
        XCTAssertEqual([photo.facts.width, photo.facts.height], [64, 48])
        XCTAssertEqual(photo.facts.byteCount, png.count)
        let first = try await photo.variant(width: 32, height: 32)
        XCTAssertEqual([first.width, first.height], [32, 24])
        XCTAssertFalse(first.cached)
        let second = try await photo.variant(width: 32, height: 32)
        XCTAssertTrue(second.cached)
        XCTAssertEqual(second.bytes, first.bytes)
        let asPNG = try await photo.variant(width: 16, height: 16, fit: .cover, format: .png)
        XCTAssertEqual([asPNG.width, asPNG.height], [16, 16])
        XCTAssertEqual(ImageSniffer.sniff(asPNG.bytes), .png)
        try await cache.set("text", "not an image")
        await assertCacheError(.invalidImage, status: .invalidImage) { try await self.cache.image("text") }
        let none = try await cache.image("nothing")
        XCTAssertNil(none)
        try await cache.remove("photo")
        await assertCacheError(.notFound, status: .notFound) { try await photo.variant(width: 32, height: 32) }
    }

    /// The example service runs against this node and exits 0.
    func testExampleRunsAgainstANode() throws {
        let exe = try XCTUnwrap(builtExecutable("strata-example"), "strata-example is not built")
        let (status, text) = try runProcess(exe, [], environment: ["STRATA_SERVER": node.address])
        XCTAssertEqual(status, 0, text)
        XCTAssertTrue(text.contains("round 2 (warm): 800 hits, 0 loads, hit ratio 100.0 %"), text)
        XCTAssertTrue(text.contains("slow loader ran 40 times"), text)
    }
}
