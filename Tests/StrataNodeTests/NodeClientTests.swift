import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire

final class NodeClientTests: XCTestCase {
    func testManyThreadsShareOnePipelinedConnection() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let client = NodeClient(host: "127.0.0.1", port: node.port, requestTimeout: 10)
        let errors = Counter()
        DispatchQueue.concurrentPerform(iterations: 8) { t in
            for i in 0..<100 {
                let key = b("t\(t)-\(i)")
                var s = SetRequest(key: key, value: b("value \(t) \(i)"))
                s.tiers = i % 2 == 0 ? 0 : 2
                guard let set = try? client.requestBlocking(.set(s)), set.statusCode == .ok,
                      let got = try? client.requestBlocking(.get(GetRequest(key: key))),
                      (try? Responses.parseGet(got).value) == b("value \(t) \(i)") else { errors.add(); continue }
            }
        }
        XCTAssertEqual(errors.load(), 0)
    }

    func testAsyncRequests() async throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let client = NodeClient(host: "127.0.0.1", port: node.port, requestTimeout: 10)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<50 {
                group.addTask {
                    let set = try await client.request(.set(SetRequest(key: b("a\(i)"), value: b("\(i)"))))
                    XCTAssertEqual(set.statusCode, .ok)
                    let got = try await client.request(.get(GetRequest(key: b("a\(i)"))))
                    XCTAssertEqual(try Responses.parseGet(got).value, b("\(i)"))
                }
            }
            try await group.waitForAll()
        }
    }

    func testRequestsTimeOutWhenTheNodeStopsAnswering() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let client = NodeClient(host: "127.0.0.1", port: node.port, requestTimeout: 0.5)
        _ = try client.requestBlocking(.ping)
        let pid = node.process.processIdentifier
        kill(pid, SIGSTOP)
        defer { kill(pid, SIGCONT) }
        // kill() returns before the process is stopped: wait until /proc says it is.
        func state() -> Character? {
            (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)).flatMap { text in
                text.range(of: ") ").map { text[$0.upperBound] }
            }
        }
        XCTAssertTrue(eventually(5, interval: 0.002) { state() == "T" }, "the node is stopped")
        let t0 = monotonicSeconds()
        XCTAssertThrowsError(try client.requestBlocking(.ping)) { e in
            XCTAssertTrue("\(e)".contains("did not answer"), "\(e)")
        }
        let waited = monotonicSeconds() - t0
        XCTAssertGreaterThanOrEqual(waited, 0.45, "not before the request timeout (0.5 s)")
        XCTAssertLessThan(waited, 0.5 + 2, "bound: the request timeout (0.5 s), + 2 s for a loaded machine")
    }

    func testReconnectsAfterTheNodeRestarts() throws {
        let dir = TempDir()
        var node = try NodeProcess(dataDir: dir.path)
        let port = node.port
        let client = NodeClient(host: "127.0.0.1", port: port, requestTimeout: 2)
        XCTAssertEqual(try client.requestBlocking(.set(SetRequest(key: b("k"), value: b("v")))).statusCode, .ok)
        node.terminate()
        XCTAssertThrowsError(try client.requestBlocking(.ping))
        node = try NodeProcess(dataDir: dir.path, port: port)
        let got = try client.requestBlocking(.get(GetRequest(key: b("k"))))
        XCTAssertEqual(try Responses.parseGet(got).value, b("v"))
    }

    func testDNSMembershipResolvesEveryAddress() throws {
        let nodes = try NodeAddress.resolve("localhost", port: 7400)
        XCTAssertTrue(nodes.contains { $0.host == "127.0.0.1" && $0.port == 7400 }, "\(nodes)")
    }

    func testClusterAsyncForms() async throws {
        let cluster = try Cluster()
        let client = try cluster.client()
        let out = try await client.set(b("x"), b("y"))
        guard case .stored = out else { return XCTFail("\(out)") }
        let item = try await client.get(b("x"))
        XCTAssertEqual(item?.value, b("y"))
        let removed = try await client.delete(b("x"))
        XCTAssertTrue(removed)
    }
}
