import XCTest
import StrataCore
import StrataWire
@testable import StrataServer

/// The credentials file, the permission table and the brute-force policy, without a node.
final class CredentialsUnitTests: XCTestCase {
    static func file(_ users: [(String, String, String, [String]?)]) -> [UInt8] {
        let list = users.map { name, token, role, ns -> String in
            var u = "{\"name\":\"\(name)\",\"token_sha256\":\"\(SHA256.hex(Array(token.utf8)))\",\"role\":\"\(role)\""
            if let ns { u += ",\"namespaces\":[" + ns.map { "\"\($0)\"" }.joined(separator: ",") + "]" }
            return u + "}"
        }
        return Array(("{\"users\":[" + list.joined(separator: ",") + "]}").utf8)
    }

    func testTheTokenPicksItsUserAndAWrongOneNone() throws {
        let c = try Credentials.parse(Self.file([("ops", "t-ops", "admin", nil), ("app1", "t-app1", "readwrite", ["app1", "tenant-*", ""]),
                                                 ("viewer", "t-view", "readonly", ["app1"])]))
        XCTAssertEqual(c.authenticate(Array("t-app1".utf8))?.name, "app1")
        XCTAssertEqual(c.authenticate(Array("t-ops".utf8))?.role, .admin)
        XCTAssertEqual(c.authenticate(Array("t-view".utf8))?.role, .readonly)
        XCTAssertNil(c.authenticate(Array("t-app".utf8)))
        XCTAssertNil(c.authenticate([]))
        let app1 = try XCTUnwrap(c.authenticate(Array("t-app1".utf8)))
        XCTAssertTrue(app1.scope.contains(Array("app1".utf8)))
        XCTAssertTrue(app1.scope.contains(Array("tenant-7".utf8)))
        XCTAssertTrue(app1.scope.contains([]), "\"\" is the default namespace")
        XCTAssertFalse(app1.scope.contains(Array("app10".utf8)), "an exact name is not a prefix")
        XCTAssertFalse(app1.scope.contains(Array("tenant".utf8)))
    }

    func testTheLegacyTokenIsAnAdminBesideTheFile() throws {
        let c = try Credentials.parse(Self.file([("app1", "t-app1", "readonly", ["app1"])]), legacyToken: Array("s3cret".utf8))
        let u = try XCTUnwrap(c.authenticate(Array("s3cret".utf8)))
        XCTAssertEqual(u.name, "token")
        XCTAssertEqual(u.role, .admin)
    }

    func testBadFilesAreRefusedWithTheReason() {
        func reason(_ bytes: [UInt8], legacy: [UInt8]? = nil) -> String {
            do { _ = try Credentials.parse(bytes, legacyToken: legacy); return "accepted" } catch { return error.description }
        }
        XCTAssertTrue(reason(Array("not json".utf8)).contains("not JSON"))
        XCTAssertTrue(reason(Array("{\"users\":[]}".utf8)).contains("no users"))
        XCTAssertTrue(reason(Self.file([("a", "x", "readwrite", ["a"]), ("a", "y", "readonly", ["a"])])).contains("appears twice"))
        XCTAssertTrue(reason(Self.file([("a", "x", "readwrite", ["a"]), ("b", "x", "readonly", ["a"])])).contains("same token"))
        XCTAssertTrue(reason(Self.file([("a", "x", "superuser", ["a"])])).contains("role must be"))
        XCTAssertTrue(reason(Self.file([("a", "x", "readonly", nil)])).contains("namespaces is missing"))
        XCTAssertTrue(reason(Self.file([("a", "x", "admin", ["a"])])).contains("an admin has every namespace"))
        XCTAssertTrue(reason(Self.file([("token", "x", "readonly", ["a"])]), legacy: [1]).contains("--auth-token-file"))
        XCTAssertTrue(reason(Array("{\"users\":[{\"name\":\"a\",\"token_sha256\":\"abc\",\"role\":\"admin\"}]}".utf8)).contains("64 hex"))
        XCTAssertTrue(reason(Array("{\"users\":[{\"name\":\"a b\",\"token_sha256\":\"\",\"role\":\"admin\"}]}".utf8)).contains("name must be"))
        XCTAssertTrue(reason(Array("{\"users\":[],\"x\":1}".utf8)).contains("unknown key"))
        XCTAssertTrue(reason(Array("{\"users\":[{\"name\":\"a\",\"token_sha256\":\"\(SHA256.hex([]))\",\"role\":\"admin\"}]}".utf8))
            .contains("empty token"))
    }

    /// A key given twice in one object is refused, whichever object and however it is spelt
    /// (an outside review, sec4: `"role":"readonly","role":"admin"` made an admin, the last one
    /// winning silently); the same name in different objects is not a duplicate.
    func testADuplicateKeyIsRefused() throws {
        let h = SHA256.hex(Array("t".utf8))
        func reason(_ text: String) -> String {
            do { _ = try Credentials.parse(Array(text.utf8)); return "accepted" } catch { return error.description }
        }
        for (text, key) in [
            ("{\"users\":[{\"name\":\"a\",\"token_sha256\":\"\(h)\",\"role\":\"readonly\",\"namespaces\":[\"a\"],\"role\":\"admin\"}]}", "role"),
            ("{\"users\":[{\"name\":\"a\",\"token_sha256\":\"\(h)\",\"role\":\"readonly\",\"namespaces\":[\"a\"],\"ro\\u006ce\":\"admin\"}]}", "role"),
            ("{\"users\":[],\n\"users\":[{\"name\":\"a\",\"token_sha256\":\"\(h)\",\"role\":\"admin\"}]}", "users"),
            ("{\"users\":[{\"name\":\"a\",\"token_sha256\":\"\(h)\",\"role\":\"readonly\",\"namespaces\":[\"a\"],\"namespaces\":[\"*\"]}]}", "namespaces"),
        ] {
            let r = reason(text)
            XCTAssertTrue(r.contains("the key '\(key)' appears twice"), r)
        }
        XCTAssertEqual(jsonDuplicateKey(in: Array("{\"users\":[],\n\"users\":1}".utf8))?.line, 2)
        // Values equal to keys, keys in sibling objects, escaped quotes: not duplicates.
        XCTAssertNil(jsonDuplicateKey(in: Array("{\"a\":\"a\",\"b\":[{\"c\":1},{\"c\":2}],\"d\":{\"c\":\"x\\\"c\\\"\"}}".utf8)))
        XCTAssertNoThrow(try Credentials.parse(Self.file([("a", "x", "readwrite", ["a"]), ("b", "y", "readonly", ["a"])])))
    }

    func testThePermissionTable() {
        let ns = Array("app1".utf8), other = Array("other".utf8)
        let ro = User(name: "r", tokenHash: [], role: .readonly, scope: NamespaceScope(patterns: ["app1"]))
        let rw = User(name: "w", tokenHash: [], role: .readwrite, scope: NamespaceScope(patterns: ["app1"]))
        let admin = User(name: "a", tokenHash: [], role: .admin, scope: NamespaceScope())
        let get = Request.get(GetRequest(key: [1], namespace: ns))
        let touchGet = Request.get(GetRequest(key: [1], namespace: ns, touch: .seconds(5)))
        let set = Request.set(SetRequest(key: [1], value: [], namespace: ns))
        let flushNs = Request.flush(namespace: ns, all: false)
        let flushAll = Request.flush(namespace: [], all: true)
        let scanOther = Request.scan(namespace: other, cursor: [], limit: 10)
        XCTAssertNil(ro.refusal(get, opcode: Opcode.get.rawValue))
        XCTAssertNotNil(ro.refusal(touchGet, opcode: Opcode.get.rawValue))
        XCTAssertNotNil(ro.refusal(set, opcode: Opcode.set.rawValue))
        XCTAssertNotNil(ro.refusal(flushNs, opcode: Opcode.flush.rawValue))
        XCTAssertNil(rw.refusal(set, opcode: Opcode.set.rawValue))
        XCTAssertNil(rw.refusal(flushNs, opcode: Opcode.flush.rawValue))
        XCTAssertNotNil(rw.refusal(flushAll, opcode: Opcode.flush.rawValue))
        XCTAssertNotNil(rw.refusal(scanOther, opcode: Opcode.scan.rawValue))
        XCTAssertNil(admin.refusal(flushAll, opcode: Opcode.flush.rawValue))
        XCTAssertNil(admin.refusal(scanOther, opcode: Opcode.scan.rawValue))
        XCTAssertEqual(ro.refusal(set, opcode: Opcode.set.rawValue), "user 'r' (readonly) may only read namespace 'app1' (SET)")
        XCTAssertEqual(rw.refusal(flushAll, opcode: Opcode.flush.rawValue), "user 'w' (readwrite) may not FLUSH ALL: admin only")
    }

    // MARK: Brute force

    func testFailuresPastTheThresholdAreDelayedDoublingToTheCap() {
        let clock = ManualClock()
        let t = AuthThrottle(clock: clock)
        var delays: [Double] = []
        for _ in 0..<12 {
            delays.append(t.failed("10.0.0.1").delay)
            clock.advance(seconds: 1)
        }
        XCTAssertEqual(delays, [0, 0, 0, 0, 0, 0.25, 0.5, 1, 2, 4, 4, 4])
        XCTAssertEqual(t.failed("10.0.0.2").delay, 0, "another address has its own count")
    }

    func testAnAddressIsForgottenAMinuteAfterItsLastFailure() {
        let clock = ManualClock()
        let t = AuthThrottle(clock: clock)
        for _ in 0..<7 { _ = t.failed("10.0.0.1") }
        XCTAssertEqual(t.failed("10.0.0.1").failures, 8)
        clock.advance(seconds: 59)
        XCTAssertEqual(t.failed("10.0.0.1").failures, 9, "within a minute of the last failure: still counted")
        clock.advance(seconds: 60)
        let d = t.failed("10.0.0.1")
        XCTAssertEqual(d.failures, 1)
        XCTAssertEqual(d.delay, 0)
    }

    func testTheTableIsBoundedAndDropsExpiredThenOldestEntries() {
        let clock = ManualClock()
        let t = AuthThrottle(capacity: 3, clock: clock)
        for i in 0..<3 { _ = t.failed("a\(i)"); clock.advance(seconds: 1) }
        XCTAssertEqual(t.count, 3)
        _ = t.failed("b")
        XCTAssertEqual(t.count, 3, "the oldest (a0) made room")
        for _ in 0..<5 { _ = t.failed("a1") }
        XCTAssertEqual(t.failed("a1").failures, 7, "a1 was kept")
        XCTAssertEqual(t.failed("a0").failures, 1, "a0 was dropped")
        clock.advance(seconds: 120)
        _ = t.failed("c")
        XCTAssertEqual(t.count, 1, "every expired entry goes when room is needed")
    }

    func testLogLinesAreBoundedPerAddress() {
        let clock = ManualClock()
        let t = AuthThrottle(logInterval: 10, clock: clock)
        var logged = 0
        for _ in 0..<100 {
            if t.failed("10.0.0.1").log { logged += 1 }
            clock.advance(seconds: 0.1)
        }
        XCTAssertEqual(logged, 1, "one line in 10 s")
        clock.advance(seconds: 1)
        let d = t.failed("10.0.0.1")
        XCTAssertTrue(d.log)
        XCTAssertEqual(d.suppressed, 99)
        XCTAssertTrue(t.failed("10.0.0.2").log, "another address logs on its own")
    }

    func testLogSafeEscapesWhatCouldForgeALine() {
        XCTAssertEqual(logSafe(Array("app1".utf8)), "app1")
        XCTAssertEqual(logSafe(Array("a b\nlevel=x".utf8)), "a\\x20b\\x0alevel\\x3dx")
        XCTAssertEqual(logSafe([]), "")
    }
}

/// Outside review sec2: a readwrite user's flushes wrote ~18,000 audit lines a second.
final class AuditBudgetTests: XCTestCase {
    func testAUsersLinesPastTheBoundAreCountedAndReportedWithItsNextLine() {
        let b = AuditBudget()
        var written = 0
        for _ in 0..<150 { if b.take("app", second: 10).write { written += 1 } }
        XCTAssertEqual(written, AuditBudget.perSecond)
        XCTAssertTrue(b.take("ops", second: 10).write, "another user has its own budget")
        let next = b.take("app", second: 11)
        XCTAssertTrue(next.write)
        XCTAssertEqual(next.report, 50, "the suppressed lines are reported")
        XCTAssertEqual(b.take("app", second: 11).report, 0, "once")
    }
}
