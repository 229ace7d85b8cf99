import Foundation
import XCTest
import StrataCore
import TestSupport

/// The meta flags that map onto Strata's versions and stale marks (E, ms I, md x), and the
/// ones refused with CLIENT_ERROR instead of being ignored (mg h/l/u/E, ma E), over a raw
/// socket against a real node (proto-spec/MEMCACHED.md §7).
final class MemcachedMetaFlagTests: XCTestCase {
    func testFlagsThatCannotMapAreRefusedWithAClientError() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms k 1\r\nv\r\n")
        XCTAssertEqual(mc.line(), "HD")
        for (command, flag) in [("mg k v h", "h"), ("mg k v l", "l"), ("mg k v u", "u"), ("mg k N30 E5", "E"), ("ma n N0 E5", "E")] {
            mc.send(command + "\r\n")
            let line = mc.line()
            XCTAssertTrue(line.hasPrefix("CLIENT_ERROR flag \(flag) is not supported"), "\(command): \(line)")
        }
        // The connection goes on, and nothing was changed.
        mc.send("mg k v\r\nmg n\r\n")
        XCTAssertEqual(mc.line(), "VA 1")
        XCTAssertEqual(mc.line(), "v")
        XCTAssertEqual(mc.line(), "EN")
    }

    /// An `mg … T` with N or R (or of a stale item) keeps the lease it takes: its own touch
    /// revokes what was held before, not the win it hands out, so the next client gets Z; a
    /// touch that found nothing revokes no lease (an outside review, mc10: two refillers).
    func testATouchingMgKeepsItsWinAndAMissedTouchRevokesNothing() throws {
        let dir = TempDir()
        let (node, a) = try startMemcachedNode(dir)
        defer { node.terminate() }
        let b = try TextSocket(port: try XCTUnwrap(node.memcachedPort))
        // Stale: md I, then A reads with T.
        a.send("ms s 1 T100\r\nx\r\nmd s I\r\nmg s T30 v\r\n")
        XCTAssertEqual(a.line(), "HD")
        XCTAssertEqual(a.line(), "HD")
        XCTAssertEqual(a.line(), "VA 1 W X")
        XCTAssertEqual(a.line(), "x")
        b.send("mg s v\r\n")
        XCTAssertEqual(b.line(), "VA 1 Z X", "A holds the refill")
        XCTAssertEqual(b.line(), "x")
        // Miss with N and T.
        a.send("mg m N30 T30 v\r\n")
        XCTAssertEqual(a.line(), "VA 0 W")
        XCTAssertEqual(a.line(), "")
        b.send("mg m N30 v\r\n")
        XCTAssertEqual(b.line(), "VA 0 Z")
        XCTAssertEqual(b.line(), "")
        // Refresh window with R and T.
        a.send("ms r 1 T10\r\nx\r\nmg r R30 T5 v\r\n")
        XCTAssertEqual(a.line(), "HD")
        XCTAssertEqual(a.line(), "VA 1 W")
        XCTAssertEqual(a.line(), "x")
        b.send("mg r R30 v\r\n")
        XCTAssertEqual(b.line(), "VA 1 Z")
        XCTAssertEqual(b.line(), "x")
        // A touch that finds nothing leaves the lease on the missing key alone.
        a.send("mg n N30 v\r\ntouch n 100\r\n")
        XCTAssertEqual(a.line(), "VA 0 W")
        XCTAssertEqual(a.line(), "")
        XCTAssertEqual(a.line(), "NOT_FOUND")
        b.send("mg n N30 v\r\n")
        XCTAssertEqual(b.line(), "VA 0 Z")
        XCTAssertEqual(b.line(), "")
        // A touch that touched revokes nothing either (the value a fill loads is still the
        // value), and neither does another reader's T (an outside review, mc11: every reader
        // sending T won).
        a.send("touch s 100\r\ngat 100 s\r\n")
        XCTAssertEqual(a.line(), "TOUCHED")
        XCTAssertEqual(a.line(), "VALUE s 0 1")
        XCTAssertEqual(a.line(), "x")
        XCTAssertEqual(a.line(), "END")
        for _ in 0..<3 {
            b.send("mg s T30 v\r\n")
            XCTAssertEqual(b.line(), "VA 1 Z X")
            XCTAssertEqual(b.line(), "x")
        }
        // Refused and no-op writes keep the winner's lease (mc11): the next reader still gets Z.
        b.send("ms s 1 C1\r\ny\r\nadd s 0 0 1\r\ny\r\ncas s 0 0 1 1\r\ny\r\nincr s 1\r\nms s 1 ME\r\ny\r\n")
        XCTAssertEqual(b.line(), "EX")
        XCTAssertEqual(b.line(), "NOT_STORED")
        XCTAssertEqual(b.line(), "EXISTS")
        XCTAssertEqual(b.line(), "CLIENT_ERROR cannot increment or decrement non-numeric value")
        XCTAssertEqual(b.line(), "NS")
        b.send("mg s v\r\n")
        XCTAssertEqual(b.line(), "VA 1 Z X", "the refused writes left A's lease")
        XCTAssertEqual(b.line(), "x")
        // A write that stored revokes it: the next reader of the (no longer stale) item wins nothing.
        b.send("set s 0 0 1\r\nz\r\nmg s v\r\n")
        XCTAssertEqual(b.line(), "STORED")
        XCTAssertEqual(b.line(), "VA 1")
        XCTAssertEqual(b.line(), "z")
        // R is judged on the TTL before the command's own touch: an item with 10 s left wins
        // its refresh with `mg k R30 T100`.
        a.send("ms w 1 T10\r\nx\r\nmg w R30 T100 v\r\n")
        XCTAssertEqual(a.line(), "HD")
        XCTAssertEqual(a.line(), "VA 1 W")
        XCTAssertEqual(a.line(), "x")
    }

    /// `ma` with N in the past makes a counter that has already expired: the c and t asked for
    /// are still returned — its CAS, 0 seconds left (an outside review, mc10).
    func testMaOfAnAlreadyExpiredCounterReturnsItsCasAndTTL() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ma k N-1 v t c k O1\r\n")
        let line = mc.line()
        let parts = line.split(separator: " ")
        XCTAssertEqual(parts.first, "VA", line)
        XCTAssertTrue(parts.contains("t0"), line)
        XCTAssertTrue(parts.contains { $0.hasPrefix("c") && UInt64($0.dropFirst()).map { $0 > 0 } == true }, line)
        XCTAssertTrue(parts.contains("kk") && parts.contains("O1"), line)
        XCTAssertEqual(mc.line(), "0")
        mc.send("mg k v\r\n")
        XCTAssertEqual(mc.line(), "EN", "already expired")
    }

    /// `flush_all` with a delay over 30 days takes it as a Unix time, as an exptime: one in the
    /// past flushes now (an outside review, mc10: it was read as seconds from now).
    func testFlushAllWithAnAbsoluteTimeInThePastFlushesNow() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("set k 0 0 1\r\na\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        mc.send("flush_all \(Int(Date().timeIntervalSince1970) - 10)\r\n")
        XCTAssertEqual(mc.line(), "OK")
        XCTAssertTrue(eventually(5) { mc.send("get k\r\n"); return mc.line() == "END" }, "flushed at once")
    }

    func testEGivesTheItemItsCasWhenNewerAndIsRefusedOtherwise() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms k 1 E5000\r\na\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(try metaCAS(mc, "k"), 5000)
        mc.send("ms k 1 E4000\r\nb\r\n")
        XCTAssertEqual(mc.line(), "NS", "a version not newer than the item's")
        mc.send("ms k 1 C5000 E6000 c\r\nc\r\n")
        XCTAssertEqual(mc.line(), "HD c6000", "CAS compared, then the new CAS set")
        mc.send("ms k 1 MA E7000\r\nd\r\nmg k v c\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(mc.line(), "VA 2 c7000")
        XCTAssertEqual(mc.line(), "cd")
        mc.send("md k I E6500\r\n")
        XCTAssertEqual(mc.line(), "EX", "an invalidate with an older version")
        mc.send("md k I E8000\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(try metaCAS(mc, "k"), 8000)
        mc.send("md k E9000\r\nms k 1 E8500\r\ne\r\nmg k\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(mc.line(), "NS", "the delete's version guards against an older write")
        XCTAssertEqual(mc.line(), "EN")
        mc.send("ms k 1 E18446744073709551615\r\nf\r\n")
        XCTAssertTrue(mc.line().hasPrefix("CLIENT_ERROR version "), "a version far ahead of the node's clock")
        mc.send("ms k 1 E0\r\nf\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR bad token in command line format")
    }

    func testMsWithIAndAnOlderCasStoresTheValueStale() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms k 1\r\na\r\n")
        XCTAssertEqual(mc.line(), "HD")
        let first = try metaCAS(mc, "k")
        mc.send("ms k 1 C\(first)\r\nb\r\n")
        XCTAssertEqual(mc.line(), "HD")
        // A writer that read the first copy: a plain CAS set fails, with I it lands stale.
        mc.send("ms k 1 C\(first)\r\nc\r\n")
        XCTAssertEqual(mc.line(), "EX")
        mc.send("ms k 1 C\(first) I\r\nc\r\n")
        XCTAssertEqual(mc.line(), "HD")
        mc.send("mg k v\r\n")
        XCTAssertEqual(mc.line(), "VA 1 W X", "stale: this client wins the refill")
        XCTAssertEqual(mc.line(), "c")
        mc.send("mg k v\r\n")
        XCTAssertEqual(mc.line(), "VA 1 Z X")
        XCTAssertEqual(mc.line(), "c")
        // With the current CAS, I is a plain CAS set (not stale); without C it is refused.
        let current = try metaCAS(mc, "k")
        mc.send("ms k 1 C\(current) I\r\nd\r\nmg k v\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(mc.line(), "VA 1")
        XCTAssertEqual(mc.line(), "d")
        mc.send("ms k 1 I\r\ne\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR I with ms needs C<cas>")
        mc.send("ms missing 1 C5 I\r\ne\r\n")
        XCTAssertEqual(mc.line(), "NF")
    }

    func testMdWithXEmptiesTheValueAndKeepsTheItem() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms k 5 F7 T1000\r\nhello\r\nmd k x\r\nmg k v f s t\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(mc.line(), "HD")
        let hit = mc.line()
        XCTAssertTrue(hit.hasPrefix("VA 0 f0 s0 t"), hit)
        let ttl = try XCTUnwrap(Int(hit.split(separator: " ").last!.dropFirst()))
        XCTAssertTrue((990...1000).contains(ttl), "the expiry is kept: \(hit)")
        XCTAssertEqual(mc.line(), "")
        mc.send("md k x I F3\r\nmg k v f\r\n")
        XCTAssertEqual(mc.line(), "HD")
        XCTAssertEqual(mc.line(), "VA 0 f3 W X", "with I the emptied item is stale")
        XCTAssertEqual(mc.line(), "")
        mc.send("md k x C1\r\nmd missing x\r\n")
        XCTAssertEqual(mc.line(), "EX")
        XCTAssertEqual(mc.line(), "NF")
    }
}
