import Foundation
import XCTest
import StrataClient
import StrataCore
import StrataWire
import TestSupport

/// Where the memcached listener once differed from memcached or from MEMCACHED.md (an outside
/// review with raw sockets): ma C compared, flags that cannot map refused, duplicate flags and
/// long opaques refused, `delete` without a key, a later flush_all replacing a delayed one, and
/// negative entries (cached load failures) absent for every command.
final class MemcachedEdgeTests: XCTestCase {
    func testMaComparesItsCas() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms n 1 F7 T100\r\n5\r\n")
        XCTAssertEqual(mc.line(), "HD")
        let c = try metaCAS(mc, "n")
        mc.send("ma n C\(c + 1) v\r\n")
        XCTAssertEqual(mc.line(), "EX", "a changed CAS: nothing applied")
        mc.send("ma n C\(c + 1) q\r\n")
        XCTAssertEqual(mc.line(), "EX", "a failure is shown in quiet mode too")
        mc.send("mg n v\r\n")
        XCTAssertEqual(mc.line(), "VA 1")
        XCTAssertEqual(mc.line(), "5")
        mc.send("ma n C\(c) v D3 c\r\n")
        let answer = mc.line()
        XCTAssertTrue(answer.hasPrefix("VA 1 c"), answer)
        XCTAssertEqual(mc.line(), "8")
        XCTAssertNotEqual(try metaCAS(mc, "n"), c, "the counter has a new CAS")
        mc.send("mg n f t\r\n")
        let kept = mc.line()
        XCTAssertTrue(kept.hasPrefix("HD f7 t"), "flags and TTL kept: \(kept)")
        mc.send("ma n C\(c) MD\r\n")
        XCTAssertEqual(mc.line(), "EX", "the old CAS no longer matches")
        mc.send("ma nothing C5\r\n")
        XCTAssertEqual(mc.line(), "NF")
        mc.send("ms t 1\r\nx\r\n")
        XCTAssertEqual(mc.line(), "HD")
        mc.send("ma t C\(try metaCAS(mc, "t"))\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR cannot increment or decrement non-numeric value")
    }

    func testFlagsThatCannotMapDuplicatesAndLongOpaquesAreRefused() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms k 1 T1000\r\nv\r\n")
        XCTAssertEqual(mc.line(), "HD")
        for (command, flag) in [("md k I T30", "T"), ("ma n T30", "T")] {
            mc.send(command + "\r\n")
            let line = mc.line()
            XCTAssertTrue(line.hasPrefix("CLIENT_ERROR flag \(flag) is not supported"), "\(command): \(line)")
        }
        mc.send("ms a 1 MA N30\r\nx\r\n")
        XCTAssertTrue(mc.line().hasPrefix("CLIENT_ERROR flag N is not supported"))
        mc.send("mg a v\r\n")
        XCTAssertEqual(mc.line(), "EN", "nothing was created")
        mc.send("mg k v v\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR duplicate flag")
        let long = String(repeating: "o", count: 33), ok = String(repeating: "o", count: 32)
        mc.send("mg k O\(long)\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR opaque token too long")
        mc.send("mg k O\(ok)\r\n")
        XCTAssertEqual(mc.line(), "HD O\(ok)")
        mc.send("mg k t\r\n")
        let t = mc.line()
        XCTAssertTrue(t.hasPrefix("HD t9") || t.hasPrefix("HD t1000"), "md I T30 changed nothing: \(t)")
    }

    func testDeleteWithoutAKeyIsAnError() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("delete\r\ndelete a b c d\r\ndelete a 5\r\n")
        XCTAssertEqual(mc.line(), "ERROR")
        XCTAssertEqual(mc.line(), "ERROR")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]")
    }

    /// A command that ends in `noreply` gets no answer at all, an error included — as memcached
    /// (an outside review, mc6: behind twemproxy, which shares one connection per node among its
    /// clients, a refused noreply set's error went to another client's get, and every later
    /// answer of that node was one off). Errors are still counted.
    func testNoreplyCommandsSendNothingEvenWhenRefused() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir, ["--max-item", "64KiB"])
        defer { node.terminate() }
        mc.send("set n 0 0 1\r\n5\r\nset text 0 0 1\r\nx\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "STORED")
        let big = String(repeating: "a", count: 70_000)
        mc.send("set big 0 0 \(big.utf8.count) noreply\r\n\(big)\r\n" // over --max-item: SERVER_ERROR without noreply
                + "add big 0 0 \(big.utf8.count) noreply\r\n\(big)\r\n"
                + "set k 99999999999 0 1 noreply\r\nx\r\n"              // flags past 2^32 − 1
                + "set k 0 0 1 noreply\r\nxyz"                         // bad data chunk (its 3 bytes: the block and its end)
                + "incr text 1 noreply\r\nincr n abc noreply\r\n"
                + "touch n abc noreply\r\ndelete n 5 noreply\r\n"
                + "flush_all -1 noreply\r\nverbosity abc noreply\r\n"
                + "incr n 2 noreply\r\nget n\r\n")
        XCTAssertEqual(mc.line(), "VALUE n 0 1", "the first answer is the get's")
        XCTAssertEqual(mc.line(), "7")
        XCTAssertEqual(mc.line(), "END")
        mc.send("stats\r\n")
        var stats: [String: String] = [:]
        while true {
            let l = mc.line()
            if l == "END" || l.isEmpty { break }
            let parts = l.split(separator: " ")
            if parts.count == 3 { stats[String(parts[1])] = String(parts[2]) }
        }
        let errors = (Int(stats["client_errors"] ?? "") ?? 0) + (Int(stats["server_errors"] ?? "") ?? 0)
        XCTAssertGreaterThanOrEqual(errors, 9, "the refusals are counted: \(stats.filter { $0.key.contains("error") })")
    }

    func testALaterFlushAllReplacesADelayedOne() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("flush_all 1\r\n")
        XCTAssertEqual(mc.line(), "OK")
        mc.send("flush_all 0\r\n")
        XCTAssertEqual(mc.line(), "OK")
        mc.send("set kept 0 0 1\r\nv\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        usleep(1_600_000)
        mc.send("get kept\r\n")
        XCTAssertEqual(mc.read(until: "END\r\n"), "VALUE kept 0 1\r\nv\r\nEND\r\n", "the delayed flush was replaced")
        mc.send("flush_all 1\r\n")
        XCTAssertEqual(mc.line(), "OK")
        usleep(1_600_000)
        mc.send("get kept\r\n")
        XCTAssertEqual(mc.read(until: "END\r\n"), "END\r\n", "a delayed flush that was not replaced ran")
    }

    func testNegativeEntriesAreAbsentForEveryCommand() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        let c = try node.connect()
        func negative(_ key: String) throws {
            var s = SetRequest(key: b(key), value: b("load failed"))
            s.negative = true
            XCTAssertEqual(try c.set(s).statusCode, .ok)
        }
        try negative("k")
        mc.send("replace k 0 0 1\r\nv\r\nappend k 0 0 1\r\nv\r\ntouch k 10\r\nincr k 1\r\ncas k 0 0 1 1\r\nv\r\n")
        XCTAssertEqual(mc.line(), "NOT_STORED")
        XCTAssertEqual(mc.line(), "NOT_STORED")
        XCTAssertEqual(mc.line(), "NOT_FOUND")
        XCTAssertEqual(mc.line(), "NOT_FOUND")
        XCTAssertEqual(mc.line(), "NOT_FOUND")
        mc.send("ms k 1 MR\r\nv\r\nma k\r\nmg k v\r\n")
        XCTAssertEqual(mc.line(), "NS")
        XCTAssertEqual(mc.line(), "NF")
        XCTAssertEqual(mc.line(), "EN")
        mc.send("ma k N0 J3 v\r\n")
        XCTAssertEqual(mc.line(), "VA 1", "autovivify creates the counter over it")
        XCTAssertEqual(mc.line(), "3")
        try negative("k")
        mc.send("add k 0 0 1\r\na\r\nget k\r\n")
        XCTAssertEqual(mc.line(), "STORED", "add fills a cached failure")
        XCTAssertEqual(mc.read(until: "END\r\n"), "VALUE k 0 1\r\na\r\nEND\r\n")
        try negative("k")
        mc.send("delete k\r\n")
        XCTAssertEqual(mc.line(), "NOT_FOUND")
        let after = try c.call(.get(GetRequest(key: b("k"))))
        XCTAssertEqual(after.statusCode, .notFound, "the negative entry was removed")
        for flags in ["", " I", " x", " C1"] {
            try negative("k")
            mc.send("md k\(flags)\r\n")
            XCTAssertEqual(mc.line(), "NF", "md\(flags)")
            XCTAssertEqual(try c.call(.get(GetRequest(key: b("k")))).statusCode, .notFound, "md\(flags) removed it")
        }
    }

    /// Outside review mc4: an exptime past what microseconds hold crashed the node (an overflow)
    /// on every command that takes one; now it is the latest absolute time there is.
    func testAnExptimePastTheMicrosecondRangeIsTheFarFuture() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        for command in ["touch nothing 9223372036855", "touch nothing 9223372036854775807", "gat 9223372036855 nothing",
                        "mg nothing T9223372036855 v", "ma nothing N9223372036855 v"] {
            mc.send(command + "\r\n")
            XCTAssertFalse(mc.line().isEmpty, command)
            if command.hasPrefix("ma") { _ = mc.line() } // the counter's value line
        }
        mc.send("set k 0 9223372036855 1\r\nv\r\nms m 1 T9223372036854775807\r\nw\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "HD")
        mc.send("get k m\r\n")
        XCTAssertEqual(mc.line(), "VALUE k 0 1")
        XCTAssertEqual(mc.line(), "v")
        XCTAssertEqual(mc.line(), "VALUE m 0 1")
        XCTAssertEqual(mc.line(), "w")
        XCTAssertEqual(mc.line(), "END")
        XCTAssertTrue(node.process.isRunning)
    }

    /// Outside review mc4: a set or ms over --max-item left the older value readable; memcached
    /// removes it ("avoid stale data persisting"), and so does the listener now — on the disk
    /// tier too. The text add/replace/append leave the item as it was; ms does not in any mode.
    func testASetRefusedAsTooLargeRemovesTheOlderValue() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir, ["--max-item", "1KiB"])
        defer { node.terminate() }
        let big = String(repeating: "x", count: 2_000)
        for (command, removes) in [("set k 0 0 2000", true), ("ms k 2000", true), ("ms k 2000 MS", true),
                                   ("replace k 0 0 2000", false), ("append k 0 0 2000", false), ("ms k 2000 MR", true)] {
            mc.send("set k 0 0 3\r\nold\r\n")
            XCTAssertEqual(mc.line(), "STORED")
            mc.send("\(command)\r\n\(big)\r\nget k\r\n")
            XCTAssertEqual(mc.line(), "SERVER_ERROR object too large for cache", command)
            if removes {
                XCTAssertEqual(mc.line(), "END", "\(command): the older value is gone")
                XCTAssertNil(try node.connect().get(b("k"), tiers: 3), "\(command): from both tiers")
            } else {
                XCTAssertEqual(mc.line(), "VALUE k 0 3", command)
                XCTAssertEqual(mc.line(), "old")
                XCTAssertEqual(mc.line(), "END")
            }
        }
    }

    /// Outside review mc4: ms with I and an older C stored the value (stale) but answered HD
    /// without the c and s it asked for.
    func testAnInvalidatingMsReturnsTheFlagsItAskedFor() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        mc.send("ms k 2\r\nv1\r\n")
        XCTAssertEqual(mc.line(), "HD")
        let old = try metaCAS(mc, "k")
        mc.send("ms k 2\r\nv2\r\n")
        XCTAssertEqual(mc.line(), "HD")
        mc.send("ms k 3 C\(old) I c s\r\nv3x\r\n")
        let answer = mc.line()
        XCTAssertTrue(answer.hasPrefix("HD "), answer)
        XCTAssertTrue(answer.contains(" s3"), answer)
        XCTAssertEqual(answer.split(separator: " ").first { $0.hasPrefix("c") }.map { String($0.dropFirst()) }, String(try metaCAS(mc, "k")))
    }

    /// Outside review mc4: flags that need a number are refused without one (as memcached), a
    /// flush_all delay past 2^31 and a verbosity that is not a number are bad format, and an
    /// incr delta may carry '+' and leading zeros (memcached's strtoull).
    func testNumbersAreCheckedAsMemcachedDoes() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir)
        defer { node.terminate() }
        for command in ["mg k N v", "mg k R v"] {
            mc.send(command + "\r\n")
            XCTAssertEqual(mc.line(), "CLIENT_ERROR bad token in command line format", command)
        }
        mc.send("mg k v\r\n")
        XCTAssertEqual(mc.line(), "EN", "no lease was taken")
        mc.send("flush_all 2147483649\r\nverbosity abc\r\nverbosity 1\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR bad command line format")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR bad command line format")
        XCTAssertEqual(mc.line(), "OK")
        mc.send("set n 0 0 1\r\n5\r\nincr n +1\r\nincr n 00000000000000000000000002\r\nincr n -1\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "6")
        XCTAssertEqual(mc.line(), "8")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR invalid numeric delta argument")
    }

    /// Outside review mc5, against memcached 1.6.18: an mg miss keeps k and O; a mode is one
    /// character; ma with q answers nothing on success, v or not; an ms in any mode refused as
    /// too large removes the older value; an exptime of −2^63 is taken (expired); gat/gats keys
    /// count as touches only.
    func testMetaAnswersAndCountsAsMemcachedDoes() throws {
        let dir = TempDir()
        let (node, mc) = try startMemcachedNode(dir, ["--max-item", "1KiB"])
        defer { node.terminate() }
        mc.send("mg nokey k O77 v\r\n")
        XCTAssertEqual(mc.line(), "EN knokey O77")
        mc.send("ms k 2 M\r\nxy\r\nms k 2 MAppend\r\nxy\r\nma n M\r\nma n MIncr\r\nms k 2 MX\r\nxy\r\nma n MX\r\n")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR incorrect length for M token")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR incorrect length for M token")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR invalid or duplicate flag") // ma, as memcached 1.6.18
        XCTAssertEqual(mc.line(), "CLIENT_ERROR invalid or duplicate flag")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR invalid mode for ms M token")
        XCTAssertEqual(mc.line(), "CLIENT_ERROR invalid mode for ma M token")
        mc.send("set n 0 0 1\r\n5\r\nma n q v\r\nma n q\r\nmn\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "MN", "quiet successes send nothing, with v too")
        mc.send("get n\r\n")
        XCTAssertEqual(mc.line(), "VALUE n 0 1")
        XCTAssertEqual(mc.line(), "7")
        XCTAssertEqual(mc.line(), "END")
        let big = String(repeating: "x", count: 2_000)
        mc.send("set k 0 0 3\r\nold\r\nms k 2000 ME\r\n\(big)\r\nget k\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "SERVER_ERROR object too large for cache")
        XCTAssertEqual(mc.line(), "END", "an ms in add mode over the limit removes the older value too")
        mc.send("set e 0 -9223372036854775808 1\r\nv\r\nget e\r\n")
        XCTAssertEqual(mc.line(), "STORED")
        XCTAssertEqual(mc.line(), "END", "stored already expired")
        let before = numericStats(mc)
        mc.send("gat 100 n nothing\r\n")
        XCTAssertEqual(mc.line(), "VALUE n 0 1")
        XCTAssertEqual(mc.line(), "7")
        XCTAssertEqual(mc.line(), "END")
        let after = numericStats(mc)
        XCTAssertEqual(after["cmd_get"], before["cmd_get"], "gat keys are not gets")
        XCTAssertEqual(after["get_hits"], before["get_hits"])
        XCTAssertEqual(after["touch_hits"], (before["touch_hits"] ?? 0) + 1)
        XCTAssertEqual(after["touch_misses"], (before["touch_misses"] ?? 0) + 1)
        XCTAssertEqual(after["cmd_touch"], (before["cmd_touch"] ?? 0) + 2)
    }

    /// `stats` over the text protocol: the numeric lines, by name.
    private func numericStats(_ mc: TextSocket) -> [String: Int] {
        mc.send("stats\r\n")
        var stats: [String: Int] = [:]
        while true {
            let l = mc.line()
            if l == "END" || l.isEmpty { return stats }
            let p = l.split(separator: " ")
            if p.count == 3, let n = Int(p[2]) { stats[String(p[1])] = n }
        }
    }
}
