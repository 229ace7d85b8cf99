import XCTest
import StrataCore
@testable import StrataStore

/// `TieredCache.withMemoryHit` with and without the hash its prefetch took.
final class MemoryHitTests: XCTestCase {
    func hit(_ f: StoreFixture, _ key: String, ns: String = "n", memo: inout NamespaceMemo,
             prefetched: MemoryPrefetch? = nil) -> [UInt8]? {
        var value: [UInt8]?
        let found = Array(ns.utf8).withUnsafeBytes { n in
            Array(key.utf8).withUnsafeBytes { k in
                f.store.withMemoryHit(namespace: n, key: k, now: f.store.clock.nowMicros(), memo: &memo, prefetched: prefetched) {
                    value = [UInt8]($0.value)
                }
            }
        }
        XCTAssertEqual(found, value != nil)
        return value
    }

    func prefetch(_ f: StoreFixture, _ key: String, ns: String = "n", memo: inout NamespaceMemo) -> MemoryPrefetch? {
        Array(ns.utf8).withUnsafeBytes { n in
            Array(key.utf8).withUnsafeBytes { k in f.store.prefetchMemorySlot(namespace: n, key: k, memo: &memo) }
        }
    }

    /// The prefetch's hash finds the key; another key's prefetch only makes a miss, never
    /// another item; after a flush (a new tag) an old prefetch is not trusted.
    func testAPrefetchIsReusedOnlyForItsKeyAndTag() throws {
        let f = try StoreFixture()
        var memo = NamespaceMemo()
        for k in ["a", "b"] { _ = try f.store.set(Array(k.utf8), Array("value of \(k)".utf8), namespace: Array("n".utf8)) }
        let pa = try XCTUnwrap(prefetch(f, "a", memo: &memo))
        let pb = try XCTUnwrap(prefetch(f, "b", memo: &memo))
        XCTAssertEqual(hit(f, "a", memo: &memo, prefetched: pa), Array("value of a".utf8))
        XCTAssertEqual(hit(f, "a", memo: &memo), Array("value of a".utf8))
        // b's hash for a: a miss (the probe compares the key), and a's item is untouched.
        XCTAssertNil(hit(f, "a", memo: &memo, prefetched: pb))
        XCTAssertEqual(hit(f, "b", memo: &memo, prefetched: pb), Array("value of b".utf8))
        // A flush gives the namespace a new tag: the old prefetch's hash is not used.
        try f.store.flush(namespace: Array("n".utf8))
        XCTAssertNil(hit(f, "a", memo: &memo, prefetched: pa))
        _ = try f.store.set(Array("a".utf8), Array("new a".utf8), namespace: Array("n".utf8))
        XCTAssertEqual(hit(f, "a", memo: &memo, prefetched: pa), Array("new a".utf8))
    }
}
