import Foundation
import XCTest
import StrataCache
import StrataCore
import StrataImage
import StrataStore

/// The facade over an embedded store in a temp dir, with a `ManualClock`: expiry is tested by
/// moving the clock, never by sleeping.
final class EmbeddedCacheTests: XCTestCase {
    var dir: TempDir!
    var clock: ManualClock!
    var cache: StrataCache!

    override func setUpWithError() throws {
        dir = TempDir()
        clock = ManualClock(micros: Int64(Date().timeIntervalSince1970 * 1e6))
        cache = try StrataCache(.embedded(StoreConfiguration(directory: dir.path), clock: clock))
    }

    override func tearDown() {
        cache?.close()
        cache = nil
        dir = nil
    }

    func testCodableRoundTrip() async throws { try await SharedChecks.codableRoundTrip(cache) }
    func testStringDataAndBytesAreStoredAsTheirBytes() async throws { try await SharedChecks.plainValuesAreTheirBytes(cache) }
    func testItemCarriesVersionExpiryFlagsExtendedAndTier() async throws {
        try await SharedChecks.itemCarriesMetadata(cache)
        let item = try await cache.item("meta", as: String.self)
        XCTAssertEqual(item?.tier, .memory)
    }
    func testConditionalWritesCountersAndErrorsMapToCacheError() async throws { try await SharedChecks.conditionalWritesAndErrors(cache) }
    func testNamespacesAreIsolatedAndRemoveAllEmptiesOnlyOne() async throws { try await SharedChecks.namespacesAreIsolated(cache) }
    func testNamespaceStats() async throws { try await SharedChecks.namespaceStats(cache) }
    func testReadThroughLoadsOnceFor100Tasks() async throws { try await SharedChecks.readThroughLoadsOnce(cache) }
    func testALoaderReadingItsOwnKeyIsRefused() async throws { try await SharedChecks.loaderReadingItsOwnKeyIsRefused(cache) }
    func testLoaderErrorReachesTheCallerWithItsOwnError() async throws { try await SharedChecks.loaderErrorsReachTheCaller(cache) }
    func testCancellationEndsTheWait() async throws { try await SharedChecks.cancellationEndsTheWait(cache) }
    func testInvalidatedValueIsServedStaleUntilRefreshed() async throws { try await SharedChecks.invalidateThenRefresh(cache) }
    func testConcurrentUseFrom100Tasks() async throws { try await SharedChecks.concurrentUseFrom100Tasks(cache) }

    func testDurationExpiryFollowsTheInjectedClock() async throws {
        try await cache.set("short", "x", ttl: .seconds(30))
        try await cache.set("sub-second", "y", ttl: .milliseconds(1500))
        try await cache.set("dated", "z", expiry: .at(Date(timeIntervalSince1970: Double(clock.nowMicros()) / 1e6 + 60)))
        let item = try await cache.item("short", as: String.self)
        XCTAssertEqual(item?.expiresAt?.timeIntervalSince1970 ?? 0, Double(clock.nowMicros()) / 1e6 + 30, accuracy: 0.001)
        clock.advance(seconds: 1.4)
        let sub = try await cache.get("sub-second", as: String.self)
        XCTAssertEqual(sub, "y")
        clock.advance(seconds: 0.2)
        let subGone = try await cache.get("sub-second", as: String.self)
        XCTAssertNil(subGone)
        clock.advance(seconds: 28)
        let still = try await cache.get("short", as: String.self)
        XCTAssertEqual(still, "x")
        clock.advance(seconds: 1)
        let gone = try await cache.get("short", as: String.self)
        XCTAssertNil(gone)
        let dated = try await cache.get("dated", as: String.self)
        XCTAssertEqual(dated, "z")
        clock.advance(seconds: 30)
        let datedGone = try await cache.get("dated", as: String.self)
        XCTAssertNil(datedGone)
        // touch moves the expiry.
        try await cache.set("touched", "t", ttl: .seconds(10))
        let touched = try await cache.touch("touched", expiry: .after(.seconds(100)))
        XCTAssertTrue(touched)
        clock.advance(seconds: 50)
        let alive = try await cache.get("touched", as: String.self)
        XCTAssertEqual(alive, "t")
    }

    func testReadThroughTTLAndNegativeEntriesFollowTheClock() async throws {
        let calls = CallCounter()
        let v1 = try await cache.value(for: "cfg", ttl: .seconds(60)) { await calls.increment(); return 1 }
        clock.advance(seconds: 59)
        let v2 = try await cache.value(for: "cfg", ttl: .seconds(60)) { await calls.increment(); return 2 }
        clock.advance(seconds: 2)
        let v3 = try await cache.value(for: "cfg", ttl: .seconds(60)) { await calls.increment(); return 3 }
        XCTAssertEqual([v1, v2, v3], [1, 1, 3])
        // A failure remembered for 10 s: no loader runs until it expires.
        let options = ReadThroughOptions(negativeTTL: .seconds(10))
        await assertCacheError(.loadFailed) {
            try await self.cache.value(for: "flaky", options: options) { () async throws -> Int in throw LoaderBroke(reason: "down") }
        }
        await assertCacheError(.loadFailed, status: .negative) {
            try await self.cache.value(for: "flaky", options: options) { () async throws -> Int in await calls.increment(); return 9 }
        }
        let flakyRead = try await cache.get("flaky", as: String.self)
        XCTAssertNil(flakyRead, "a remembered failure reads as a miss")
        clock.advance(seconds: 11)
        let recovered = try await cache.value(for: "flaky", options: options) { () async throws -> Int in await calls.increment(); return 9 }
        XCTAssertEqual(recovered, 9)
        let n = await calls.count
        XCTAssertEqual(n, 3)
    }

    func testWriteOptionsTiersAndWriteBehind() async throws {
        try await cache.set("mem", "m", options: WriteOptions(tiers: .memory))
        try await cache.set("wb", "w", options: WriteOptions(writeBehind: true))
        let m = try await cache.item("mem", as: String.self)
        XCTAssertEqual(m?.tier, .memory)
        let w = try await cache.get("wb", as: String.self)
        XCTAssertEqual(w, "w")
        // A memory-only item is not on disk: the namespace's disk count leaves it out.
        let s = try await cache.stats()
        XCTAssertEqual(s.items, 1)
    }

    func testValueOverTheStoreLimitIsTooLarge() async throws {
        cache.close()
        var config = StoreConfiguration(directory: dir.path)
        config.maxItemBytes = 1000
        cache = try StrataCache(.embedded(config, clock: clock))
        await assertCacheError(.tooLarge, status: .tooLarge) { try await self.cache.set("big", [UInt8](repeating: 1, count: 2000)) }
    }

    func testClosedCacheFailsWithClosed() async throws {
        cache.close()
        await assertCacheError(.closed, status: .shuttingDown) { try await self.cache.get("k", as: String.self) }
    }

    func testImageFactsAndVariants() async throws {
        let rgba = [UInt8](repeating: 200, count: 40 * 30 * 4)
        let png = try XCTUnwrap(ImageCodec.encodePNG(rgba: rgba, width: 40, height: 30))
        try await cache.set("photo", png)
        let image = try await cache.image("photo")
        let facts = try XCTUnwrap(image?.facts)
        XCTAssertEqual(facts.format, .png)
        XCTAssertEqual(facts.width, 40)
        XCTAssertEqual(facts.height, 30)
        XCTAssertEqual(facts.byteCount, png.count)
        let photo = try XCTUnwrap(image)
        let v = try await photo.variant(width: 20, height: 20)
        XCTAssertEqual(v.width, 20)
        XCTAssertEqual(v.height, 15)
        XCTAssertEqual(v.format, .webp)
        XCTAssertEqual(Array(v.bytes.prefix(4)), Array("RIFF".utf8))
        let p = try await photo.variant(width: 10, height: 10, fit: .cover, format: .png)
        XCTAssertEqual([p.width, p.height], [10, 10])
        XCTAssertEqual(ImageSniffer.sniff(p.bytes), .png)
        let none = try await cache.image("no-photo")
        XCTAssertNil(none)
        try await cache.set("text", "not an image")
        await assertCacheError(.invalidImage, status: .invalidImage) { try await self.cache.image("text") }
        await assertCacheError(.invalidArgument) { try await photo.variant(width: 0, height: 10) }
        try await cache.remove("photo")
        await assertCacheError(.notFound, status: .notFound) { try await photo.variant(width: 20, height: 20) }
    }

    func testUsableFromAnActor() async throws {
        let service = ProfileService(cache: cache)
        let p = try await service.profile(3)
        XCTAssertEqual(p.name, "p3")
        let direct = try await cache.namespace("service").get("p3", as: Profile.self)
        XCTAssertEqual(direct, p)
    }

    func testAStoreOpenedByTheCallerIsNotClosedByTheCache() async throws {
        cache.close()
        let store = try TieredCache(configuration: StoreConfiguration(directory: dir.path), clock: clock)
        let shared = try StrataCache(.store(store))
        try await shared.set("k", "v")
        shared.close()
        let got = try await store.get(Array("k".utf8))
        XCTAssertEqual(got?.value, Array("v".utf8))
        store.close()
    }

    /// The example's one-line switch: the same program against an embedded store.
    func testExampleRunsEmbedded() throws {
        let exe = try XCTUnwrap(builtExecutable("strata-example"), "strata-example is not built")
        let exampleDir = TempDir()
        let (status, text) = try runProcess(exe, [], environment: ["STRATA_EXAMPLE_DIR": exampleDir.path])
        XCTAssertEqual(status, 0, text)
        XCTAssertTrue(text.contains("round 2 (warm): 800 hits, 0 loads, hit ratio 100.0 %"), text)
    }

    /// The coder is injectable: any `Codable` goes through it; bytes, strings and Data never do.
    func testAnInjectedCoderIsUsedForCodableValuesOnly() async throws {
        cache.close()
        let store = try TieredCache(configuration: StoreConfiguration(directory: dir.path), clock: clock)
        defer { store.close() }
        let custom = try StrataCache(.store(store), coder: VersionedCoder())
        let p = Profile(id: 1, name: "n", tags: [], score: nil, nested: [:])
        try await custom.set("p", p)
        try await custom.set("s", "plain")
        let rawP = try await custom.get("p", as: [UInt8].self)
        XCTAssertEqual(Array(rawP?.prefix(3) ?? []), Array("v1:".utf8))
        let back = try await custom.get("p", as: Profile.self)
        XCTAssertEqual(back, p)
        let rawS = try await custom.get("s", as: [UInt8].self)
        XCTAssertEqual(rawS, Array("plain".utf8))
        // The default coder cannot read the custom format: a decoding error, not a crash.
        let plain = try StrataCache(.store(store))
        await assertCacheError(.decoding) { try await plain.get("p", as: Profile.self) }
        // Snake-case keys through JSONCacheCoder's encoder factory.
        let snake = try StrataCache(.store(store), coder: JSONCacheCoder(encoder: {
            let e = JSONEncoder(); e.keyEncodingStrategy = .convertToSnakeCase; return e
        }, decoder: {
            let d = JSONDecoder(); d.keyDecodingStrategy = .convertFromSnakeCase; return d
        }))
        struct Account: Codable, Equatable { var accountId: Int; var displayName: String }
        try await snake.set("acct", Account(accountId: 3, displayName: "x"))
        let text = try await snake.get("acct", as: String.self)
        XCTAssertTrue(text?.contains("display_name") ?? false, text ?? "nil")
        let acct = try await snake.get("acct", as: Account.self)
        XCTAssertEqual(acct, Account(accountId: 3, displayName: "x"))
    }
}

/// A coder that tags its JSON with a format version.
struct VersionedCoder: CacheCoder {
    func encode<T: Encodable>(_ value: T) throws -> [UInt8] { Array("v1:".utf8) + [UInt8](try JSONEncoder().encode(value)) }
    func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        guard bytes.starts(with: Array("v1:".utf8)) else { throw CocoaError(.coderReadCorrupt) }
        return try JSONDecoder().decode(type, from: Data(bytes.dropFirst(3)))
    }
}
