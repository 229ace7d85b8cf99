import XCTest
import StrataCore
@testable import strata_bench

/// Pins each reference policy of `strata-bench hitratio` on tiny hand-made traces (every item
/// charged 1 byte, so capacities are item counts), and the traces' shape.
final class PolicySimulatorTests: XCTestCase {
    /// Replays `ids`, returning which requests hit.
    func replay(_ sim: any PolicySimulator, _ ids: [Int32]) -> [Bool] { ids.map { sim.access($0, charge: 1) } }

    func cached(_ sim: any PolicySimulator, _ universe: Int) -> Set<Int32> {
        Set((0..<Int32(universe)).filter { sim.contains($0) })
    }

    func testLRUEvictsTheLeastRecentlyUsed() {
        let lru = LRUSimulator(capacity: 3, universe: 8)
        XCTAssertEqual(replay(lru, [0, 1, 2, 0, 3]), [false, false, false, true, false])
        XCTAssertEqual(cached(lru, 8), [0, 2, 3], "the hit on 0 saved it; 1 was least recently used")
        XCTAssertEqual(replay(lru, [1]), [false])
        XCTAssertEqual(cached(lru, 8), [0, 1, 3])
        XCTAssertEqual(lru.itemCount, 3)
        XCTAssertEqual(lru.usedBytes, 3)
    }

    func testSIEVEHandClearsVisitedBitsAndKeepsItsPlace() {
        // a=0 b=1 c=2 d=3 e=4 f=5. List front→back after a b c: c b a.
        let s = SIEVESimulator(capacity: 3, universe: 8)
        XCTAssertEqual(replay(s, [0, 1, 2, 0, 2]), [false, false, false, true, true])
        XCTAssertEqual(s.lists.ids(0), [2, 1, 0], "a hit does not move an item")
        // d: the hand starts at the back (a, visited → cleared), moves to b (unvisited) and evicts it.
        XCTAssertEqual(replay(s, [3]), [false])
        XCTAssertEqual(cached(s, 8), [0, 2, 3])
        XCTAssertFalse(s.visited[0], "the hand cleared a's bit")
        XCTAssertTrue(s.visited[2])
        XCTAssertEqual(s.hand, 2, "the hand rests on the evicted item's front neighbour, c")
        // e: from c (visited → cleared) to d, unvisited: the newcomer d goes, not a.
        XCTAssertEqual(replay(s, [4]), [false])
        XCTAssertEqual(cached(s, 8), [0, 2, 4])
        XCTAssertEqual(s.hand, IdLists.none, "d was at the front: the hand wraps to the back next time")
        // f: from the back, a (bit cleared earlier) is evicted.
        XCTAssertEqual(replay(s, [5]), [false])
        XCTAssertEqual(cached(s, 8), [2, 4, 5])
        // LRU on the same trace ends with {d, e, f}: the policies differ.
        let lru = LRUSimulator(capacity: 3, universe: 8)
        _ = replay(lru, [0, 1, 2, 0, 2, 3, 4, 5])
        XCTAssertEqual(cached(lru, 8), [3, 4, 5])
    }

    func testS3FIFOGhostHitGoesToMainAndSurvivesAScan() {
        let s = S3FIFOSimulator(capacity: 10, universe: 200) // small 1, main 9, ghost 9
        XCTAssertEqual(replay(s, Array(0..<10)), Array(repeating: false, count: 10))
        XCTAssertEqual(s.queue(of: 0), S3FIFOSimulator.small, "new keys go to the small queue")
        XCTAssertEqual(replay(s, [10]), [false])
        XCTAssertFalse(s.contains(0))
        XCTAssertTrue(s.inGhost(0), "an unhit item leaves the small queue for the ghost")
        XCTAssertEqual(replay(s, [0]), [false])
        XCTAssertEqual(s.queue(of: 0), S3FIFOSimulator.main, "a ghost hit inserts into the main queue")
        XCTAssertFalse(s.inGhost(0))
        // A scan of one-time keys churns the small queue only.
        XCTAssertEqual(replay(s, Array(100..<130)), Array(repeating: false, count: 30))
        XCTAssertTrue(s.contains(0), "the main queue kept the key through the scan")
        XCTAssertEqual(replay(s, [0]), [true])
        let lru = LRUSimulator(capacity: 10, universe: 200)
        _ = replay(lru, Array(0..<11) + [0] + Array(100..<130))
        XCTAssertFalse(lru.contains(0), "LRU lost it to the scan")
    }

    func testS3FIFOMovesAHitSmallItemToMainWithItsCounterCleared() {
        let s = S3FIFOSimulator(capacity: 10, universe: 100)
        _ = replay(s, Array(0..<10))
        XCTAssertEqual(replay(s, [5]), [true])
        XCTAssertEqual(s.freq[5], 1)
        _ = replay(s, Array(10..<16)) // evicts 0…4 to the ghost, then meets 5 at the back
        XCTAssertEqual(s.queue(of: 5), S3FIFOSimulator.main)
        XCTAssertEqual(s.freq[5], 0)
        XCTAssertFalse(s.contains(6), "after moving 5, the next unhit item was evicted")
        XCTAssertTrue(s.inGhost(6))
        XCTAssertEqual(s.itemCount, 10)
    }

    func testS3FIFOMainReinsertsWhileTheCounterLasts() {
        let s = S3FIFOSimulator(capacity: 10, universe: 100) // small 1, main 9
        _ = replay(s, Array(0..<10) + Array(0..<9))          // 0…8 hit once in small
        _ = replay(s, [10])                                  // 0…8 move to main, 9 to the ghost
        XCTAssertEqual(s.lists.ids(S3FIFOSimulator.main), [8, 7, 6, 5, 4, 3, 2, 1, 0])
        XCTAssertTrue(s.inGhost(9))
        _ = replay(s, [0, 0, 1, 10])                         // counters: 0 → 2, 1 → 1, 10 → 1
        XCTAssertEqual(s.freq[0], 2)
        // 11 arrives: 10 (hit) moves to main, main is over 9 items: 0 is reinserted (2 → 1),
        // 1 is reinserted (1 → 0), 2 (never hit in main) is evicted.
        _ = replay(s, [11])
        XCTAssertFalse(s.contains(2))
        XCTAssertEqual(s.lists.ids(S3FIFOSimulator.main), [1, 0, 10, 8, 7, 6, 5, 4, 3])
        XCTAssertEqual(s.freq[0], 1)
        XCTAssertEqual(s.freq[1], 0)
        XCTAssertEqual(s.freq[10], 0)
        XCTAssertEqual(s.lists.ids(S3FIFOSimulator.small), [11])
    }

    func testTinyLFURejectsAOneHitWonderAndAdmitsAWarmCandidate() {
        let w = WTinyLFUSimulator(capacity: 100, universe: 5000, expectedItems: 1024) // window 1, protected ≤ 79
        for _ in 0..<3 { _ = replay(w, Array(0..<100)) }
        XCTAssertEqual(w.itemCount, 100)
        XCTAssertEqual(w.sketch.frequency(7), 3)
        _ = replay(w, [1000, 1001]) // 1000 waits in the window, then meets a victim seen 3 times
        XCTAssertFalse(w.contains(1000), "admission rejected the one-hit wonder")
        XCTAssertEqual(w.segment(of: 1001), WTinyLFUSimulator.window)
        XCTAssertEqual(w.itemCount, 100)
        // A key requested 5 times while in the window beats a victim seen 3 times.
        XCTAssertEqual(replay(w, [2000, 2000, 2000, 2000, 2000]), [false, true, true, true, true])
        _ = replay(w, [2001])
        XCTAssertEqual(w.segment(of: 2000), WTinyLFUSimulator.probation)
        XCTAssertEqual(replay(w, [2000]), [true])
        XCTAssertEqual(w.segment(of: 2000), WTinyLFUSimulator.protected, "a probation hit promotes")
        // LRU at the same size would have kept the one-hit wonder.
        let lru = LRUSimulator(capacity: 100, universe: 5000)
        for _ in 0..<3 { _ = replay(lru, Array(0..<100)) }
        _ = replay(lru, [1000, 1001])
        XCTAssertTrue(lru.contains(1000))
    }

    func testSketchDoorkeeperAndAging() {
        var s = FrequencySketch(expectedItems: 16) // sample size 160
        XCTAssertEqual(s.frequency(7), 0)
        s.increment(7)
        XCTAssertEqual(s.frequency(7), 1, "the first sighting only sets the doorkeeper")
        for _ in 0..<30 { s.increment(7) }
        XCTAssertEqual(s.frequency(7), 16, "counters cap at 15, plus the doorkeeper")
        for _ in 31..<159 { s.increment(7) }
        XCTAssertEqual(s.frequency(7), 16)
        s.increment(7) // the 160th: every counter halved, the doorkeeper cleared
        XCTAssertEqual(s.frequency(7), 7)
    }

    func testByteCapacityEvictsSeveralSmallItemsForALargeOne() {
        for sim in [LRUSimulator(capacity: 100, universe: 10), SIEVESimulator(capacity: 100, universe: 10),
                    S3FIFOSimulator(capacity: 100, universe: 10), WTinyLFUSimulator(capacity: 100, universe: 10, expectedItems: 10)] as [any PolicySimulator] {
            for id in 0..<5 { _ = sim.access(Int32(id), charge: 20) }
            XCTAssertEqual(sim.usedBytes, 100, sim.name)
            _ = sim.access(9, charge: 60)
            XCTAssertLessThanOrEqual(sim.usedBytes, 100, sim.name)
            XCTAssertFalse(sim.access(8, charge: 101), "\(sim.name): larger than the cache: a miss, not stored")
            XCTAssertFalse(sim.contains(8), sim.name)
        }
    }
}

final class HitRatioTraceTests: XCTestCase {
    func testTracesAreSeededAndBounded() {
        let a = TraceFactory.zipf(keys: 1000, alpha: 0.99, length: 5000, seed: 3, sizes: .fixed(100))
        let b = TraceFactory.zipf(keys: 1000, alpha: 0.99, length: 5000, seed: 3, sizes: .fixed(100))
        let c = TraceFactory.zipf(keys: 1000, alpha: 0.99, length: 5000, seed: 4, sizes: .fixed(100))
        XCTAssertEqual(a.keys, b.keys)
        XCTAssertNotEqual(a.keys, c.keys)
        XCTAssertEqual(a.keys.count, 5000)
        XCTAssertTrue(a.keys.allSatisfy { $0 >= 0 && $0 < 1000 })
    }

    func testZipfHeadShare() {
        // P(rank 0) = 1 / Σ_{i=1}^{1000} i^-0.99 ≈ 0.131.
        let t = TraceFactory.zipf(keys: 1000, alpha: 0.99, length: 100_000, seed: 1, sizes: .fixed(100))
        var counts = [Int](repeating: 0, count: 1000)
        for k in t.keys { counts[Int(k)] += 1 }
        let top = Double(counts.max()!) / 100_000
        XCTAssertGreaterThan(top, 0.12)
        XCTAssertLessThan(top, 0.142)
    }

    func testScanKeysAreOneTimeRuns() {
        let t = TraceFactory.scanMixed(keys: 100, alpha: 0.99, length: 1000, scanEvery: 200, scanLength: 50, seed: 1, sizes: .fixed(10))
        XCTAssertEqual(t.keys.count, 1000)
        XCTAssertTrue(t.keys[0..<200].allSatisfy { $0 < 100 })
        XCTAssertEqual(Array(t.keys[200..<250]), (100..<150).map { Int32($0) })
        XCTAssertEqual(Set(t.keys.filter { $0 >= 100 }).count, t.keys.filter { $0 >= 100 }.count, "each scan key once")
        XCTAssertEqual(t.universe, 100 + 4 * 50)
    }

    func testShiftingMovesTheHotKey() {
        let t = TraceFactory.shifting(keys: 1000, alpha: 0.99, length: 40_000, phases: 4, seed: 1, sizes: .fixed(10))
        var hottest: [Int32] = []
        for p in 0..<4 {
            var counts = [Int](repeating: 0, count: 1000)
            for k in t.keys[p * 10_000..<(p + 1) * 10_000] { counts[Int(k)] += 1 }
            hottest.append(Int32(counts.firstIndex(of: counts.max()!)!))
        }
        XCTAssertEqual(Set(hottest).count, 4, "each phase has its own hot key")
    }

    func testVariableSizesAreStablePerKeyAndInRange() {
        let s = ValueSizes.variable(min: 16, max: 4096, seed: 9)
        let sizes = (0..<1000).map { s.size(of: Int32($0)) }
        XCTAssertEqual(sizes, (0..<1000).map { s.size(of: Int32($0)) })
        XCTAssertTrue(sizes.allSatisfy { $0 >= 16 && $0 <= 4096 })
        XCTAssertGreaterThan(Set(sizes).count, 500)
    }

    /// With one shard and 100 B values (a 144-byte record: exactly the simulators' charge), the
    /// real memory tier is an exact adaptive S3-FIFO with one ghost: held to the simulator's
    /// item count (its byte limit also pays for the ghost queue, which the simulator's does
    /// not), it must hit exactly as often as `SharedGhostAdaptiveS3FIFOSimulator`, and differ
    /// from LRU and from plain S3-FIFO (its small queue's share moved).
    func testRealTierWithOneShardMatchesTheAdaptiveS3FIFOSimulator() throws {
        let bench = try HitRatioBench(arguments: ["--requests", "20000", "--keys", "2000", "--shards", "1"])
        for name in ["scan", "shifting"] {
            let trace = bench.makeTrace(name)
            for capacity in [144 * 150, 144 * 400] {
                let r = try bench.replayStrata(trace, capacity: capacity, countLimit: capacity / 144)
                let s3 = SharedGhostAdaptiveS3FIFOSimulator(capacity: capacity, universe: trace.universe)
                let plain = S3FIFOSimulator(capacity: capacity, universe: trace.universe)
                let lru = LRUSimulator(capacity: capacity, universe: trace.universe)
                var hits = 0, plainHits = 0, lruHits = 0
                for id in trace.keys {
                    if s3.access(id, charge: HitRatioBench.charge(trace, id)) { hits += 1 }
                    if plain.access(id, charge: HitRatioBench.charge(trace, id)) { plainHits += 1 }
                    if lru.access(id, charge: HitRatioBench.charge(trace, id)) { lruHits += 1 }
                }
                XCTAssertGreaterThan(hits, 0)
                XCTAssertEqual(r.hits, hits, "\(name) at \(capacity) B")
                XCTAssertNotEqual(r.hits, lruHits, "\(name) at \(capacity) B: not LRU")
                XCTAssertNotEqual(r.hits, plainHits, "\(name) at \(capacity) B: not plain S3-FIFO")
                XCTAssertEqual(r.items, capacity / 144)
                XCTAssertEqual(r.items, s3.itemCount)
            }
        }
    }

    /// The byte limit holds the ghost queue too: after a trace that fills the ghost, the
    /// accounted bytes (records + ghost) stay within the limit and are more than the records'.
    func testByteLimitHoldsTheGhostQueue() throws {
        let bench = try HitRatioBench(arguments: ["--requests", "20000", "--keys", "2000", "--shards", "1"])
        let trace = bench.makeTrace("scan")
        for capacity in [144 * 150, 144 * 1000] {
            let r = try bench.replayStrata(trace, capacity: capacity)
            XCTAssertLessThanOrEqual(r.bytes, capacity)
            XCTAssertGreaterThan(r.bytes, r.items * 144, "the ghost queue's bytes are counted")
            XCTAssertLessThan(r.items, capacity / 144, "records give the ghost room")
        }
    }

    /// The adaptive variant: a request for a key its small queue evicted grows the small
    /// queue's target and puts the key in main.
    func testAdaptiveS3FIFOGrowsItsSmallQueueOnThatGhostsHits() {
        let s = AdaptiveS3FIFOSimulator(capacity: 100, universe: 1000)
        XCTAssertEqual(s.target, 10)
        for i in 0..<150 { XCTAssertFalse(s.access(Int32(i), charge: 1)) }
        XCTAssertFalse(s.contains(0), "the oldest unhit keys left for the small queue's ghost")
        XCTAssertEqual(s.queue(of: 149), AdaptiveS3FIFOSimulator.small)
        XCTAssertFalse(s.access(0, charge: 1))
        XCTAssertEqual(s.queue(of: 0), AdaptiveS3FIFOSimulator.main)
        XCTAssertEqual(s.target, 12, "grown by 2 × the charge")
        XCTAssertTrue(s.access(0, charge: 1))
        XCTAssertLessThanOrEqual(s.usedBytes, 100)
    }
}
