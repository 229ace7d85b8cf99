import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

/// `--memory-compression` on a running node: the named namespace trains its dictionary, its
/// values are held compressed, every read returns the bytes written; a bad list is refused.
final class MemoryCompressionNodeTests: XCTestCase {
    func document(_ i: Int) -> [UInt8] {
        let status = ["open", "paid", "shipped", "returned"][i % 4]
        return Array("{\"id\":\(100_000 + i),\"email\":\"user\(i * 7919 % 100_000)@example.com\",\"status\":\"\(status)\",\"items\":[{\"sku\":\"sku-\(i % 97)\",\"qty\":\(i % 9 + 1)}]}".utf8)
    }

    func testANamedNamespaceIsHeldCompressedAndReadsBackExactly() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--memory-compression", "json, t-*"])
        let c = try node.connect()
        for i in 0..<1_000 { XCTAssertEqual(try c.set(SetRequest(key: b("k\(i)"), value: document(i), namespace: b("json"))).statusCode, .ok) }
        let until = Date().addingTimeInterval(20)
        while (try nodeStats(c)["memory_dictionaries"] as? Int ?? 0) < 1 && Date() < until { usleep(20_000) }
        for i in 1_000..<1_400 { XCTAssertEqual(try c.set(SetRequest(key: b("k\(i)"), value: document(i), namespace: b("json"))).statusCode, .ok) }
        for i in 0..<50 { _ = try c.set(SetRequest(key: b("p\(i)"), value: document(i), namespace: b("plain"))) }
        let s = try nodeStats(c)
        XCTAssertEqual(s["memory_dictionaries"] as? Int, 1)
        XCTAssertGreaterThanOrEqual(s["memory_compressed_items"] as? Int ?? 0, 300, "the values after training")
        XCTAssertGreaterThan(s["memory_dictionary_bytes"] as? Int ?? 0, 0)
        for i in stride(from: 0, to: 1_400, by: 7) {
            let f = try c.call(.get(GetRequest(key: b("k\(i)"), namespace: b("json"), tiers: 1)))
            XCTAssertEqual(f.statusCode, .ok)
            XCTAssertEqual(f.value, document(i), "k\(i)")
        }
        let m = try Responses.parseMeta(c.call(.meta(namespace: b("json"), key: b("k1399"), tiers: 1)))
        XCTAssertEqual(Int(m.size), document(1399).count, "the size written, not the size held")
        // The CLI, a fresh process, reads the same bytes.
        let got = try runCLI(["get", "k1399", "--ns", "json", "--server", "127.0.0.1:\(node.port)"])
        XCTAssertEqual(got.code, 0, got.err)
        XCTAssertEqual(Array(got.out.prefix(document(1399).count)), document(1399))
    }

    func testABadNamespaceListIsRefused() throws {
        for bad in ["a,,b", ",", "a, ", "*a", "a*b", "a**", "\"c\"", String(repeating: "n", count: 65)] {
            let r = try runCLI(["serve", "--port", "0", "--data", TempDir().path, "--memory-compression", bad])
            XCTAssertEqual(r.code, 2, bad)
            XCTAssertTrue(r.err.contains("--memory-compression"), r.err)
        }
        // An empty value is none (a config file's list turned off from the environment).
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--memory-compression", ""])
        XCTAssertNoThrow(try node.connect().ping())
    }
}
