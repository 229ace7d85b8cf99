import XCTest
@testable import StrataCore

final class XXH64Tests: XCTestCase {
    // Reference values from the canonical implementation (python-xxhash).
    func testMatchesReferenceVectors() {
        XCTAssertEqual(XXH64.hash([]), 0xEF46_DB37_51D8_E999)
        XCTAssertEqual(XXH64.hash(Array("a".utf8)), 0xD24E_C4F1_A98C_6E5B)
        XCTAssertEqual(XXH64.hash(Array("abc".utf8)), 0x44BC_2CF5_AD77_0999)
        XCTAssertEqual(XXH64.hash(Array("Nobody inspects the spammish repetition".utf8)), 0xFBCE_A83C_8A37_8BF1)
        XCTAssertEqual(XXH64.hash((0..<100).map { UInt8($0) }), 0x6AC1_E580_3216_6597)
    }

    func testSeedChangesTheHash() {
        XCTAssertEqual(XXH64.hash([], seed: 42), 0x98B1_582B_0977_E704)
        XCTAssertEqual(XXH64.hash(Array("abc".utf8), seed: 42), 0x13C1_D910_7027_70E6)
        XCTAssertEqual(XXH64.hash((0..<100).map { UInt8($0) }, seed: 42), 0x819D_2B72_6001_D507)
    }
}

final class ClockTests: XCTestCase {
    func testHybridLogicalClockStrictlyIncreasesEvenWhenTimeStandsStill() {
        let clock = ManualClock(micros: 1000)
        let hlc = HybridLogicalClock(clock: clock)
        XCTAssertEqual(hlc.next(), 1000)
        XCTAssertEqual(hlc.next(), 1001)
        XCTAssertEqual(hlc.next(), 1002)
        clock.advance(micros: 10_000)
        XCTAssertEqual(hlc.next(), 11_000)
    }

    func testObservedVersionMovesTheClockPastIt() {
        let clock = ManualClock(micros: 1000)
        let hlc = HybridLogicalClock(clock: clock)
        hlc.observe(50_000)
        XCTAssertEqual(hlc.next(), 50_001)
        hlc.observe(10) // older: no effect
        XCTAssertEqual(hlc.next(), 50_002)
    }

    func testManualClockMovesOnlyWhenTold() {
        let clock = ManualClock(micros: 5)
        XCTAssertEqual(clock.nowMicros(), 5)
        clock.advance(seconds: 2)
        XCTAssertEqual(clock.nowMicros(), 2_000_005)
        XCTAssertEqual(clock.nowSeconds(), 2)
    }
}

final class BytesTests: XCTestCase {
    func testHexRoundTripIgnoresWhitespace() {
        XCTAssertEqual([UInt8](hex: "de ad\nBE ef"), [0xDE, 0xAD, 0xBE, 0xEF])
        XCTAssertEqual([UInt8]([0, 1, 0xAB]).hexString, "0001ab")
        XCTAssertNil([UInt8](hex: "abc"))
        XCTAssertNil([UInt8](hex: "zz"))
    }

    func testByteSizesParseBinaryUnits() {
        XCTAssertEqual(parseByteSize("512"), 512)
        XCTAssertEqual(parseByteSize("64KiB"), 65536)
        XCTAssertEqual(parseByteSize("256MiB"), 256 << 20)
        XCTAssertEqual(parseByteSize("4GiB"), 4 << 30)
        XCTAssertEqual(parseByteSize("10B"), 10)
        XCTAssertEqual(parseByteSize("2TiB"), 2 << 40)
        XCTAssertEqual(parseByteSize("2T"), 2 << 40)
        XCTAssertEqual(parseByteSize("512mib"), 512 << 20, "units in any case")
        XCTAssertEqual(parseByteSize("1g"), 1 << 30)
        XCTAssertNil(parseByteSize("1x"))
        XCTAssertNil(parseByteSize("-1"))
        XCTAssertNil(parseByteSize("MiB"))
        XCTAssertNil(parseByteSize("99999999999999999GiB"))
    }

    func testTiersParseAndPrint() {
        XCTAssertEqual(Tiers(name: "memory"), .memory)
        XCTAssertEqual(Tiers(name: "all"), [.memory, .disk])
        XCTAssertNil(Tiers(name: "cloud"))
        XCTAssertEqual(Tiers.disk.description, "disk")
    }
}

final class BlockingPoolTests: XCTestCase {
    /// Blocked jobs never hold up a new one: 40 jobs wait for the 41st, which must still run.
    func testAJobNeverWaitsBehindBlockedJobs() {
        let pool = BlockingPool(name: "test-pool", idleSeconds: 1)
        let gate = Completion<Bool>()
        let finished = Counter()
        let allDone = Completion<Bool>()
        for _ in 0..<40 {
            pool.run {
                _ = gate.wait()
                finished.add()
                if finished.load() == 40 { allDone.fulfil(true) }
            }
        }
        pool.run { gate.fulfil(true) }
        XCTAssertEqual(allDone.wait(seconds: 10), true, "the releasing job ran although 40 were blocked")
        XCTAssertEqual(finished.load(), 40)
    }
}

final class ItemKeyTests: XCTestCase {
    /// Keys and namespaces that an unpadded-hex or lossy-UTF-8 identity confused.
    func testDifferentBytesAreDifferentKeys() {
        let pairs: [(ItemKey, ItemKey)] = [
            (ItemKey(namespace: [], key: [0x01, 0x23]), ItemKey(namespace: [], key: [0x12, 0x03])),
            (ItemKey(namespace: [0xFF], key: [1]), ItemKey(namespace: [0xFE], key: [1])),
            (ItemKey(namespace: Array("a".utf8), key: Array("bc".utf8)), ItemKey(namespace: Array("ab".utf8), key: Array("c".utf8))),
            (ItemKey(namespace: [], key: [0x00, 0x01]), ItemKey(namespace: [0x00], key: [0x01])),
        ]
        for (a, b) in pairs {
            XCTAssertNotEqual(a, b)
            XCTAssertEqual(Set([a, b]).count, 2, "\(a) and \(b)")
        }
        XCTAssertEqual(ItemKey(namespace: [9], key: [1, 2]), ItemKey(namespace: [9], key: [1, 2]))
    }

    /// Equal keys built from different arrays hash alike (the bulk hash), and a dictionary
    /// finds them; `ByteKey` keeps the same rules for plain byte strings.
    func testEqualKeysHashAlikeAndByteKeysSplitByLength() {
        let a = ItemKey(namespace: Array("ns".utf8), key: Array(repeating: 7, count: 300))
        let b = ItemKey(namespace: Array("n".utf8) + Array("s".utf8), key: [UInt8](repeating: 7, count: 300))
        XCTAssertEqual(a.hashValue, b.hashValue)
        var map: [ItemKey: Int] = [a: 1]
        map[b, default: 0] += 1
        XCTAssertEqual(map.count, 1)
        XCTAssertEqual(map[a], 2)
        XCTAssertEqual(ByteKey([1, 2]).hashValue, ByteKey([1] + [2]).hashValue)
        XCTAssertEqual(Set([ByteKey([]), ByteKey([0]), ByteKey([0, 0]), ByteKey([0])]).count, 3)
    }

    /// A flight for one key must never hand its result to a caller of another key, even when
    /// the two keys' bytes read the same as unpadded hex.
    func testSingleFlightNeverSharesBetweenDifferentKeys() throws {
        let flights = SingleFlight<ItemKey, String>()
        let a = ItemKey(namespace: [], key: [0x01, 0x23]), b = ItemKey(namespace: [], key: [0x12, 0x03])
        let inside = Completion<Void>(), release = Completion<Void>()
        let first = Completion<(String, Bool)>()
        _ = startThread(name: "test-flight") {
            let r = try? flights.run(a) { inside.fulfil(()); _ = release.wait(); return "image of a" }
            first.fulfil((r?.value ?? "failed", r?.shared ?? true))
        }
        _ = inside.wait() // a's computation is in flight
        let other = try flights.run(b) { "image of b" }
        XCTAssertEqual(other.value, "image of b")
        XCTAssertFalse(other.shared)
        release.fulfil(())
        let r = first.wait()
        XCTAssertEqual(r.0, "image of a")
        XCTAssertFalse(r.1)
    }
}

final class SHA256Tests: XCTestCase {
    // FIPS 180-2, Appendix B (one block, two blocks, a million 'a's) and the empty message.
    func testFIPS180Vectors() {
        XCTAssertEqual(SHA256.hex(Array("abc".utf8)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(SHA256.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(SHA256.hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        XCTAssertEqual(SHA256.hex([]), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    func testPaddingBoundaries() {
        // 55, 56 and 64 bytes: the length field fits, spills into a second block, or the
        // message fills a block exactly (values from sha256sum).
        XCTAssertEqual(SHA256.hex([UInt8](repeating: 0x61, count: 55)), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318")
        XCTAssertEqual(SHA256.hex([UInt8](repeating: 0x61, count: 56)), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a")
        XCTAssertEqual(SHA256.hex([UInt8](repeating: 0x61, count: 64)), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb")
    }

    func testConstantTimeEqual() {
        XCTAssertTrue(constantTimeEqual([1, 2, 3], [1, 2, 3]))
        XCTAssertFalse(constantTimeEqual([1, 2, 3], [1, 2, 4]))
        XCTAssertFalse(constantTimeEqual([1, 2], [1, 2, 0]))
        XCTAssertTrue(constantTimeEqual([], []))
    }
}

/// `ByteGate`: a bound on bytes in flight that a wait never passes.
final class ByteGateTests: XCTestCase {
    func testAWaitThatRunsOutGivesUpHoldingNothing() {
        let gate = ByteGate(limit: 100)
        let t0 = monotonicSeconds()
        XCTAssertFalse(gate.acquire(10, mayStart: { _, _ in false }, maxWait: 0.05), "refused for the whole wait")
        XCTAssertGreaterThanOrEqual(monotonicSeconds() - t0, 0.05)
        XCTAssertEqual(gate.inUse, 0)
        XCTAssertTrue(gate.acquire(10, mayStart: { held, alone in
            XCTAssertEqual(held, 10); XCTAssertTrue(alone); return true
        }))
        XCTAssertEqual(gate.inUse, 10)
        // The next is told what the gate would hold with it, and that it would not be alone.
        XCTAssertFalse(gate.acquire(30, mayStart: { held, alone in held <= 35 || alone }, maxWait: 0.05))
        XCTAssertTrue(gate.acquire(20, mayStart: { held, alone in held == 30 && !alone }))
        gate.release(20)
        gate.release(10)
        XCTAssertTrue(gate.acquire(200), "one acquisition over the limit runs alone")
        gate.release(200)
        XCTAssertEqual(gate.inUse, 0)
    }
}

/// `fileIsResident`: a file just written is in the page cache; once the kernel is told to drop
/// its clean pages it is not; a missing file has nothing to read.
final class ResidencyTests: XCTestCase {
    func testAWrittenFileIsResidentAndADroppedOneIsNot() throws {
        let path = NSTemporaryDirectory() + "strata-resident-\(getpid())"
        defer { unlink(path) }
        let fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0o600)
        XCTAssertGreaterThanOrEqual(fd, 0)
        let bytes = [UInt8](repeating: 7, count: 3 << 20)
        XCTAssertEqual(bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }, bytes.count)
        XCTAssertTrue(fileIsResident(path), "just written")
        XCTAssertEqual(fsync(fd), 0)
        XCTAssertEqual(posix_fadvise(fd, 0, 0, Int32(POSIX_FADV_DONTNEED)), 0)
        close(fd)
        XCTAssertFalse(fileIsResident(path), "its clean pages were dropped")
        XCTAssertTrue(fileIsResident(path + "-missing"))
    }
}

/// `SharedRun`: concurrent callers share runs (at most two for any number of them), and every
/// caller's result comes from a run begun after it called.
final class SharedRunTests: XCTestCase {
    func testConcurrentCallersShareARunBegunAfterTheyCalled() throws {
        let shared = SharedRun<Int>()
        let runs = Counter()
        let writes = Counter() // "state" a run reads
        let stale = Counter()
        let ready = Counter(), finished = Counter()
        let go = Completion<Void>(), allDone = Completion<Void>()
        for _ in 0..<16 {
            startThread(name: "shared-run-test") {
                ready.add(1)
                _ = go.wait() // all call together
                defer { finished.add(1); if finished.load() == 16 { allDone.fulfil(()) } }
                writes.add(1) // this caller's write, before it asks
                let seen = writes.load()
                let r = try? shared.run { () -> Int in
                    runs.add(1)
                    let v = writes.load()
                    usleep(50_000)
                    return v
                }
                if (r ?? 0) < seen { stale.add(1) }
            }
        }
        while ready.load() < 16 { usleep(1_000) }
        go.fulfil(())
        _ = allDone.wait()
        XCTAssertEqual(stale.load(), 0, "no caller got a run that began before its write")
        XCTAssertLessThanOrEqual(runs.load(), 8, "16 callers shared runs (\(runs.load()))")
        // One after another, each call runs.
        let before = runs.load()
        _ = try shared.run { runs.add(1); return 0 }
        _ = try shared.run { runs.add(1); return 0 }
        XCTAssertEqual(runs.load(), before + 2)
        // A failing run fails its callers, and the next call runs again.
        struct Boom: Error {}
        XCTAssertThrowsError(try shared.run { throw Boom() })
        XCTAssertEqual(try shared.run { 7 }, 7)
    }
}

final class PrintableNameTests: XCTestCase {
    func testPrintableNames() {
        XCTAssertEqual(printableName(Array("tenant-1".utf8)), "tenant-1")
        XCTAssertEqual(printableName(Array("é".utf8)), "é")
        XCTAssertEqual(printableName([0xFF, 0x41]), "0xff41", "not UTF-8")
        XCTAssertEqual(printableName([0x61, 0x0A]), "0x610a", "a control character")
        XCTAssertNotEqual(printableName([0xFF]), printableName([0xFE]))
    }
}
