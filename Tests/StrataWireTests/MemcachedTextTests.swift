import XCTest
@testable import StrataWire

/// The memcached text parser and encoder, byte by byte (proto-spec/MEMCACHED.md).
final class MemcachedTextTests: XCTestCase {
    let parser = MemcachedParser(maxValue: 1024)

    func parse(_ s: String) -> MemcachedParse { parse(Array(s.utf8)) }
    func parse(_ b: [UInt8]) -> MemcachedParse { b.withUnsafeBytes { parser.parse($0) } }
    func k(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// The listener counts commands by `nameIndex` (no String per command): it must point at
    /// `name` for every command, and every name must be reached.
    func testEveryCommandsNameIndexIsItsName() {
        var commands: [MemcachedCommand] = [.get(keys: [[1]], cas: false), .get(keys: [[1]], cas: true),
                                            .gat(exptime: 0, keys: [[1]], cas: false), .gat(exptime: 0, keys: [[1]], cas: true),
                                            .delete(key: [1], noreply: false), .arithmetic(key: [1], delta: 1, increment: true, noreply: false),
                                            .arithmetic(key: [1], delta: 1, increment: false, noreply: false), .touch(key: [1], exptime: 0, noreply: false),
                                            .flushAll(delay: 0, noreply: false), .stats(args: []), .version, .verbosity(noreply: false), .quit]
        commands += MemcachedStoreVerb.allCases.map { .store(MemcachedStore(verb: $0, key: [1], value: [])) }
        commands += [MemcachedMeta.Verb.get, .set, .delete, .arithmetic, .noop, .debug].map { .meta(MemcachedMeta(verb: $0, key: [1])) }
        for c in commands { XCTAssertEqual(MemcachedCommand.names[c.nameIndex], c.name) }
        XCTAssertEqual(Set(commands.map(\.nameIndex)), Set(MemcachedCommand.names.indices))
    }

    /// The listener answers `singleGet`'s lines without `parse`: wherever it answers, it must
    /// say what `parse` says, and it must answer the plain one-key forms.
    func testSingleGetAgreesWithTheParser() {
        func single(_ b: [UInt8]) -> (key: [UInt8], cas: Bool, consumed: Int)? {
            b.withUnsafeBytes { buf in MemcachedParser.singleGet(buf).map { (Array(buf[$0.key]), $0.cas, $0.consumed) } }
        }
        func check(_ b: [UInt8], line: UInt = #line) {
            guard let g = single(b) else { return }
            XCTAssertEqual(parse(b), .command(.get(keys: [g.key], cas: g.cas), consumed: g.consumed), line: line)
        }
        // The plain forms are recognised.
        XCTAssertEqual(single(k("get a\r\n"))?.key, k("a"))
        XCTAssertEqual(single(k("gets key:1\r\nget b\r\n"))?.consumed, 12)
        XCTAssertEqual(single(k("gets key:1\r\n"))?.cas, true)
        XCTAssertEqual(single(k("get a\n"))?.consumed, 6)
        XCTAssertEqual(single(k("get " + String(repeating: "k", count: 250) + "\r\n"))?.key.count, 250)
        XCTAssertEqual(single([0x67, 0x65, 0x74, 0x20, 0xC3, 0xA9, 13, 10])?.key, [0xC3, 0xA9])
        // Everything else is left to the parser.
        for s in ["get a b\r\n", "get a \r\n", "get  a\r\n", "get a", "get a\r", "get\r\n", "get \r\n", "gets\r\n",
                  "getsa b\r\n", "gat 1 a\r\n", "GET a\r\n", "get\ta\r\n", "get a\r\r\n", "get a\tb\r\n",
                  "get " + String(repeating: "k", count: 251) + "\r\n", "set a 0 0 1\r\nx\r\n"] {
            XCTAssertNil(single(k(s)), s)
        }
        XCTAssertNil(single([0x67, 0x65, 0x74, 0x20, 0x61, 0x7F, 13, 10]))
        XCTAssertNil(single([0x67, 0x65, 0x74, 0x20, 0x61, 0x00, 13, 10]))
        // And it agrees with `parse` on every line it answers, over random lines made of the
        // bytes that matter (seeded, so a failure repeats).
        let alphabet: [UInt8] = [0x67, 0x65, 0x74, 0x73, 0x20, 0x61, 13, 10, 0x09, 0x7F, 0x00, 0xC3, 0x7E, 0x21]
        var rng = SplitMixTestRNG(seed: 21)
        for _ in 0..<20_000 {
            var b: [UInt8] = Array("get".utf8) + (rng.next() % 2 == 0 ? [0x20] : [0x73, 0x20])
            for _ in 0..<Int(rng.next() % 12) { b.append(alphabet[Int(rng.next() % UInt64(alphabet.count))]) }
            check(b)
            check(Array(b.prefix(Int(rng.next() % UInt64(b.count + 1)))))
        }
    }

    func testRetrievalCommandsTakeEveryKey() {
        XCTAssertEqual(parse("get a bb ccc\r\n"), .command(.get(keys: [k("a"), k("bb"), k("ccc")], cas: false), consumed: 14))
        XCTAssertEqual(parse("gets a\r\n"), .command(.get(keys: [k("a")], cas: true), consumed: 8))
        XCTAssertEqual(parse("gat 10 a b\r\n"), .command(.gat(exptime: 10, keys: [k("a"), k("b")], cas: false), consumed: 12))
        XCTAssertEqual(parse("gats -1 a\r\n"), .command(.gat(exptime: -1, keys: [k("a")], cas: true), consumed: 11))
        // A bare LF ends a line too, and runs of spaces separate tokens.
        XCTAssertEqual(parse("get  a   b\n"), .command(.get(keys: [k("a"), k("b")], cas: false), consumed: 11))
        XCTAssertEqual(parse("get\r\n"), .error("ERROR", consumed: 5, swallow: 0, close: false))
    }

    func testStorageCommandsCarryFlagsExptimeDataAndNoreply() {
        let set = MemcachedStore(verb: .set, key: k("key"), flags: 4294967295, exptime: -5, value: [0, 13, 10, 255])
        XCTAssertEqual(parse([UInt8]("set key 4294967295 -5 4\r\n".utf8) + [0, 13, 10, 255, 13, 10]),
                       .command(.store(set), consumed: 31))
        var cas = MemcachedStore(verb: .cas, key: k("k"), flags: 1, exptime: 0, value: k("v"), casUnique: 18446744073709551615)
        cas.noreply = true
        XCTAssertEqual(parse("cas k 1 0 1 18446744073709551615 noreply\r\nv\r\n"), .command(.store(cas), consumed: 45))
        for verb in ["add", "replace", "append", "prepend"] {
            guard case .command(.store(let s), _) = parse("\(verb) k 0 0 0\r\n\r\n") else { return XCTFail(verb) }
            XCTAssertEqual(s.verb.rawValue, verb)
            XCTAssertEqual(s.value, [])
        }
    }

    func testAShortReadConsumesNothingAtAnyByte() {
        let whole = Array("set k 7 0 5\r\nhello\r\nget k\r\n".utf8)
        for n in 0..<20 { XCTAssertEqual(parse(Array(whole[0..<n])), .needMore, "after \(n) bytes") }
        guard case .command(.store(let s), 20) = parse(whole) else { return XCTFail() }
        XCTAssertEqual(s.value, k("hello"))
        XCTAssertEqual(parse(Array(whole[20...])), .command(.get(keys: [k("k")], cas: false), consumed: 7))
    }

    func testADataBlockLongerThanDeclaredIsABadDataChunk() {
        XCTAssertEqual(parse("set k 0 0 2\r\nabcd\r\n"), .error("CLIENT_ERROR bad data chunk", consumed: 17, swallow: 0, close: false))
    }

    /// A set over the limit becomes `tooLarge` (the listener removes the key's older value, as
    /// memcached does); the other storage commands are refused as before, the item untouched.
    func testATooLargeValueIsRefusedFromItsLengthAndSwallowed() {
        XCTAssertEqual(parse("set k 0 0 1025\r\n"), .command(.tooLarge(key: Array("k".utf8), swallow: 1027, meta: false), consumed: 16))
        XCTAssertEqual(parse("set k 0 0 99999999999999\r\n"),
                       .command(.tooLarge(key: Array("k".utf8), swallow: 100_000_000_000_001, meta: false), consumed: 26))
        XCTAssertEqual(parse("add k 0 0 1025\r\n"),
                       .error("SERVER_ERROR object too large for cache", consumed: 16, swallow: 1027, close: false))
        XCTAssertEqual(MemcachedCommand.tooLarge(key: [1], swallow: 3, meta: false).name, "set")
        XCTAssertEqual(MemcachedCommand.tooLarge(key: [1], swallow: 3, meta: true).nameIndex, MemcachedCommand.names.firstIndex(of: "ms"))
        XCTAssertEqual(parse("set k 0 0 -1\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 14, swallow: 0, close: true))
    }

    func testALineWithoutNewlinePastTheBoundClosesTheConnection() {
        let long = [UInt8]("set ".utf8) + [UInt8](repeating: 0x61, count: 2045)
        XCTAssertEqual(parse(Array(long[0..<2048])), .needMore)
        XCTAssertEqual(parse(long), .error("CLIENT_ERROR line too long", consumed: 2049, swallow: 0, close: true))
        // Retrieval lines may hold many keys.
        let many = "get " + Array(repeating: String(repeating: "k", count: 250), count: 40).joined(separator: " ") + "\r\n"
        guard case .command(.get(let keys, false), _) = parse(many) else { return XCTFail() }
        XCTAssertEqual(keys.count, 40)
    }

    func testKeysOver250BytesOrWithControlBytesAreRefused() {
        let ok = String(repeating: "k", count: 250)
        XCTAssertEqual(parse("get \(ok)\r\n"), .command(.get(keys: [k(ok)], cas: false), consumed: 256))
        XCTAssertEqual(parse("get \(ok)k\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 257, swallow: 0, close: false))
        XCTAssertEqual(parse("delete a\u{7}b\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 12, swallow: 0, close: false))
        XCTAssertEqual(parse("set a\tb 0 0 1\r\nx\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 15, swallow: 3, close: false))
    }

    /// A refused storage line whose length is a number drops its data block as it arrives, so
    /// the value is never run as commands (an attacker's review stored `flush_all` under a
    /// 251-byte key and the namespace was flushed).
    func testARefusedStorageLineDropsItsDataBlock() {
        let long = String(repeating: "k", count: 251)
        XCTAssertEqual(parse("set \(long) 0 0 9\r\nflush_all\r\n"),
                       .error("CLIENT_ERROR bad command line format", consumed: 263, swallow: 11, close: false))
        XCTAssertEqual(parse("set k x 0 5\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 13, swallow: 7, close: false))
        XCTAssertEqual(parse("set k 0 x 5\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 13, swallow: 7, close: false))
        XCTAssertEqual(parse("cas k 0 0 5 x\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 15, swallow: 7, close: false))
        // The wrong number of words: its block's end cannot be known, so the connection closes.
        XCTAssertEqual(parse("set victim 0 0 9 junk extra\r\nflush_all\r\n"), .error("ERROR", consumed: 29, swallow: 0, close: true))
        XCTAssertEqual(parse("set a b c 0 0 9\r\n"), .error("ERROR", consumed: 17, swallow: 0, close: true))
        XCTAssertEqual(parse("set k 0 0\r\n"), .error("ERROR", consumed: 11, swallow: 0, close: true))
        XCTAssertEqual(parse("set k 0 0 x\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 13, swallow: 0, close: true),
                       "no length to go by: the connection closes")
        XCTAssertEqual(parse("ms k 99999999999999999999\r\nflush_all\r\n"), .error("CLIENT_ERROR bad data chunk", consumed: 27, swallow: 0, close: true))
    }

    /// Building a long answer grows its buffer geometrically (an exact reserve before every
    /// append made a 10 MB multi-get quadratic: 2 s of loop time).
    func testAnswersGrowTheirBufferGeometrically() {
        var out: [UInt8] = []
        var reallocations = 0
        let value = [UInt8](repeating: 0x78, count: 10_000)
        for _ in 0..<1000 {
            let before = out.capacity
            MemcachedResponse.value(key: Array("b".utf8), flags: 0, data: value, cas: nil, into: &out)
            if out.capacity != before { reallocations += 1 }
        }
        XCTAssertLessThan(reallocations, 40, "10 MB in 1,000 appends")
        var frames: [UInt8] = []
        reallocations = 0
        for i in 0..<10_000 {
            let before = frames.capacity
            Frame(magic: Wire.responseMagic, opcode: 1, requestID: UInt32(i)).encode(into: &frames)
            if frames.capacity != before { reallocations += 1 }
        }
        XCTAssertLessThan(reallocations, 40)
    }

    func testOtherCommands() {
        XCTAssertEqual(parse("delete k\r\n"), .command(.delete(key: k("k"), noreply: false), consumed: 10))
        XCTAssertEqual(parse("delete k 0 noreply\r\n"), .command(.delete(key: k("k"), noreply: true), consumed: 20))
        XCTAssertEqual(parse("delete k 5\r\n"),
                       .error("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]", consumed: 12, swallow: 0, close: false))
        XCTAssertEqual(parse("incr k 18446744073709551615\r\n"),
                       .command(.arithmetic(key: k("k"), delta: .max, increment: true, noreply: false), consumed: 29))
        XCTAssertEqual(parse("decr k 1 noreply\r\n"), .command(.arithmetic(key: k("k"), delta: 1, increment: false, noreply: true), consumed: 18))
        XCTAssertEqual(parse("incr k x\r\n"), .error("CLIENT_ERROR invalid numeric delta argument", consumed: 10, swallow: 0, close: false))
        XCTAssertEqual(parse("incr k 18446744073709551616\r\n"),
                       .error("CLIENT_ERROR invalid numeric delta argument", consumed: 29, swallow: 0, close: false))
        XCTAssertEqual(parse("touch k 60 noreply\r\n"), .command(.touch(key: k("k"), exptime: 60, noreply: true), consumed: 20))
        XCTAssertEqual(parse("flush_all\r\n"), .command(.flushAll(delay: 0, noreply: false), consumed: 11))
        XCTAssertEqual(parse("flush_all 30 noreply\r\n"), .command(.flushAll(delay: 30, noreply: true), consumed: 22))
        XCTAssertEqual(parse("flush_all noreply\r\n"), .command(.flushAll(delay: 0, noreply: true), consumed: 19))
        XCTAssertEqual(parse("stats\r\n"), .command(.stats(args: []), consumed: 7))
        XCTAssertEqual(parse("stats settings\r\n"), .command(.stats(args: ["settings"]), consumed: 16))
        XCTAssertEqual(parse("version\r\n"), .command(.version, consumed: 9))
        XCTAssertEqual(parse("version noreply\r\n"), .command(.version, consumed: 17)) // memcached 1.6 ignores arguments
        XCTAssertEqual(parse("stats noreply\r\n"), .error("ERROR", consumed: 15, swallow: 0, close: false))
        XCTAssertEqual(parse("verbosity noreply\r\n"), .command(.verbosity(noreply: true), consumed: 19))
        XCTAssertEqual(parse("verbosity a b c\r\n"), .error("ERROR", consumed: 17, swallow: 0, close: false))
        XCTAssertEqual(parse("verbosity 1 noreply\r\n"), .command(.verbosity(noreply: true), consumed: 21))
        XCTAssertEqual(parse("verbosity abc\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 15, swallow: 0, close: false))
        XCTAssertEqual(parse("verbosity 1 x\r\n").consumedBytes, 15)
        XCTAssertEqual(parse("quit\r\n"), .command(.quit, consumed: 6))
        XCTAssertEqual(parse("\r\n"), .error("ERROR", consumed: 2, swallow: 0, close: false))
        XCTAssertEqual(parse("GET k\r\n"), .error("ERROR", consumed: 7, swallow: 0, close: false))
        XCTAssertEqual(parse("shutdown\r\n"), .error("ERROR", consumed: 10, swallow: 0, close: false))
    }

    /// Numbers as memcached's `safe_strtoul`/`safe_strtol` read them: a leading '+' in flags,
    /// exptime, a CAS unique, a verbosity level and a flush delay; "-0" flags are 0. A data
    /// block's length stays unsigned digits only (an outside review, mc10).
    func testTextNumbersTakeALeadingPlusAsMemcachedDoes() {
        XCTAssertEqual(parse("set k +5 +100 1\r\na\r\n"),
                       .command(.store(MemcachedStore(verb: .set, key: k("k"), flags: 5, exptime: 100, value: k("a"))), consumed: 20))
        XCTAssertEqual(parse("set k -0 0 1\r\na\r\n"),
                       .command(.store(MemcachedStore(verb: .set, key: k("k"), flags: 0, exptime: 0, value: k("a"))), consumed: 17))
        XCTAssertEqual(parse("cas k 0 0 1 +7\r\na\r\n"),
                       .command(.store(MemcachedStore(verb: .cas, key: k("k"), flags: 0, exptime: 0, value: k("a"), casUnique: 7)), consumed: 19))
        XCTAssertEqual(parse("touch k +100\r\n"), .command(.touch(key: k("k"), exptime: 100, noreply: false), consumed: 14))
        XCTAssertEqual(parse("gat +100 k\r\n"), .command(.gat(exptime: 100, keys: [k("k")], cas: false), consumed: 12))
        XCTAssertEqual(parse("verbosity +1\r\n"), .command(.verbosity(noreply: false), consumed: 14))
        XCTAssertEqual(parse("flush_all +0\r\n"), .command(.flushAll(delay: 0, noreply: false), consumed: 14))
        // Still refused: a signed length, a sign alone or twice, a negative flag.
        XCTAssertEqual(parse("set k 0 0 +1\r\na\r\n"), .error(MemcachedParser.badFormat, consumed: 14, swallow: 0, close: true))
        XCTAssertEqual(parse("set k -5 0 1\r\na\r\n"), .error(MemcachedParser.badFormat, consumed: 14, swallow: 3, close: false))
        XCTAssertEqual(parse("touch k +\r\n"), .error("CLIENT_ERROR invalid exptime argument", consumed: 11, swallow: 0, close: false))
        XCTAssertEqual(parse("touch k +-5\r\n"), .error("CLIENT_ERROR invalid exptime argument", consumed: 13, swallow: 0, close: false))
    }

    /// A last token `noreply` silences the command's errors even where it stands in an
    /// argument's place, as memcached's handlers take it (an outside review, mc10).
    func testNoreplyInAnArgumentsPlaceSilencesTheError() {
        XCTAssertEqual(parse("incr k noreply\r\n"),
                       .error("CLIENT_ERROR invalid numeric delta argument", consumed: 16, swallow: 0, close: false, noreply: true))
        XCTAssertEqual(parse("decr k noreply\r\n"),
                       .error("CLIENT_ERROR invalid numeric delta argument", consumed: 16, swallow: 0, close: false, noreply: true))
        XCTAssertEqual(parse("touch k noreply\r\n"),
                       .error("CLIENT_ERROR invalid exptime argument", consumed: 17, swallow: 0, close: false, noreply: true))
        XCTAssertEqual(parse("cas k 0 0 1 noreply\r\nb\r\n"),
                       .error(MemcachedParser.badFormat, consumed: 21, swallow: 3, close: false, noreply: true))
        XCTAssertEqual(parse("incr k x\r\n"), .error("CLIENT_ERROR invalid numeric delta argument", consumed: 10, swallow: 0, close: false))
    }

    func testValueLinesAreEncodedExactly() {
        var out: [UInt8] = []
        MemcachedResponse.value(key: k("k"), flags: 42, data: [0, 10, 13], cas: nil, into: &out)
        MemcachedResponse.value(key: k("k2"), flags: 0, data: [], cas: 18446744073709551615, into: &out)
        out += MemcachedResponse.end
        XCTAssertEqual(out, [UInt8]("VALUE k 42 3\r\n".utf8) + [0, 10, 13] + [UInt8]("\r\nVALUE k2 0 0 18446744073709551615\r\n\r\nEND\r\n".utf8))
    }

    func testExptimeIsRelativeUpToThirtyDaysThenAbsolute() {
        let now: Int64 = 1_800_000_000
        XCTAssertEqual(MemcachedExpiry.resolve(0, nowUnixSeconds: now), .never)
        XCTAssertEqual(MemcachedExpiry.resolve(-1, nowUnixSeconds: now), .expired)
        XCTAssertEqual(MemcachedExpiry.resolve(1, nowUnixSeconds: now), .at(unixSeconds: now + 1))
        XCTAssertEqual(MemcachedExpiry.resolve(2_592_000, nowUnixSeconds: now), .at(unixSeconds: now + 2_592_000))
        XCTAssertEqual(MemcachedExpiry.resolve(2_592_001, nowUnixSeconds: now), .expired) // 1970 + 30 days: past
        XCTAssertEqual(MemcachedExpiry.resolve(now + 60, nowUnixSeconds: now), .at(unixSeconds: now + 60))
    }
}

/// The meta commands' lines and the base64 of `b` keys.
final class MemcachedMetaTests: XCTestCase {
    let parser = MemcachedParser(maxValue: 1024)
    func parse(_ s: String) -> MemcachedParse { Array(s.utf8).withUnsafeBytes { parser.parse($0) } }
    func k(_ s: String) -> [UInt8] { Array(s.utf8) }

    /// Meta numbers take a leading '+' before a digit, as memcached's do (an outside review).
    func testMetaNumbersTakeALeadingPlus() {
        func number(_ token: String) -> MetaNumber {
            MemcachedMeta(verb: .arithmetic, key: [1], flags: [.init(letter: 0x44, token: Array(token.utf8))]).number("D")
        }
        XCTAssertEqual(number("+5"), .value(5))
        XCTAssertEqual(number("5"), .value(5))
        XCTAssertEqual(number("-5"), .value(-5))
        XCTAssertEqual(number("+"), .invalid)
        XCTAssertEqual(number("+-5"), .invalid)
        XCTAssertEqual(number("++5"), .invalid)
    }

    func testMetaLinesKeepTheirFlagsInOrder() {
        XCTAssertEqual(parse("mg foo t f v O123\r\n"),
                       .command(.meta(MemcachedMeta(verb: .get, key: k("foo"), flags: [.init("t"), .init("f"), .init("v"), .init("O", "123")])), consumed: 19))
        XCTAssertEqual(parse("ms foo 2 T90 F7 MA\r\nhi\r\n"),
                       .command(.meta(MemcachedMeta(verb: .set, key: k("foo"), flags: [.init("T", "90"), .init("F", "7"), .init("M", "A")], value: k("hi"))), consumed: 24))
        XCTAssertEqual(parse("mn\r\n"), .command(.meta(MemcachedMeta(verb: .noop, key: [])), consumed: 4))
        XCTAssertEqual(parse("ma n N0 J10 D3 MD v\r\n").debugDescriptionPrefix, "command")
        XCTAssertEqual(parse("ms foo 3\r\nhi"), .needMore)
        XCTAssertEqual(parse("ms foo 2\r\nhiya\r\n"), .error("CLIENT_ERROR bad data chunk", consumed: 14, swallow: 0, close: false))
        XCTAssertEqual(parse("ms foo 2000\r\n"), .command(.tooLarge(key: Array("foo".utf8), swallow: 2002, meta: true), consumed: 13))
        XCTAssertEqual(parse("ms foo 2000 MS\r\n"), .command(.tooLarge(key: Array("foo".utf8), swallow: 2002, meta: true), consumed: 16))
        XCTAssertEqual(parse("ms foo 2000 MA\r\n"), .command(.tooLarge(key: Array("foo".utf8), swallow: 2002, meta: true), consumed: 16))
        XCTAssertEqual(parse("mg foo 1\r\n"), .error("CLIENT_ERROR invalid flag", consumed: 10, swallow: 0, close: false))
        XCTAssertEqual(parse("mg\r\n"), .error("ERROR", consumed: 4, swallow: 0, close: false))
    }

    func testBase64KeysAreDecodedAndMayHoldAnyByte() {
        XCTAssertEqual(parse("mg AP8K b v\r\n"), .command(.meta(MemcachedMeta(verb: .get, key: [0, 255, 10], flags: [.init("b"), .init("v")])), consumed: 13))
        XCTAssertEqual(parse("mg AP8 b\r\n"), .error("CLIENT_ERROR error decoding key", consumed: 10, swallow: 0, close: false))
        // A refused `ms` drops its block: the value is never run as commands.
        let long = String(repeating: "k", count: 251)
        XCTAssertEqual(parse("ms \(long) 9\r\nflush_all\r\n"), .error("CLIENT_ERROR bad command line format", consumed: 258, swallow: 11, close: false))
        XCTAssertEqual(parse("ms AP8 9 b\r\nflush_all\r\n"), .error("CLIENT_ERROR error decoding key", consumed: 12, swallow: 11, close: false))
        XCTAssertEqual(parse("ms k 9 !\r\nflush_all\r\n"), .error("CLIENT_ERROR invalid flag", consumed: 10, swallow: 11, close: false))
        XCTAssertEqual(parse("ms k 9 T1 T2\r\nflush_all\r\n"), .error("CLIENT_ERROR duplicate flag", consumed: 14, swallow: 11, close: false))
        for n in 0..<40 {
            let bytes = (0..<n).map { UInt8(truncatingIfNeeded: $0 &* 73 &+ 5) }
            XCTAssertEqual(Base64.decode(Base64.encode(bytes)), bytes)
        }
        XCTAssertEqual(Base64.encode(k("foobar")), k("Zm9vYmFy"))
        XCTAssertEqual(Base64.encode(k("fo")), k("Zm8="))
        XCTAssertNil(Base64.decode(k("Zm=v")))
    }
}

extension MemcachedParse {
    var debugDescriptionPrefix: String {
        switch self {
        case .needMore: return "needMore"
        case .command: return "command"
        case .error: return "error"
        }
    }
}

/// A small seeded generator for the tests (SplitMix64).
struct SplitMixTestRNG {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
