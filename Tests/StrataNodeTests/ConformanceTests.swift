import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataImage
import StrataWire

/// Defects found by a client written from proto-spec/ alone (issue 14), each pinned against a
/// real node over a real socket.
final class ConformanceTests: XCTestCase {
    func statsObject(_ c: NodeConnection) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(try c.stats().utf8)) as? [String: Any])
    }

    /// §7.13: STATS counts every operation, HELLO, STATS and QUIT included.
    func testStatsCountsHelloStatsAndQuit() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        XCTAssertEqual(try c.call(.hello(minVersion: 1, maxVersion: 1, token: [])).statusCode, .ok)
        XCTAssertEqual(try c.call(.hello(minVersion: 7, maxVersion: 9, token: [])).statusCode, .unsupportedVersion)
        _ = try c.stats()
        let q = try node.connect()
        XCTAssertEqual(try q.call(.quit).statusCode, .ok)
        let s = try statsObject(c)
        XCTAssertEqual(s["ops_hello"] as? Int, 2, "both HELLOs, the refused one too")
        XCTAssertEqual(s["ops_stats"] as? Int, 1, "the earlier STATS (this one is counted after it answers)")
        XCTAssertEqual(s["ops_quit"] as? Int, 1)
        for op in ["hello", "stats", "quit"] {
            XCTAssertNotNil(s["latency_us_\(op)_p50"], "latency of \(op)")
            XCTAssertNotNil(s["latency_us_\(op)_p99"], "latency of \(op)")
        }
    }

    /// §2.1: QUIET silences only the outcomes it lists; INVALIDATE and RELEASE always answer.
    func testQuietDoesNotSilenceInvalidateOrRelease() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        XCTAssertEqual(try c.set(SetRequest(key: b("page"), value: b("v1"))).statusCode, .ok)
        var out: [UInt8] = []
        Request.invalidate(namespace: [], key: b("page"), tiers: 0, version: nil).frame(id: 11, quiet: true).encode(into: &out)
        Request.invalidate(namespace: [], key: b("absent"), tiers: 0, version: nil).frame(id: 12, quiet: true).encode(into: &out)
        Request.release(namespace: [], key: b("page"), token: 12345).frame(id: 13, quiet: true).encode(into: &out)
        Request.set(SetRequest(key: b("q"), value: b("1"))).frame(id: 14, quiet: true).encode(into: &out)
        Request.ping.frame(id: 15).encode(into: &out)
        try c.sendRaw(out)
        var answered: [UInt32: Status] = [:]
        while answered[15] == nil {
            let f = try c.readFrame()
            answered[f.requestID] = f.statusCode
        }
        XCTAssertEqual(answered[11], .ok, "INVALIDATE OK is answered under QUIET")
        XCTAssertEqual(answered[12], .notFound, "INVALIDATE NOT_FOUND is answered under QUIET")
        XCTAssertEqual(answered[13], .notFound, "RELEASE of a lease not held is answered under QUIET")
        XCTAssertNil(answered[14], "a quiet SET that succeeds is still silent")
    }

    /// A GET that touches with a relative TTL answers exactly the expiry it stored.
    func testGetWithRelativeTouchAnswersTheStoredExpiry() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        for tiers: UInt8 in [0, 2] {
            let key = b("t\(tiers)")
            XCTAssertEqual(try c.set(SetRequest(key: key, value: b("v"))).statusCode, .ok)
            for _ in 0..<20 {
                let touched = try Responses.parseGet(c.call(.get(GetRequest(key: key, tiers: tiers, touch: .seconds(300)))))
                let again = try XCTUnwrap(try c.get(key, tiers: tiers))
                let meta = try Responses.parseMeta(c.call(.meta(namespace: [], key: key, tiers: tiers)))
                XCTAssertEqual(touched.expiresAt, again.expiresAt, "GET+touch and the next GET agree (tiers \(tiers))")
                XCTAssertEqual(touched.expiresAt, meta.expiresAt, "GET+touch and META agree (tiers \(tiers))")
                XCTAssertEqual(touched.version, again.version)
            }
        }
    }

    /// §7.9: "has initial" is 0 or 1; anything else is INVALID_ARGUMENT, nothing stored.
    func testIncrHasInitialOutsideZeroOrOneIsInvalidArgument() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        for (i, byte) in [UInt8(2), 255].enumerated() {
            var f = Request.counter(CounterRequest(key: b("n"), delta: 1)).frame(id: UInt32(100 + i))
            f.extras[8] = byte // u64 delta, then the has-initial byte
            try c.sendRaw(f.encoded())
            let r = try c.readFrame()
            XCTAssertEqual(r.requestID, UInt32(100 + i))
            XCTAssertEqual(r.statusCode, .invalidArgument, "has initial = \(byte)")
            XCTAssertTrue(String(decoding: r.value, as: UTF8.self).contains("has initial"))
        }
        XCTAssertNil(try c.get(b("n")), "nothing was stored")
        try c.ping()
    }

    /// §7.4.1: a plain SET after a lease was granted revokes it, so a fill loaded before that
    /// SET is refused and the newer value stays.
    func testAPlainSetRevokesAnOutstandingLease() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let loader = try node.connect(), writer = try node.connect()
        let granted = try loader.call(.get(GetRequest(key: b("user:1"), lease: true)))
        guard case .granted(let token) = Responses.leaseState(granted) else { return XCTFail("the lease is granted on a miss") }
        XCTAssertEqual(try writer.set(SetRequest(key: b("user:1"), value: b("fresh"))).statusCode, .ok)
        var fill = SetRequest(key: b("user:1"), value: b("loaded before the set")); fill.mode = .lease; fill.casVersion = token
        XCTAssertEqual(try loader.set(fill).statusCode, .leaseLost)
        XCTAssertEqual(try loader.get(b("user:1"))?.value, b("fresh"))
        // INCR and FLUSH revoke too.
        for revoke in ["incr", "flush"] {
            let key = b("k-\(revoke)")
            guard case .granted(let t) = Responses.leaseState(try loader.call(.get(GetRequest(key: key, lease: true)))) else {
                return XCTFail("lease for \(revoke)")
            }
            if revoke == "incr" {
                var incr = CounterRequest(key: key, delta: 1); incr.initial = 5
                XCTAssertEqual(try writer.call(.counter(incr)).statusCode, .ok)
            } else {
                XCTAssertEqual(try writer.call(.flush(namespace: [], all: false)).statusCode, .ok)
            }
            var late = SetRequest(key: key, value: b("late")); late.mode = .lease; late.casVersion = t
            XCTAssertEqual(try loader.set(late).statusCode, .leaseLost, "after \(revoke)")
        }
        // The lease's own fill is not revoked by itself.
        guard case .granted(let t2) = Responses.leaseState(try loader.call(.get(GetRequest(key: b("cold"), lease: true)))) else { return XCTFail() }
        var own = SetRequest(key: b("cold"), value: b("loaded")); own.mode = .lease; own.casVersion = t2
        XCTAssertEqual(try loader.set(own).statusCode, .ok)
    }

    /// Lease tokens cannot be guessed from one another.
    func testLeaseTokensAreRandom() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        var tokens: [UInt64] = []
        for i in 0..<20 {
            guard case .granted(let t) = Responses.leaseState(try c.call(.get(GetRequest(key: b("miss\(i)"), lease: true)))) else {
                return XCTFail("granted")
            }
            tokens.append(t)
        }
        XCTAssertEqual(Set(tokens).count, 20)
        let near = zip(tokens, tokens.dropFirst()).filter { max($0, $1) - min($0, $1) < 1 << 20 }.count
        XCTAssertEqual(near, 0, "successive tokens are not neighbours: \(tokens)")
        // Another client's guess (the next integer) cannot release or fill it.
        let other = try node.connect()
        XCTAssertEqual(try other.call(.release(namespace: [], key: b("miss0"), token: tokens[0] &+ 1)).statusCode, .notFound)
    }

    /// DESIGN.md "Images": replacing or deleting an original drops its stored variants, also
    /// variants stored before a restart.
    func testReplacingOrDeletingAnOriginalDropsItsVariants() throws {
        let dir = TempDir()
        var node: NodeProcess? = try NodeProcess(dataDir: dir.path)
        var c = try node!.connect()
        let png = try gradientPNG(width: 120, height: 80)
        func items(_ c: NodeConnection) throws -> (memory: Int, disk: Int) {
            let s = try statsObject(c)
            return (s["memory_items"] as? Int ?? -1, s["disk_items"] as? Int ?? -1)
        }
        func dropped(_ c: NodeConnection) throws -> Int { try statsObject(c)["variants_dropped"] as? Int ?? -1 }
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: png)).statusCode, .ok)
        XCTAssertEqual(try c.set(SetRequest(key: b("other"), value: png)).statusCode, .ok)
        for w: UInt16 in [40, 60] {
            XCTAssertEqual(try c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: w, maxHeight: w))).statusCode, .ok)
        }
        XCTAssertEqual(try c.call(.imageVariant(VariantRequest(key: b("other"), maxWidth: 40, maxHeight: 40))).statusCode, .ok)
        // (eventually: while the applier commits, an item may count in SQLite and in the log's backlog)
        XCTAssertTrue(try eventually { try items(c).disk == 5 }, "two originals and three variants")
        // Replace: both of photo's variants go, other's stays.
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: png)).statusCode, .ok)
        XCTAssertTrue(try eventually { try dropped(c) == 2 }, "variants_dropped \((try? dropped(c)) ?? -1)")
        XCTAssertTrue(try eventually { try items(c).disk == 3 && items(c).memory == 3 }, "\(String(describing: try? items(c)))")
        // A variant of the new version is served, then the original is deleted: it goes too.
        let v = try Responses.parseImageVariant(c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: 40, maxHeight: 40))))
        XCTAssertFalse(v.cached, "computed from the new original")
        XCTAssertEqual(try c.call(.delete(namespace: [], key: b("photo"), tiers: 0, version: nil, writeBehind: false)).statusCode, .ok)
        XCTAssertTrue(try eventually { try dropped(c) == 3 })
        // Across a restart: other's variant (stored before) is dropped when other is replaced.
        XCTAssertEqual(node!.terminate(), 0)
        node = nil
        node = try NodeProcess(dataDir: dir.path)
        c = try node!.connect()
        XCTAssertTrue(try eventually { try items(c).disk == 2 }, "other and its variant: \(String(describing: try? items(c)))")
        XCTAssertEqual(try c.set(SetRequest(key: b("other"), value: b("not an image any more"))).statusCode, .ok)
        XCTAssertTrue(try eventually { try dropped(c) == 1 }, "the variant stored before the restart is dropped")
        XCTAssertTrue(try eventually { try items(c).disk == 1 })
    }

    /// §3: on SIGTERM an open connection gets one unsolicited SHUTTING_DOWN frame (opcode 0,
    /// request id 0) before the node closes it.
    func testSigtermTellsOpenConnectionsWhyTheyClose() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        try c.ping()
        kill(node.process.processIdentifier, SIGTERM)
        let f = try c.readFrame()
        XCTAssertEqual(f.statusCode, .shuttingDown)
        XCTAssertEqual(f.opcode, 0)
        XCTAssertEqual(f.requestID, 0)
        XCTAssertEqual(String(decoding: f.value, as: UTF8.self), "the node is shutting down")
        XCTAssertTrue(peerCloses(c, within: 10))
        XCTAssertEqual(node.terminate(), 0)
    }

    /// §6: a connection accepted while the node drains gets SHUTTING_DOWN at once and is
    /// closed — it is not left waiting out the drain (an outside review: the listening socket
    /// stayed open but unwatched, so the kernel completed handshakes nobody accepted). Once the
    /// node has stopped serving, a connect is refused.
    func testAConnectionAcceptedWhileDrainingIsToldAndClosed() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path, extra: ["--drain-time", "6", "--log-level", "info"])
        let busy = try node.connect()
        let big = [UInt8](repeating: 7, count: 16 << 20)
        XCTAssertEqual(try busy.set(SetRequest(key: b("big"), value: big)).statusCode, .ok)
        // A GET whose 16 MiB answer is never read keeps the drain going.
        try busy.sendRaw(Request.get(GetRequest(key: b("big"))).frame(id: 9).encoded())
        usleep(200_000)
        kill(node.process.processIdentifier, SIGTERM)
        XCTAssertTrue(eventually(5) { node.stderr.contains("event=draining") })
        let started = Date()
        let late = try node.connect()
        let f = try late.readFrame()
        XCTAssertEqual(f.statusCode, .shuttingDown)
        XCTAssertEqual(f.opcode, 0)
        XCTAssertEqual(String(decoding: f.value, as: UTF8.self), "the node is shutting down")
        XCTAssertTrue(peerCloses(late, within: 2))
        XCTAssertLessThan(Date().timeIntervalSince(started), 3, "told at once, not at the end of the drain")
        // A second signal during the drain is logged, not silently dropped (an outside review).
        kill(node.process.processIdentifier, SIGTERM)
        XCTAssertTrue(eventually(5) { node.stderr.contains("event=shutdown_in_progress signal=SIGTERM") }, node.stderr)
        XCTAssertEqual(node.terminate(), 0)
    }

    /// §7.16: a variant of an invalidated original says so (response flag STALE); §7.17: an
    /// INVALIDATE of a negative entry removes it and answers NOT_FOUND, as DELETE does.
    func testAVariantOfAStaleOriginalIsFlaggedAndInvalidatingANegativeEntryIsNotFound() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        let png = try gradientPNG(width: 60, height: 40)
        XCTAssertEqual(try c.set(SetRequest(key: b("photo"), value: png)).statusCode, .ok)
        let stale = ResponseFlags.stale.rawValue
        let fresh = try c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: 20, maxHeight: 20)))
        XCTAssertEqual(fresh.statusCode, .ok)
        XCTAssertEqual(fresh.responseFlags & stale, 0)
        XCTAssertEqual(try c.call(.invalidate(namespace: [], key: b("photo"), tiers: 0, version: nil)).statusCode, .ok)
        let old = try c.call(.imageVariant(VariantRequest(key: b("photo"), maxWidth: 20, maxHeight: 20)))
        XCTAssertEqual(old.statusCode, .ok)
        XCTAssertEqual(old.responseFlags & stale, stale, "made from the stale bytes: flagged")
        XCTAssertEqual(try Responses.parseImageVariant(old).bytes, try Responses.parseImageVariant(fresh).bytes)

        var negative = SetRequest(key: b("url"), value: b("HTTP 404"))
        negative.negative = true
        XCTAssertEqual(try c.set(negative).statusCode, .ok)
        XCTAssertEqual(try c.call(.invalidate(namespace: [], key: b("url"), tiers: 0, version: nil)).statusCode, .notFound)
        XCTAssertEqual(try c.call(.get(GetRequest(key: b("url")))).statusCode, .notFound, "removed")
    }

    /// Outside review nu2: a frame whose lengths do not fit its header is refused by the client
    /// (TOO_LARGE, nothing sent) — a 4 GiB value was sent with its length cut to 32 bits and
    /// stored truncated; and a timeout under a microsecond is a timeout, not "no limit".
    func testTheClientRefusesAnUnencodableFrameAndTinyTimeoutsExpire() throws {
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let c = try node.connect()
        var s = SetRequest(key: b("k"), value: b("v"))
        s.namespace = [UInt8](repeating: 0x61, count: 300)
        XCTAssertThrowsError(try c.set(s)) { e in
            XCTAssertEqual((e as? ClientError)?.status, .tooLarge, "\(e)")
            XCTAssertTrue("\(e)".contains("nothing was sent"), "\(e)")
        }
        XCTAssertEqual(try c.call(.ping).statusCode, .ok, "the stream is still in step")
        XCTAssertThrowsError(try c.callAll([.ping, .set(s)]))
        XCTAssertEqual(try c.call(.ping).statusCode, .ok)
        // A listener that accepts and never answers: a 1e-9 s timeout gives up at once.
        let silent = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(silent) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(silent, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        listen(silent, 8)
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(silent, $0, &len) } }
        let port = UInt16(bigEndian: addr.sin_port)
        let started = Date()
        let r = try runCLI(["get", "k", "--server", "127.0.0.1:\(port)", "--timeout", "0.000000001"])
        XCTAssertEqual(r.code, 3, r.err)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "it timed out rather than waiting for good")
    }

    /// The CLI ends a value with a newline on a terminal only; a pipe gets the exact bytes.
    func testCLIEndsAValueWithANewlineOnlyOnATerminal() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script") else {
            throw XCTSkip("needs script(1) from util-linux to give the CLI a terminal")
        }
        let dir = TempDir()
        let node = try NodeProcess(dataDir: dir.path)
        let server = ["--server", "127.0.0.1:\(node.port)"]
        XCTAssertEqual(try runCLI(["set", "greeting"] + server, stdin: b("hello")).code, 0)
        let piped = try runCLI(["get", "greeting"] + server)
        XCTAssertEqual(piped.out, b("hello"), "a pipe gets the value exactly")
        let strata = try XCTUnwrap(builtExecutable("strata"))
        // script(1) runs the command on a pseudo-terminal and copies what it printed.
        let r = try runProcess("/usr/bin/script", ["-q", "-e", "-c", "\(strata) get greeting \(server.joined(separator: " "))", "/dev/null"])
        XCTAssertEqual(r.status, 0, r.output)
        XCTAssertTrue(r.output.hasSuffix("hello\r\n"), "a terminal gets a newline after the value: \(r.output.debugDescription)")
    }

    /// strata-bench --help lists every command.
    func testBenchHelpListsEveryCommand() throws {
        let bench = try XCTUnwrap(builtExecutable("strata-bench"))
        let r = try runProcess(bench, ["--help"])
        XCTAssertEqual(r.status, 0)
        for command in ["store", "run", "image"] {
            XCTAssertTrue(r.output.contains("\n  \(command) "), "--help names \(command): \(r.output)")
        }
    }
}
