import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// Disk reads on the loop (issue 21, `--disk-reads-on-loop`): while the database and WAL are
/// in the page cache, a plain GET that misses memory reads SQLite on its event loop; larger
/// values, leases and touches still go to a worker; the answers and the counters are the
/// same either way.
final class DiskOnLoopTests: XCTestCase {
    private func stat(_ c: NodeConnection, _ name: String) throws -> Int { try XCTUnwrap(nodeStats(c)[name] as? Int, name) }

    /// Disk-only items (tiers 2): the GETs of the small ones run on the loop once the files
    /// were seen resident; a 200 KiB incompressible value bails (counted nothing there) and is
    /// read by a worker; each GET counts exactly one memory miss and one disk hit.
    func testSmallDiskReadsRunOnTheLoopAndLargeOnesOnAWorker() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        for i in 0..<40 {
            var s = SetRequest(key: b("k\(i)"), value: [UInt8](repeating: UInt8(i), count: 10_000)); s.tiers = 2
            XCTAssertEqual(try c.set(s).statusCode, .ok)
        }
        var rng = SplitMix(seed: 9)
        let large = (0..<(200 << 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        var big = SetRequest(key: b("large"), value: large); big.tiers = 2
        XCTAssertEqual(try c.set(big).statusCode, .ok)
        // The residency check runs once a second: wait until a read runs on the loop.
        XCTAssertTrue(eventually(10, interval: 0.1) {
            _ = try? c.get(b("k0"), tiers: 2)
            return ((try? self.stat(c, "loop_disk_reads")) ?? 0) > 0
        }, "no disk read ran on the loop: \(node.stderr)")
        let before = try nodeStats(c)
        for i in 0..<40 { XCTAssertEqual(try c.get(b("k\(i)"), tiers: 2)?.value, [UInt8](repeating: UInt8(i), count: 10_000)) }
        XCTAssertEqual(try c.get(b("large"), tiers: 2)?.value, large)
        let after = try nodeStats(c)
        func delta(_ n: String) -> Int { (after[n] as? Int ?? 0) - (before[n] as? Int ?? 0) }
        XCTAssertEqual(delta("loop_disk_reads"), 40, "the 40 small reads on the loop, the large one not")
        XCTAssertEqual(delta("disk_hits"), 41)
        XCTAssertEqual(delta("ops_get"), 41)
        // tiers 2 reads skip memory: a GET of both tiers misses memory once, then reads disk.
        let m0 = try stat(c, "memory_misses"), l0 = try stat(c, "loop_disk_reads")
        XCTAssertEqual(try c.get(b("large"))?.value, large, "bailed on the loop, read by a worker")
        XCTAssertEqual(try stat(c, "memory_misses") - m0, 1, "the bailed read's memory miss is counted once")
        XCTAssertEqual(try stat(c, "loop_disk_reads") - l0, 0)
        // Pipelined: many disk GETs in one write are answered in order of their ids, all of them.
        var bytes: [UInt8] = []
        for i in 0..<400 { bytes += Request.get(GetRequest(key: b("k\(i % 40)"), tiers: 2)).frame(id: UInt32(1 + i)).encoded() }
        try c.sendRaw(bytes)
        var got = 0
        while got < 400 { let f = try c.readFrame(); XCTAssertEqual(f.statusCode, .ok); got += 1 }
    }

    /// `--disk-reads-on-loop false`: every disk read goes to a worker.
    func testTheFlagSendsEveryDiskReadToAWorker() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--disk-reads-on-loop", "false"])
        let c = try node.connect()
        var s = SetRequest(key: b("k"), value: b("on disk")); s.tiers = 2
        XCTAssertEqual(try c.set(s).statusCode, .ok)
        let t0 = monotonicSeconds()
        while monotonicSeconds() - t0 < 1.5 { XCTAssertEqual(try c.get(b("k"), tiers: 2)?.value, b("on disk")); usleep(50_000) }
        XCTAssertEqual(try stat(c, "loop_disk_reads"), 0)
    }
}
