import XCTest
import StrataCore
@testable import StrataStore

/// Memory-tier compression (`StoreConfiguration.memoryCompression`): a namespace's dictionary
/// is trained from its first values, later values are held compressed, and no reader sees a
/// compressed byte.
final class MemoryCompressionTests: XCTestCase {
    /// JSON documents of one API's shape (as bench/zstd-json.c): similar structure, varying fields.
    static func document(_ i: Int, _ rng: inout SplitMix) -> [UInt8] {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
                     "kilo", "lima", "mike", "november", "oscar", "papa"]
        var items: [String] = []
        for _ in 0..<Int(1 + rng.next() % 3) {
            items.append("{\"sku\":\"\(words[Int(rng.next() % 16)])-\(rng.next() % 1000)\",\"qty\":\(rng.next() % 9 + 1),\"price\":\(rng.next() % 10_000)}")
        }
        let s = "{\"id\":\(100_000 + i),\"email\":\"user\(rng.next() % 100_000)@example.com\",\"created\":\"2026-11-\(10 + rng.next() % 20)T\(10 + rng.next() % 14):\(10 + rng.next() % 50):00Z\",\"status\":\"\(words[Int(rng.next() % 4)])\",\"items\":[\(items.joined(separator: ","))]}"
        return Array(s.utf8)
    }

    func compressing(_ tweak: (inout StoreConfiguration) -> Void = { _ in }) throws -> StoreFixture {
        try StoreFixture {
            $0.memoryCompression = { $0 == Array("json".utf8) || $0.starts(with: Array("t-".utf8)) }
            $0.memoryCompressionSamples = 200
            tweak(&$0)
        }
    }

    func waitForDictionaries(_ f: StoreFixture, _ n: Int) throws {
        let until = Date().addingTimeInterval(20)
        while f.store.stats().memoryDictionaries < n && Date() < until { usleep(5_000) }
        XCTAssertEqual(f.store.stats().memoryDictionaries, n, "the dictionary was trained")
    }

    func memoryHit(_ f: StoreFixture, _ key: [UInt8], ns: [UInt8]) -> [UInt8]? {
        var memo = NamespaceMemo()
        var value: [UInt8]?
        _ = ns.withUnsafeBytes { n in
            key.withUnsafeBytes { k in
                f.store.withMemoryHit(namespace: n, key: k, now: f.store.clock.nowMicros(), memo: &memo) { value = [UInt8]($0.value) }
            }
        }
        return value
    }

    /// After the first values train the dictionary, later ones are held compressed; every read
    /// — a get from memory, the in-place hit, metadata, a disk read — sees the bytes written.
    func testValuesAfterTrainingAreHeldCompressedAndReadBackExactly() throws {
        let f = try compressing()
        let ns = Array("json".utf8)
        var rng = SplitMix(seed: 7)
        var written: [[UInt8]] = []
        for i in 0..<400 {
            let v = Self.document(i, &rng)
            written.append(v)
            _ = try f.store.set(Array("k\(i)".utf8), v, namespace: ns, options: SetOptions(flags: UInt32(i)))
            if i == 199 { try waitForDictionaries(f, 1) }
        }
        let s = f.store.stats()
        XCTAssertGreaterThanOrEqual(s.memoryCompressedItems, 150, "values written after training are compressed")
        XCTAssertLessThanOrEqual(s.memoryCompressedItems, 200, "values before training stay as written")
        XCTAssertEqual(s.memoryCompressedWrites, s.memoryCompressedItems)
        XCTAssertGreaterThan(s.memoryDictionaryBytes, 0)
        for (i, v) in written.enumerated() {
            let key = Array("k\(i)".utf8)
            let m = try XCTUnwrap(f.store.get(key, namespace: ns, tiers: .memory), "k\(i)")
            XCTAssertEqual(m.value, v, "k\(i)")
            XCTAssertEqual(m.flags, UInt32(i))
            XCTAssertEqual(memoryHit(f, key, ns: ns), v, "k\(i) in place")
            XCTAssertEqual(try f.store.metadata(key, namespace: ns, tiers: .memory)?.size, v.count, "the real size")
        }
        try f.store.sync()
        XCTAssertEqual(try f.store.get(Array("k399".utf8), namespace: ns, tiers: .disk)?.value, written[399],
                       "the disk tier holds the value as written")
    }

    /// The point of it: the same memory limit holds about twice the items or more.
    func testTheSameLimitHoldsMoreItems() throws {
        func held(_ compress: Bool) throws -> Int {
            let f = try StoreFixture {
                $0.memoryCostLimit = 1 << 20
                $0.memoryShards = 1
                $0.memoryCompressionSamples = 200
                if compress { $0.memoryCompression = { _ in true } }
            }
            var rng = SplitMix(seed: 3)
            for i in 0..<200 { _ = try f.store.set(Array("warm\(i)".utf8), Self.document(i, &rng), options: SetOptions(tiers: .memory)) }
            if compress { try waitForDictionaries(f, 1) }
            for i in 0..<30_000 { _ = try f.store.set(Array("k\(i)".utf8), Self.document(i, &rng), options: SetOptions(tiers: .memory)) }
            return f.store.stats().memory.items
        }
        let plain = try held(false), compressed = try held(true)
        print("FIGURE memory compression: 1 MiB holds \(plain) documents as written, \(compressed) compressed (\(String(format: "%.2f", Double(compressed) / Double(plain))) ×)")
        XCTAssertGreaterThan(Double(compressed), 1.6 * Double(plain))
    }

    /// Incompressible values, values under 32 bytes, and namespaces not named stay as written;
    /// a memory-only write that derives its value from the item held (a counter) compresses
    /// the result; a flush keeps the namespace's dictionary.
    func testOnlyNamedNamespacesAndValuesThatShrinkAreCompressed() throws {
        let f = try compressing()
        var rng = SplitMix(seed: 11)
        for i in 0..<200 { _ = try f.store.set(Array("w\(i)".utf8), Self.document(i, &rng), namespace: Array("t-a".utf8)) }
        try waitForDictionaries(f, 1)
        let before = f.store.stats().memoryCompressedItems
        let noise = (0..<2000).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        _ = try f.store.set(Array("noise".utf8), noise, namespace: Array("t-a".utf8))
        _ = try f.store.set(Array("tiny".utf8), Array("{\"id\":1}".utf8), namespace: Array("t-a".utf8))
        for i in 0..<300 { _ = try f.store.set(Array("o\(i)".utf8), Self.document(i, &rng), namespace: Array("other".utf8)) }
        XCTAssertEqual(f.store.stats().memoryCompressedItems, before, "nothing of these was compressed")
        XCTAssertEqual(f.store.stats().memoryDictionaries, 1, "no dictionary for a namespace not named")
        XCTAssertEqual(try f.store.get(Array("noise".utf8), namespace: Array("t-a".utf8))?.value, noise)

        let doc = Self.document(999, &rng)
        _ = try f.store.set(Array("doc".utf8), doc, namespace: Array("t-a".utf8), options: SetOptions(tiers: .memory))
        XCTAssertEqual(f.store.stats().memoryCompressedItems, before + 1)
        // A touch rewrites the item held (expanded, then compressed again).
        _ = try f.store.touch(Array("doc".utf8), namespace: Array("t-a".utf8), expiry: .seconds(100), tiers: .memory)
        XCTAssertEqual(try f.store.get(Array("doc".utf8), namespace: Array("t-a".utf8), tiers: .memory)?.value, doc)
        XCTAssertEqual(f.store.stats().memoryCompressedItems, before + 1)

        try f.store.flush(namespace: Array("t-a".utf8))
        _ = try f.store.set(Array("doc".utf8), doc, namespace: Array("t-a".utf8), options: SetOptions(tiers: .memory))
        XCTAssertEqual(try f.store.get(Array("doc".utf8), namespace: Array("t-a".utf8), tiers: .memory)?.value, doc)
        XCTAssertEqual(f.store.stats().memoryDictionaries, 1, "the flushed namespace kept its dictionary")
    }

    /// A namespace whose samples teach nothing (all the same bytes) keeps its values as written.
    func testSamplesThatTeachNothingLeaveTheNamespaceUncompressed() throws {
        let f = try compressing()
        let same = [UInt8](repeating: UInt8(ascii: "x"), count: 100)
        for i in 0..<250 { _ = try f.store.set(Array("s\(i)".utf8), same, namespace: Array("json".utf8)) }
        let until = Date().addingTimeInterval(20)
        let s0 = f.store.stats()
        var s = s0
        while s.memoryDictionaries + s.memoryDictionaryFailures == 0 && Date() < until { usleep(5_000); s = f.store.stats() }
        for i in 0..<250 { XCTAssertEqual(try f.store.get(Array("s\(i)".utf8), namespace: Array("json".utf8))?.value, same) }
        // Whatever zstd made of it, every value reads back as written.
        XCTAssertEqual(s.memoryDictionaries + s.memoryDictionaryFailures, 1, "the training ended one way or the other")
    }

    /// A promotion from the disk tier is compressed too.
    func testAPromotedDiskHitIsHeldCompressed() throws {
        let f = try compressing()
        var rng = SplitMix(seed: 5)
        for i in 0..<200 { _ = try f.store.set(Array("w\(i)".utf8), Self.document(i, &rng), namespace: Array("json".utf8)) }
        try waitForDictionaries(f, 1)
        let doc = Self.document(1_000, &rng)
        _ = try f.store.set(Array("d".utf8), doc, namespace: Array("json".utf8), options: SetOptions(tiers: .disk))
        let before = f.store.stats().memoryCompressedItems
        XCTAssertEqual(try f.store.get(Array("d".utf8), namespace: Array("json".utf8))?.value, doc) // from disk, promoted
        XCTAssertEqual(f.store.stats().memoryCompressedItems, before + 1)
        XCTAssertEqual(memoryHit(f, Array("d".utf8), ns: Array("json".utf8)), doc)
    }
}

/// `StoreConfiguration.maxNamespaces`: a write to a new namespace past the bound stores nothing
/// and says why; known namespaces keep working (outside review sec2: 1,000,000 namespaces from
/// one tenant cost ~500 MiB outside the memory limit).
final class NamespaceCountBoundTests: XCTestCase {
    func testAWriteToANewNamespacePastTheBoundIsRefused() throws {
        let f = try StoreFixture { $0.maxNamespaces = 3 }
        for ns in ["a", "b", "c"] { _ = try f.store.set(Array("k".utf8), Array("v".utf8), namespace: Array(ns.utf8)) }
        XCTAssertThrowsError(try f.store.set(Array("k".utf8), Array("v".utf8), namespace: Array("d".utf8))) {
            XCTAssertEqual(($0 as? StoreError)?.code, .tooManyNamespaces)
            XCTAssertTrue("\($0)".contains("--max-namespaces"), "\($0)")
        }
        XCTAssertNil(try f.store.get(Array("k".utf8), namespace: Array("d".utf8)))
        XCTAssertEqual(f.store.namespaceCounters().count, 3, "nothing recorded for it")
        _ = try f.store.set(Array("k2".utf8), Array("v".utf8), namespace: Array("a".utf8))
        XCTAssertEqual(try f.store.get(Array("k2".utf8), namespace: Array("a".utf8))?.value, Array("v".utf8))
        // The loop's asynchronous sets take the same bound.
        XCTAssertThrowsError(try f.store.submitSet(Array("k".utf8), Array("v".utf8), namespace: Array("e".utf8), options: SetOptions()) { _ in })
        XCTAssertNil(try f.store.get(Array("k".utf8), namespace: Array("e".utf8)))
    }

    /// Outside review dur3 F2: a namespace with nothing left on disk — flushed and swept, or
    /// every item deleted — no longer counts after a restart (README: known "until the node
    /// restarts without it on disk"); one that still holds rows does.
    func testANamespaceWithNothingOnDiskIsForgottenAtTheNextStart() throws {
        let f = try StoreFixture { $0.maxNamespaces = 3; $0.maintenanceInterval = 0.05 }
        for ns in ["a", "b", "c"] { _ = try f.store.set(Array("k".utf8), Array("v".utf8), namespace: Array(ns.utf8), options: SetOptions(tiers: .disk)) }
        try f.store.flush(namespace: Array("a".utf8))
        _ = try f.store.remove(Array("k".utf8), namespace: Array("b".utf8))
        // The sweep collects a's flushed row; b's went with its delete.
        let until = Date().addingTimeInterval(20)
        while f.store.stats().disk.items != 1 && Date() < until { usleep(20_000) }
        XCTAssertEqual(f.store.stats().disk.items, 1)
        XCTAssertThrowsError(try f.store.set(Array("k".utf8), Array("v".utf8), namespace: Array("d".utf8)), "still known until a restart")
        try f.reopen()
        XCTAssertEqual(Set(f.store.namespaceNames()), [Array("c".utf8)])
        for ns in ["d", "e"] { _ = try f.store.set(Array("k".utf8), Array("v".utf8), namespace: Array(ns.utf8)) }
        XCTAssertEqual(try f.store.get(Array("k".utf8), namespace: Array("c".utf8))?.value, Array("v".utf8))
        XCTAssertThrowsError(try f.store.set(Array("k".utf8), Array("v".utf8), namespace: Array("f".utf8)))
    }
}

/// Outside review op3: with a pattern, every new namespace kept its samples (up to 128 KiB)
/// forever, trainings refused while another ran were lost, and a pattern's namespaces could
/// take every dictionary from one named exactly.
final class MemoryCompressionBoundTests: XCTestCase {
    func fixture(exact: [String] = []) throws -> StoreFixture {
        try StoreFixture {
            $0.memoryCompression = { $0.starts(with: Array("t-".utf8)) || $0 == Array("named".utf8) }
            $0.memoryCompressionExact = Set(exact.map { Array($0.utf8) })
            $0.memoryCompressionSamples = 100
        }
    }

    func waitForDictionaries(_ f: StoreFixture, _ n: Int) {
        let until = Date().addingTimeInterval(60)
        while f.store.stats().memoryDictionaries < n && Date() < until { usleep(5_000) }
    }

    /// At most 8 namespaces hold samples at once; many filling together all get trained.
    func testCollectorsAreBoundedAndEveryNamespaceIsTrainedInTurn() throws {
        let f = try fixture()
        let mc = try XCTUnwrap(f.store.memory.compression)
        var rng = SplitMix(seed: 9)
        for round in 0..<160 {
            for n in 0..<20 {
                _ = try f.store.set(Array("k\(round)".utf8), MemoryCompressionTests.document(round, &rng), namespace: Array("t-\(n)".utf8),
                                    options: SetOptions(tiers: .memory))
            }
            XCTAssertLessThanOrEqual(mc.collecting, MemoryCompression.maxCollectors)
        }
        // Namespaces 0–7 filled first; the rest took the freed slots on later writes.
        for round in 160..<700 where f.store.stats().memoryDictionaries + mc.collecting < 20 {
            for n in 0..<20 {
                _ = try f.store.set(Array("k\(round)".utf8), MemoryCompressionTests.document(round, &rng), namespace: Array("t-\(n)".utf8),
                                    options: SetOptions(tiers: .memory))
            }
        }
        waitForDictionaries(f, 20)
        XCTAssertEqual(f.store.stats().memoryDictionaries, 20, "every namespace trained, none lost to a busy trainer")
        XCTAssertEqual(mc.collecting, 0)
    }

    /// A collector that does not fill within a minute gives its slot up (or trains on what it
    /// has): a few values in many namespaces hold no memory for good.
    func testASlowCollectorGivesItsSlotUp() throws {
        let f = try fixture()
        let mc = try XCTUnwrap(f.store.memory.compression)
        var rng = SplitMix(seed: 4)
        for n in 0..<30 {
            for i in 0..<5 { _ = try f.store.set(Array("k\(i)".utf8), MemoryCompressionTests.document(i, &rng), namespace: Array("t-\(n)".utf8)) }
        }
        XCTAssertEqual(mc.collecting, MemoryCompression.maxCollectors, "8 hold samples; 22 wait")
        f.clock.advance(seconds: Double(MemoryCompression.collectSeconds + 1))
        // The 8 stopped writing: a namespace that wants a slot drops them (their samples with
        // them), not only their own next write (an outside check: 8 idle namespaces turned
        // compression off for the whole node).
        _ = try f.store.set(Array("k".utf8), MemoryCompressionTests.document(1, &rng), namespace: Array("t-29".utf8))
        XCTAssertEqual(mc.collecting, 1, "the stale collectors gave their slots up; another namespace collects")
        _ = try f.store.set(Array("late".utf8), MemoryCompressionTests.document(0, &rng), namespace: Array("t-0".utf8))
        XCTAssertEqual(mc.collecting, 2, "a dropped namespace may collect again")
    }

    /// Past the 64 dictionaries of pattern-matched namespaces, a namespace named exactly still
    /// gets its own.
    func testANamespaceNamedExactlyIsNotCrowdedOutByAPattern() throws {
        let f = try fixture(exact: ["named"])
        var rng = SplitMix(seed: 2)
        for batch in 0..<9 {
            for i in 0..<100 {
                for n in (batch * 8)..<min(72, batch * 8 + 8) {
                    _ = try f.store.set(Array("k\(i)".utf8), MemoryCompressionTests.document(i, &rng), namespace: Array("t-\(n)".utf8),
                                        options: SetOptions(tiers: .memory))
                }
            }
        }
        waitForDictionaries(f, MemoryCompression.maxDictionaries)
        XCTAssertEqual(f.store.stats().memoryDictionaries, MemoryCompression.maxDictionaries, "the pattern's share is full")
        for i in 0..<100 {
            _ = try f.store.set(Array("k\(i)".utf8), MemoryCompressionTests.document(i, &rng), namespace: Array("named".utf8), options: SetOptions(tiers: .memory))
        }
        waitForDictionaries(f, MemoryCompression.maxDictionaries + 1)
        XCTAssertEqual(f.store.stats().memoryDictionaries, MemoryCompression.maxDictionaries + 1, "the named namespace got its own")
        XCTAssertTrue(f.log.all.contains { $0.contains("event=memory_dictionary_trained namespace=\"named\"") }, "training is logged")
    }
}
