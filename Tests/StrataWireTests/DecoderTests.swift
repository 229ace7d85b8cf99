import XCTest
@testable import StrataWire

final class DecoderTests: XCTestCase {
    let decoder = FrameDecoder(magic: Wire.requestMagic, maxBody: 4096)

    func sample(_ id: UInt32, value: Int = 10) -> [UInt8] {
        var s = SetRequest(key: Array("key\(id)".utf8), value: [UInt8](repeating: 7, count: value))
        s.flags = id
        return Request.set(s).frame(id: id).encoded()
    }

    func testFedOneByteAtATimeYieldsNothingUntilTheLastByte() throws {
        let bytes = sample(1)
        var buffer: [UInt8] = []
        for (i, b) in bytes.enumerated() {
            buffer.append(b)
            let r = try decoder.decode(buffer)
            if i < bytes.count - 1 { XCTAssertNil(r, "frame reported after \(i + 1) bytes") } else {
                XCTAssertEqual(r?.consumed, bytes.count)
                XCTAssertEqual(r?.frame.requestID, 1)
            }
        }
    }

    func testManyFramesInOneBufferComeOutInOrder() throws {
        var buffer: [UInt8] = []
        for i in 1...50 { buffer += sample(UInt32(i), value: i * 7) }
        var at = 0
        var ids: [UInt32] = []
        while let (f, used) = try buffer.withUnsafeBytes({ try decoder.decode(UnsafeRawBufferPointer(rebasing: $0[at...])) }) {
            ids.append(f.requestID)
            guard case .set(let s) = try Request.parse(f) else { return XCTFail() }
            XCTAssertEqual(s.value.count, Int(f.requestID) * 7)
            at += used
        }
        XCTAssertEqual(ids, Array(1...50))
        XCTAssertEqual(at, buffer.count)
    }

    func testTruncatedFrameNeedsMoreAndConsumesNothing() throws {
        let bytes = sample(3)
        for cut in [0, 1, 31, 32, bytes.count - 1] {
            XCTAssertNil(try decoder.decode(Array(bytes.prefix(cut))), "cut at \(cut)")
        }
    }

    func testBadMagicIsFatal() {
        var bytes = sample(1)
        bytes[0] = 0x00
        XCTAssertThrowsError(try decoder.decode(bytes)) { e in
            let w = e as! WireError
            XCTAssertEqual(w.status, .malformed)
            XCTAssertTrue(w.fatal)
        }
    }

    /// The magic is checked from the first byte (an outside review, sec7: a memcached client's
    /// `get foo\r\n` waited for the frame timeout); a right first byte waits for the header.
    func testBadMagicIsRefusedFromTheFirstByte() {
        XCTAssertThrowsError(try decoder.decode(Array("get foo\r\n".utf8))) { e in
            let w = e as! WireError
            XCTAssertEqual(w.status, .malformed)
            XCTAssertTrue(w.fatal)
            XCTAssertEqual(w.message, "bad magic 0x67 (expected 0x53)")
        }
        XCTAssertNil(try decoder.decode([Wire.requestMagic, 1, 0x10]))
        XCTAssertNil(try decoder.decode([UInt8]()))
    }

    func testBodyLengthOfAllOnesIsRefusedFromTheHeaderAlone() {
        var header = Array(sample(1).prefix(32))
        header[12] = 0xFF; header[13] = 0xFF; header[14] = 0xFF; header[15] = 0xFF
        XCTAssertThrowsError(try decoder.decode(header)) { e in
            let w = e as! WireError
            XCTAssertEqual(w.status, .tooLarge)
            XCTAssertTrue(w.fatal)
            XCTAssertEqual(w.requestID, 1)
        }
    }

    func testJustOverTheLimitIsRefusedAndAtTheLimitAccepted() throws {
        let atLimit = FrameDecoder(magic: Wire.requestMagic, maxBody: 4096)
        var s = SetRequest(key: Array("k".utf8), value: [])
        s.value = [UInt8](repeating: 1, count: 4096 - 22 - 1)
        XCTAssertNotNil(try atLimit.decode(Request.set(s).frame(id: 1).encoded()))
        s.value.append(1)
        XCTAssertThrowsError(try atLimit.decode(Request.set(s).frame(id: 1).encoded()))
    }

    func testLengthsWhoseSumExceedsTheBodyAreFatal() {
        var bytes = sample(1)
        bytes[10] = 0x01; bytes[11] = 0x00 // extras length 256 > body
        XCTAssertThrowsError(try decoder.decode(bytes)) { e in
            XCTAssertEqual((e as! WireError).status, .malformed)
            XCTAssertTrue((e as! WireError).fatal)
        }
        var long = sample(1)
        long[7] = 65 // namespace over 64
        XCTAssertThrowsError(try decoder.decode(long))
        var key = sample(1)
        key[8] = 0x04; key[9] = 0x01 // key 1025
        XCTAssertThrowsError(try decoder.decode(key))
    }

    func testUnknownOpcodeAndVersionAreAnsweredNotFatal() throws {
        var f = Frame(magic: Wire.requestMagic, opcode: 0x7F, requestID: 9)
        var r = try XCTUnwrap(decoder.decode(f.encoded()))
        XCTAssertThrowsError(try Request.parse(r.frame)) { e in
            XCTAssertEqual((e as! WireError).status, .unknownOpcode)
            XCTAssertFalse((e as! WireError).fatal)
            XCTAssertEqual((e as! WireError).requestID, 9)
        }
        f = Request.ping.frame(id: 4)
        f.protocolVersion = 9
        r = try XCTUnwrap(decoder.decode(f.encoded()))
        XCTAssertThrowsError(try Request.parse(r.frame)) { e in XCTAssertEqual((e as! WireError).status, .unsupportedVersion) }
    }

    func testBadFieldsAreInvalidArgumentOrMalformed() throws {
        func status(_ f: Frame) -> Status? {
            do { _ = try Request.parse(f); return nil } catch { return error.status }
        }
        var get = Request.get(GetRequest(key: [])).frame(id: 1)
        XCTAssertEqual(status(get), .invalidArgument) // empty key
        get = Request.get(GetRequest(key: [1])).frame(id: 1)
        get.tiers = 9
        XCTAssertEqual(status(get), .invalidArgument)
        get.tiers = 0
        get.flags = 0x80 // STALE is a SET flag
        XCTAssertEqual(status(get), .invalidArgument)
        get.flags = RequestFlags.all.rawValue // a FLUSH flag
        XCTAssertEqual(status(get), .invalidArgument)
        get.flags = RequestFlags([.lease, .wantMeta, .quiet]).rawValue
        XCTAssertNil(status(get), "GET takes LEASE, WANT_META and QUIET")
        var set = Request.set(SetRequest(key: [1], value: [])).frame(id: 1)
        set.extras = [0, 0]
        XCTAssertEqual(status(set), .malformed)
        set = Request.set(SetRequest(key: [1], value: [])).frame(id: 1)
        set.extras[0] = 9
        XCTAssertEqual(status(set), .invalidArgument) // mode
        set.extras[0] = 0
        set.extras[1] = 7
        XCTAssertEqual(status(set), .invalidArgument) // expiry kind
        var ttl = SetRequest(key: [1], value: [])
        ttl.expiry = .seconds(0)
        XCTAssertEqual(status(Request.set(ttl).frame(id: 1)), .invalidArgument)
        var ext = SetRequest(key: [1], value: [])
        ext.extended = [UInt8](repeating: 0, count: 4097)
        XCTAssertEqual(status(Request.set(ext).frame(id: 1)), .tooLarge)
        XCTAssertEqual(status(Request.scan(namespace: [], cursor: [], limit: 0).frame(id: 1)), .invalidArgument)
        var mget = Request.mget(namespace: [], keys: [[1]], tiers: 0).frame(id: 1)
        mget.value.append(0)
        XCTAssertEqual(status(mget), .malformed)
    }

    /// §2.2: every operation checks each field as soon as it is read, then the extras' size —
    /// a bad field beats a bad size (an outside review found IMAGE_VARIANT, SCAN and the sync
    /// operations checking the size first).
    func testABadFieldBeatsABadSizeForEveryOperation() throws {
        func status(_ f: Frame) -> Status? {
            do { _ = try Request.parse(f); return nil } catch { return error.status }
        }
        func with(_ r: Request, _ edit: (inout Frame) -> Void) -> Frame { var f = r.frame(id: 1); edit(&f); return f }
        let variant = Request.imageVariant(VariantRequest(key: [1], maxWidth: 8, maxHeight: 8))
        XCTAssertEqual(status(with(variant) { $0.extras[4] = 9; $0.extras.append(0) }), .invalidArgument, "fit 9, a byte left over")
        XCTAssertEqual(status(with(variant) { $0.extras = [0, 0, 0, 8, 0, 0] }), .invalidArgument, "width 0, short")
        XCTAssertEqual(status(with(variant) { $0.extras.append(0) }), .malformed, "good fields, a byte left over")
        XCTAssertEqual(status(with(variant) { $0.extras.removeLast() }), .malformed, "good fields, quality missing")
        let scan = Request.scan(namespace: [], cursor: [], limit: 0)
        XCTAssertEqual(status(with(scan) { $0.extras.append(0) }), .invalidArgument, "limit 0, a byte left over")
        XCTAssertEqual(status(with(.scan(namespace: [], cursor: [], limit: 5)) { $0.extras.append(0) }), .malformed)
        let digest = Request.syncDigest(SyncRequest(requester: [1], bucketBits: 2, maxVersion: 1))
        XCTAssertEqual(status(with(digest) { $0.extras.append(0) }), .invalidArgument, "bits 2, a byte left over")
        let check = Request.syncCheck(SyncCheck(requester: [1], entries: []))
        XCTAssertEqual(status(with(check) { $0.extras.append(0) }), .invalidArgument, "count 0, a byte left over")
        var incr = Request.counter(CounterRequest(key: [1], delta: 1)).frame(id: 1)
        incr.extras[8] = 2
        incr.extras.removeLast()
        XCTAssertEqual(status(incr), .invalidArgument, "has initial 2, short")
        // An expiry's kind is a field of its own, checked before its value's bytes (px2: MALFORMED).
        XCTAssertEqual(status(with(.set(SetRequest(key: [1], value: []))) { $0.extras = [0, 7, 0] }), .invalidArgument, "SET: kind 7, cut short")
        XCTAssertEqual(status(with(.touch(namespace: [], key: [1], tiers: 0, expiry: .never)) { $0.extras = [9] }), .invalidArgument, "TOUCH: kind 9, cut short")
        XCTAssertEqual(status(with(.touch(namespace: [], key: [1], tiers: 0, expiry: .never)) { $0.extras = [1] }), .malformed, "TOUCH: kind 1, cut short")
        // A field that cannot be wrong: the size decides.
        XCTAssertEqual(status(with(.delete(namespace: [], key: [1], tiers: 0, version: 5, writeBehind: false)) { $0.extras.append(0) }), .malformed)
        XCTAssertEqual(status(with(.hello(minVersion: 2, maxVersion: 3, token: [])) { $0.extras.append(0) }), .malformed)
    }

    func testErrorResponseForAnUnreadableHeaderUsesIdZero() {
        let e = WireError(.malformed, "bad magic", fatal: true)
        let f = Responses.error(e)
        XCTAssertEqual(f.requestID, 0)
        XCTAssertEqual(f.statusCode, .malformed)
        XCTAssertEqual(String(decoding: f.value, as: UTF8.self), "bad magic")
    }
}
