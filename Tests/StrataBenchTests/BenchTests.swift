import Foundation
import XCTest
import StrataCore
import TestSupport
@testable import strata_bench

final class HistogramTests: XCTestCase {
    func testPercentilesOfAKnownDistributionAreWithinTheBucketError() {
        var h = LatencyHistogram()
        for v in 1...100_000 { h.record(micros: Double(v)) } // uniform 1…100,000 µs
        for (q, exact) in [(0.5, 50_000.0), (0.9, 90_000.0), (0.99, 99_000.0), (0.999, 99_900.0)] {
            let got = h.percentile(q)
            XCTAssertEqual(got, exact, accuracy: exact / 64 + 1, "q \(q)")
            XCTAssertGreaterThanOrEqual(got, exact - 1, "a percentile never under-reports")
        }
        XCTAssertEqual(h.percentile(1), 100_000)
        var small = LatencyHistogram()
        for _ in 0..<10 { small.record(micros: 3) }
        XCTAssertEqual(small.percentile(0.5), 3, "values under 64 µs get 1 µs buckets, capped by the largest value seen")
    }

    func testMergeAddsCounts() {
        var a = LatencyHistogram(), b = LatencyHistogram()
        for _ in 0..<100 { a.record(micros: 100) }
        for _ in 0..<100 { b.record(micros: 10_000) }
        a.merge(b)
        XCTAssertEqual(a.total, 200)
        XCTAssertLessThan(a.percentile(0.5), 102)
        XCTAssertGreaterThan(a.percentile(0.99), 9_800)
    }
}

final class LoadCodecTests: XCTestCase {
    func parse(_ c: any LoadCodec, _ s: String) -> (Reply, Int)? {
        Array(s.utf8).withUnsafeBytes { c.parse($0) }
    }

    func testMemcachedTextProtocolFrames() {
        var c = MemcachedLoadCodec()
        var out: [UInt8] = []
        c.appendGet(Array("k1".utf8), into: &out)
        c.appendSet(Array("k2".utf8), Array("abc".utf8), into: &out)
        XCTAssertEqual(String(decoding: out, as: UTF8.self), "get k1\r\nset k2 0 0 3\r\nabc\r\n")
        XCTAssertEqual(parse(c, "VALUE k1 0 3\r\nabc\r\nEND\r\n")?.0, .hit)
        XCTAssertEqual(parse(c, "VALUE k1 0 3\r\nabc\r\nEND\r\n")?.1, 24)
        XCTAssertNil(parse(c, "VALUE k1 0 3\r\nab"))
        XCTAssertEqual(parse(c, "END\r\n")?.0, .miss)
        XCTAssertEqual(parse(c, "STORED\r\n")?.0, .stored)
        XCTAssertEqual(parse(c, "SERVER_ERROR out of memory\r\n")?.0, .error("SERVER_ERROR out of memory"))
    }

    func testRedisRESPFrames() {
        var c = RedisLoadCodec()
        var out: [UInt8] = []
        c.appendGet(Array("k1".utf8), into: &out)
        c.appendSet(Array("k2".utf8), Array("abc".utf8), into: &out)
        XCTAssertEqual(String(decoding: out, as: UTF8.self), "*2\r\n$3\r\nGET\r\n$2\r\nk1\r\n*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$3\r\nabc\r\n")
        XCTAssertEqual(parse(c, "$3\r\nabc\r\n")?.0, .hit)
        XCTAssertEqual(parse(c, "$3\r\nabc\r\n")?.1, 9)
        XCTAssertNil(parse(c, "$3\r\nab"))
        XCTAssertEqual(parse(c, "$-1\r\n")?.0, .miss)
        XCTAssertEqual(parse(c, "+OK\r\n")?.0, .stored)
        XCTAssertEqual(parse(c, "-ERR wrong\r\n")?.0, .error("ERR wrong"))
    }

    func testStrataCodecMatchesTheGoldenFrames() throws {
        let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("proto-spec/vectors")
        func hex(_ name: String) throws -> [UInt8] {
            try XCTUnwrap([UInt8](hex: String(contentsOf: vectors.appendingPathComponent(name), encoding: .utf8)))
        }
        let c = StrataLoadCodec()
        XCTAssertEqual(try hex("get_hit.resp.hex").withUnsafeBytes { c.parse($0) }?.0, .hit)
        XCTAssertEqual(try hex("get_miss.resp.hex").withUnsafeBytes { c.parse($0) }?.0, .miss)
        XCTAssertEqual(try hex("set_basic.resp.hex").withUnsafeBytes { c.parse($0) }?.0, .stored)
        XCTAssertEqual(try hex("incr_not_a_number.resp.hex").withUnsafeBytes { c.parse($0) }?.0, .error("NOT_A_NUMBER"))
        var enc = StrataLoadCodec()
        enc.nextID = 20
        var out: [UInt8] = []
        enc.appendGet(Array("foo".utf8), into: &out)
        XCTAssertEqual(out, try hex("get_hit.req.hex"))
    }

    func testZipfKeysFavourTheFirstKeys() {
        let k = KeySpace(count: 1000, zipf: 0.99)
        var rng = SplitMix(seed: 1)
        var first10 = 0
        for _ in 0..<10_000 where k.next(&rng) < 10 { first10 += 1 }
        XCTAssertGreaterThan(first10, 3000, "zipf 0.99 over 1000 keys puts ~39 % on the first 10")
        let u = KeySpace(count: 1000, zipf: nil)
        var uniform10 = 0
        for _ in 0..<10_000 where u.next(&rng) < 10 { uniform10 += 1 }
        XCTAssertLessThan(uniform10, 300)
    }
}

/// A short, bounded run of the real strata-bench against a real node: it must report
/// operations and no errors (no timing is asserted).
final class BenchRunTests: XCTestCase {
    func testShortRunAgainstARealNode() throws {
        let dir = TempDir()
        let strata = try XCTUnwrap(builtExecutable("strata"))
        let bench = try XCTUnwrap(builtExecutable("strata-bench"))
        let node = Process()
        node.executableURL = URL(fileURLWithPath: strata)
        node.arguments = ["serve", "--port", "0", "--data", dir.path + "/data", "--threads", "1", "--log-level", "warn"]
        let nodeOut = dir.path + "/node.out"
        FileManager.default.createFile(atPath: nodeOut, contents: nil)
        node.standardOutput = try XCTUnwrap(FileHandle(forWritingAtPath: nodeOut))
        try node.run()
        defer { node.terminate(); node.waitUntilExit() }
        var port: String?
        _ = eventually(20, interval: 0.02) {
            let text = (try? String(contentsOfFile: nodeOut, encoding: .utf8)) ?? ""
            if let r = text.range(of: "listening on 127.0.0.1:") { port = String(text[r.upperBound...].prefix { $0.isNumber }) }
            return port != nil
        }
        let p = try XCTUnwrap(port, "the node did not start")
        let run = Process()
        run.executableURL = URL(fileURLWithPath: bench)
        run.arguments = ["run", "--target", "strata=127.0.0.1:\(p)", "--keys", "500", "--connections", "4",
                         "--pipeline", "4", "--duration", "1", "--ops", "4000", "--json"]
        let outPath = dir.path + "/bench.out"
        FileManager.default.createFile(atPath: outPath, contents: nil)
        run.standardOutput = try XCTUnwrap(FileHandle(forWritingAtPath: outPath))
        try run.run()
        run.waitUntilExit()
        XCTAssertEqual(run.terminationStatus, 0)
        let json = try String(contentsOfFile: outPath, encoding: .utf8)
        let obj = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        let result = try XCTUnwrap((obj["results"] as? [[String: Any]])?.first)
        XCTAssertGreaterThan(result["ops_per_s"] as? Int ?? 0, 0)
        XCTAssertEqual(result["errors"] as? Int, 0)
        XCTAssertEqual(result["hit_ratio"] as? Double ?? 0, 1, accuracy: 0.01, "preloaded keys all hit")
    }
}
