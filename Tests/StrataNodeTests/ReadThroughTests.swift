import Foundation
import XCTest
import Synchronization
import StrataClient
import StrataCore
import StrataWire

/// Read-through loading against real nodes: leases, negative entries, stale-while-revalidate,
/// refresh-ahead, `getOrLoad` across processes and the `get --or-run` CLI.
final class ReadThroughTests: XCTestCase {
    private func oneNodeClient(_ node: NodeProcess) throws -> ClusterClient {
        var c = ClusterConfiguration(nodes: [NodeAddress(host: "127.0.0.1", port: node.port)])
        c.replicas = 1
        return try ClusterClient(configuration: c)
    }

    /// README's `getOrLoad` snippet, inside an async function: it compiles (one overload
    /// fits: the async one) and loads once. An outside review found it ambiguous.
    func testGetOrLoadInAsyncCodeTakesTheAsyncForm() async throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let cluster = try oneNodeClient(node)
        @Sendable func fetchUserFromDatabase(_ id: Int) throws -> [UInt8] { Array("user \(id)".utf8) }
        let v = try await cluster.getOrLoad(Array("user:42".utf8), ttl: .seconds(300),
                                            options: LoadOptions(negativeTTL: 30, refreshAhead: 10)) {
            try fetchUserFromDatabase(42)
        }
        XCTAssertEqual(v.value, Array("user 42".utf8))
        XCTAssertEqual(v.origin, .loaded)
    }

    func testLeaseProtocolOnOneNode() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let a = try node.connect(), other = try node.connect()
        let leaseGet = Request.get(GetRequest(key: b("k"), lease: true))
        // The first miss gets the lease; the next is told the key is being filled.
        let r1 = try a.call(leaseGet)
        XCTAssertEqual(r1.statusCode, .notFound)
        guard case .granted(let token) = Responses.leaseState(r1) else { return XCTFail("no lease granted") }
        let r2 = try other.call(leaseGet)
        XCTAssertEqual(r2.statusCode, .notFound)
        XCTAssertEqual(Responses.leaseState(r2), .filling)
        // A plain GET knows nothing of leases.
        XCTAssertEqual(Responses.leaseState(try other.call(.get(GetRequest(key: b("k"))))), .none)
        // Filling with a wrong token is refused; with the right one it stores and releases.
        var fill = SetRequest(key: b("k"), value: b("loaded"))
        fill.mode = .lease
        fill.casVersion = token &+ 1
        XCTAssertEqual(try other.set(fill).statusCode, .leaseLost)
        XCTAssertNil(try other.get(b("k")))
        fill.casVersion = token
        XCTAssertEqual(try a.set(fill).statusCode, .ok)
        let hit = try other.call(leaseGet)
        XCTAssertEqual(hit.statusCode, .ok)
        XCTAssertEqual(hit.value, b("loaded"))
        XCTAssertEqual(Responses.leaseState(hit), .none)
        XCTAssertEqual(try a.set(fill).statusCode, .leaseLost, "a token fills once")

        // DELETE revokes a lease: a load that started before it must not store an old value.
        let r3 = try a.call(.get(GetRequest(key: b("gone"), lease: true)))
        guard case .granted(let t3) = Responses.leaseState(r3) else { return XCTFail("no lease") }
        _ = try other.call(.delete(namespace: [], key: b("gone"), tiers: 0, version: nil, writeBehind: false))
        var late = SetRequest(key: b("gone"), value: b("old"))
        late.mode = .lease; late.casVersion = t3
        XCTAssertEqual(try a.set(late).statusCode, .leaseLost)

        // RELEASE gives a lease back without filling.
        let r4 = try a.call(.get(GetRequest(key: b("r"), lease: true)))
        guard case .granted(let t4) = Responses.leaseState(r4) else { return XCTFail("no lease") }
        XCTAssertEqual(try a.call(.release(namespace: [], key: b("r"), token: t4)).statusCode, .ok)
        XCTAssertEqual(try a.call(.release(namespace: [], key: b("r"), token: t4)).statusCode, .notFound)
        guard case .granted = Responses.leaseState(try other.call(.get(GetRequest(key: b("r"), lease: true)))) else {
            return XCTFail("a released lease goes to the next caller")
        }

        // INVALIDATE: the value stays, flagged stale; one reader gets the lease to refresh it.
        XCTAssertEqual(try a.call(.invalidate(namespace: [], key: b("k"), tiers: 0, version: nil)).statusCode, .ok)
        let plain = try XCTUnwrap(try other.get(b("k")))
        XCTAssertTrue(plain.stale)
        XCTAssertEqual(plain.value, b("loaded"))
        let s1 = try a.call(leaseGet), s2 = try other.call(leaseGet)
        XCTAssertEqual(s1.statusCode, .ok); XCTAssertEqual(s2.statusCode, .ok)
        XCTAssertTrue(try Responses.parseGet(s1).stale); XCTAssertTrue(try Responses.parseGet(s2).stale)
        guard case .granted = Responses.leaseState(s1) else { return XCTFail("the first stale reader refreshes") }
        XCTAssertEqual(Responses.leaseState(s2), .filling)
        XCTAssertEqual(try a.call(.invalidate(namespace: [], key: b("absent"), tiers: 0, version: nil)).statusCode, .notFound)

        // Negative entries: a distinct status, never a lease.
        var neg = SetRequest(key: b("bad-url"), value: b("HTTP 404"))
        neg.negative = true
        neg.expiry = .seconds(60)
        XCTAssertEqual(try a.set(neg).statusCode, .ok)
        let n = try other.call(leaseGet.withKey(b("bad-url")))
        XCTAssertEqual(n.statusCode, .negative)
        XCTAssertEqual(n.value, b("HTTP 404"))
        XCTAssertEqual(Responses.leaseState(n), .none)
        XCTAssertEqual(try other.get(b("bad-url"))?.negative, true)
        let many = try other.call(.mget(namespace: [], keys: [b("bad-url"), b("k")], tiers: 0))
        let items = try Responses.parseMGet(many, count: 2)
        XCTAssertNil(items[0], "MGET reads a negative entry as absent")
        XCTAssertEqual(items[1]?.value, b("loaded"), "and a stale item as its value")

        let stats = try a.stats()
        for field in ["\"leases_granted\"", "\"leases_filling\"", "\"leases_lost\"", "\"negative_hits\"", "\"stale_hits\""] {
            XCTAssertTrue(stats.contains(field), "STATS has \(field)")
        }
    }

    func test200ConcurrentGetOrLoadCallsFromFourProcessesRunTheLoaderOnce() throws {
        let cluster = try Cluster()
        let dir = TempDir()
        let marker = dir.path + "/loads"
        let racer = try XCTUnwrap(builtExecutable("strata-load-racer"))
        let startAt = String(Date().timeIntervalSince1970 + 1.5)
        var procs: [(Process, String)] = []
        for i in 0..<4 {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: racer)
            p.arguments = [cluster.nodesFlag, "cold-key", "50", marker, "0.5", startAt]
            let out = dir.path + "/out\(i)"
            FileManager.default.createFile(atPath: out, contents: nil)
            p.standardOutput = FileHandle(forWritingAtPath: out)
            try p.run()
            procs.append((p, out))
        }
        var results: [String] = []
        for (p, out) in procs {
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, 0)
            results += try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").map(String.init)
        }
        let loads = (try? String(contentsOfFile: marker, encoding: .utf8))?.split(separator: "\n") ?? []
        XCTAssertEqual(loads.count, 1, "the loader ran exactly once across 4 processes: \(loads)")
        XCTAssertEqual(results.count, 200)
        let values = Set(results.map { $0.split(separator: " ").last.map(String.init) ?? "" })
        XCTAssertEqual(values.count, 1, "every caller got the one loaded value: \(values)")
        XCTAssertTrue(values.first?.hasPrefix("value-from-") ?? false, "\(results.prefix(3))")
        XCTAssertEqual(results.filter { $0.hasPrefix("loaded ") }.count, 1)
        XCTAssertFalse(results.contains { $0.hasPrefix("error") }, "\(results.filter { $0.hasPrefix("error") }.prefix(3))")
    }

    func testALoaderThatDiesHoldingTheLeaseDelaysOthersOnlyUntilTheLeaseTimeoutOrMaxWait() throws {
        let dir = TempDir()
        // Real time: the lease timeout (1 s) runs in the node; the first getOrLoad waits for it.
        let node = try NodeProcess(dataDir: dir.path, extra: ["--lease-timeout", "1"])
        let client = try oneNodeClient(node)
        // A loader process takes the lease and is SIGKILLed in the middle of its load.
        let marker = dir.path + "/loads"
        let racer = Process()
        racer.executableURL = URL(fileURLWithPath: try XCTUnwrap(builtExecutable("strata-load-racer")))
        racer.arguments = ["127.0.0.1:\(node.port)", "k1", "1", marker, "30"]
        racer.standardOutput = FileHandle.nullDevice
        try racer.run()
        XCTAssertTrue(eventually { !(FileManager.default.contents(atPath: marker)?.isEmpty ?? true) }, "the racer started loading")
        kill(racer.processIdentifier, SIGKILL)
        racer.waitUntilExit()
        var t0 = monotonicSeconds()
        let v1 = try client.getOrLoad(b("k1"), ttl: .seconds(60)) { b("loaded after the lease expired") }
        var waited = monotonicSeconds() - t0
        XCTAssertEqual(v1.origin, .loaded)
        XCTAssertEqual(v1.value, b("loaded after the lease expired"))
        XCTAssertLessThan(waited, 1 + 2, "bound: the node's lease timeout (1 s), + 2 s for a loaded machine")
        XCTAssertEqual(try client.get(b("k1"))?.value, b("loaded after the lease expired"))

        // With a shorter maxWait, the caller loads anyway once its own bound is reached: on a
        // node whose leases last a minute, so only maxWait can end the wait within the slack.
        let patientDir = TempDir()
        let patient = try NodeProcess(dataDir: patientDir.path, extra: ["--lease-timeout", "60"])
        let crashed = try patient.connect()
        guard case .granted = Responses.leaseState(try crashed.call(.get(GetRequest(key: b("k2"), lease: true)))) else {
            return XCTFail("no lease")
        }
        t0 = monotonicSeconds()
        let v2 = try oneNodeClient(patient).getOrLoad(b("k2"), options: LoadOptions(maxWait: 0.2)) { b("impatient") }
        waited = monotonicSeconds() - t0
        XCTAssertEqual(v2.value, b("impatient"))
        XCTAssertGreaterThan(waited, 0.15, "not before maxWait (0.2 s)")
        XCTAssertLessThan(waited, 0.2 + 2, "bound: the caller's maxWait (0.2 s), + 2 s for a loaded machine (the lease lasts 60 s)")
    }

    func testAFailingLoaderWithANegativeTTLIsNotRunAgainUntilTheEntryExpires() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let client = try oneNodeClient(node)
        let runs = Atomic<Int>(0)
        struct Boom: Error, CustomStringConvertible { var description: String { "origin said 503" } }
        let options = LoadOptions(negativeTTL: 1)
        for attempt in 0..<3 {
            XCTAssertThrowsError(try client.getOrLoad(b("flaky"), options: options) {
                runs.add(1, ordering: .relaxed)
                throw Boom()
            }) { e in
                let f = e as? LoadFailure
                XCTAssertEqual(f?.message, "origin said 503")
                XCTAssertEqual(f?.cached, attempt > 0, "attempt \(attempt)")
            }
        }
        XCTAssertEqual(runs.load(ordering: .relaxed), 1, "the failure was remembered")
        // The negative entry is replicated like any write and expires with its TTL.
        XCTAssertEqual(try client.get(b("flaky"))?.negative, true)
        // Real time: the entry expires in the node (about 1 s).
        XCTAssertTrue(try eventually(10, interval: 0.05) { try client.get(b("flaky")) == nil }, "the negative entry expired")
        let v = try client.getOrLoad(b("flaky")) { runs.add(1, ordering: .relaxed); return b("recovered") }
        XCTAssertEqual(v.value, b("recovered"))
        XCTAssertEqual(runs.load(ordering: .relaxed), 2)
        // Without a negative TTL nothing is remembered: every call runs the loader.
        for _ in 0..<2 { XCTAssertThrowsError(try client.getOrLoad(b("plain")) { runs.add(1, ordering: .relaxed); throw Boom() }) }
        XCTAssertEqual(runs.load(ordering: .relaxed), 4)
    }

    func testStaleWhileRevalidateServesTheStaleValueWhileExactlyOneRefreshRuns() throws {
        let cluster = try Cluster()
        let writer = try cluster.client()
        _ = try writer.set(b("page"), b("v1"))
        XCTAssertTrue(try writer.invalidate(b("page")))
        XCTAssertEqual(try writer.get(b("page"))?.stale, true, "the stale mark is the newest version")
        let runs = Atomic<Int>(0)
        let results = SharedList<LoadedValue>()
        let group = DispatchGroup()
        // Separate clients stand for separate processes (each has its own single flight).
        let clients = try (0..<8).map { _ in try cluster.client() }
        for c in clients {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                if let v = try? c.getOrLoad(b("page"), ttl: .seconds(600), loader: {
                    runs.add(1, ordering: .relaxed)
                    // The refresh ends only once the seven other readers were served meanwhile.
                    _ = eventually { results.all.count >= 7 }
                    return b("v2")
                }) { results.append(v) }
            }
        }
        group.wait()
        XCTAssertEqual(runs.load(ordering: .relaxed), 1, "exactly one refresh")
        let all = results.all
        XCTAssertEqual(all.count, 8)
        XCTAssertEqual(all.filter { $0.origin == .refreshed && $0.value == b("v2") }.count, 1)
        XCTAssertEqual(all.filter { $0.origin == .stale && $0.value == b("v1") }.count, 7, "\(all.map(\.origin))")
        let after = try XCTUnwrap(try writer.get(b("page")))
        XCTAssertEqual(after.value, b("v2"))
        XCTAssertFalse(after.stale)
        // Every replica holds the refreshed value.
        for a in writer.nodes(for: b("page")) {
            XCTAssertEqual(try NodeConnection(host: "127.0.0.1", port: a.port).get(b("page"), tiers: 2)?.value, b("v2"))
        }
    }

    func testRefreshAheadKeepsAKeyFromEverMissingUnderSteadyReads() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let runs = Atomic<Int>(0)
        let results = SharedList<LoadedValue.Origin>()
        let options = LoadOptions(refreshAhead: 1.5)
        let first = try oneNodeClient(node)
        _ = try first.getOrLoad(b("hot"), ttl: .seconds(2), options: options) { runs.add(1, ordering: .relaxed); return b("gen") }
        let group = DispatchGroup()
        let end = monotonicSeconds() + 3.5
        for _ in 0..<3 {
            let c = try oneNodeClient(node)
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                while monotonicSeconds() < end {
                    if let v = try? c.getOrLoad(b("hot"), ttl: .seconds(2), options: options, loader: {
                        runs.add(1, ordering: .relaxed); return b("gen")
                    }) { results.append(v.origin) } else { results.append(.stale) }
                    // The scenario: steady reads, one every 50 ms per reader, across the TTL's
                    // real expiry in the node (the window is bounded by `end`).
                    usleep(50_000)
                }
            }
        }
        group.wait()
        let origins = results.all
        XCTAssertGreaterThan(origins.count, 30)
        XCTAssertTrue(origins.allSatisfy { $0 == .cache || $0 == .refreshed }, "a reader saw a miss or an error: \(Set(origins.map(\.rawValue)))")
        // 3.5 s of reads across a 2 s TTL: the value was refreshed before it could expire.
        XCTAssertGreaterThanOrEqual(origins.filter { $0 == .refreshed }.count, 1)
        XCTAssertEqual(runs.load(ordering: .relaxed), 1 + origins.filter { $0 == .refreshed }.count)
    }

    func testAsyncGetOrLoadSharesOneLoadAmongConcurrentTasks() async throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let client = try oneNodeClient(node)
        let runs = Counter()
        let values = try await withThrowingTaskGroup(of: [UInt8].self) { group in
            for _ in 0..<20 {
                group.addTask {
                    try await client.getOrLoad(b("async-key"), ttl: .seconds(60)) {
                        runs.add()
                        // A slow origin, so the other tasks arrive while it loads (the
                        // assertion holds whatever the overlap).
                        try await Task.sleep(nanoseconds: 200_000_000)
                        return b("from an async loader")
                    }.value
                }
            }
            var out: [[UInt8]] = []
            for try await v in group { out.append(v) }
            return out
        }
        XCTAssertEqual(values.count, 20)
        XCTAssertTrue(values.allSatisfy { $0 == b("from an async loader") })
        XCTAssertEqual(runs.load(), 1)
    }

    func testGetOrRunMemoizesACommandAndRemembersItsFailure() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let server = ["--server", "127.0.0.1:\(node.port)"]
        let marker = dir.path + "/ran"
        let cmd = "echo run >> \(marker); printf 'report\\n'"
        let first = try runCLI(["get", "daily-report", "--or-run", cmd, "--ttl", "60"] + server)
        XCTAssertEqual(first.code, 0, first.err)
        XCTAssertEqual(first.out, b("report\n"), "exactly the command's bytes on stdout")
        let second = try runCLI(["get", "daily-report", "--or-run", cmd, "--ttl", "60"] + server)
        XCTAssertEqual(second.out, b("report\n"))
        XCTAssertEqual(try String(contentsOfFile: marker, encoding: .utf8), "run\n", "ran once")

        let failing = "echo ran >> \(marker)-f; echo 'upstream down' >&2; exit 3"
        let f1 = try runCLI(["get", "nightly", "--or-run", failing, "--negative-ttl", "60"] + server)
        XCTAssertEqual(f1.code, 1)
        XCTAssertTrue(f1.err.contains("upstream down"), f1.err)
        XCTAssertTrue(f1.out.isEmpty)
        let f2 = try runCLI(["get", "nightly", "--or-run", failing, "--negative-ttl", "60"] + server)
        XCTAssertEqual(f2.code, 1)
        XCTAssertTrue(f2.err.contains("cached failure"), f2.err)
        XCTAssertEqual(try String(contentsOfFile: marker + "-f", encoding: .utf8), "ran\n", "a cached failure does not re-run")
        let plain = try runCLI(["get", "nightly"] + server)
        XCTAssertEqual(plain.code, 1)
        XCTAssertTrue(plain.err.contains("cached failure"), plain.err)

        // invalidate, then --or-run refreshes the stale value.
        XCTAssertEqual(try runCLI(["invalidate", "daily-report"] + server).code, 0)
        let refreshed = try runCLI(["get", "daily-report", "--or-run", "printf new", "--ttl", "60"] + server)
        XCTAssertEqual(refreshed.out, b("new"))
        XCTAssertEqual(try runCLI(["invalidate", "never-set"] + server).code, 1)
        XCTAssertEqual(try runCLI(["get", "x", "--negative-ttl", "5"] + server).code, 2, "--negative-ttl without --or-run is a usage error")
    }
}

extension Request {
    fileprivate func withKey(_ k: [UInt8]) -> Request {
        guard case .get(var g) = self else { return self }
        g.key = k
        return .get(g)
    }

    /// Outside review nu2: a command whose output is over the node's --max-item was printed,
    /// stored nowhere, and said nothing — and a concurrent caller waited out the 10 s lease.
    /// Now the first prints a warning and gives the lease back at once.
    func testOrRunOutputTheNodeCannotStoreIsPrintedWithAWarningAndTheLeaseGoesBack() throws {
        let node = try NodeProcess(dataDir: TempDir().path, extra: ["--max-item", "1MiB"])
        let server = ["--server", "127.0.0.1:\(node.port)"]
        let cmd = "sleep 1; head -c 2000000 /dev/zero"
        let second = Completion<(code: Int32, out: [UInt8], err: String)>()
        let started = Date()
        let args = ["get", "big", "--or-run", cmd] + server
        Thread.detachNewThread {
            usleep(300_000) // after the first took the lease
            second.fulfil((try? runCLI(args)) ?? (-1, [], "did not run"))
        }
        let first = try runCLI(args)
        XCTAssertEqual(first.code, 0, first.err)
        XCTAssertEqual(first.out.count, 2_000_000)
        XCTAssertTrue(first.err.contains("printed but not stored"), first.err)
        let other = try XCTUnwrap(second.wait(seconds: 30))
        XCTAssertEqual(other.code, 0, other.err)
        XCTAssertEqual(other.out.count, 2_000_000)
        XCTAssertLessThan(Date().timeIntervalSince(started), 8, "the waiter did not wait out the 10 s lease")
        XCTAssertEqual(try runCLI(["get", "big"] + server).code, 1, "nothing was stored")
    }
}
