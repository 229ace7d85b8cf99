import StrataWire

/// What a response said, for counting hits, misses and errors.
enum Reply: Equatable {
    case hit, miss, stored, error(String)
}

/// One protocol's requests and responses for the load loop: only the codec differs between
/// targets, so a comparison measures the servers, not the clients.
protocol LoadCodec: Sendable {
    var name: String { get }
    mutating func appendGet(_ key: [UInt8], into out: inout [UInt8])
    mutating func appendSet(_ key: [UInt8], _ value: [UInt8], into out: inout [UInt8])
    /// One reply from the front of `buffer`, or nil when it is not complete.
    func parse(_ buffer: UnsafeRawBufferPointer) -> (Reply, Int)?
}

/// Strata's binary protocol (PROTOCOL.md), through StrataWire.
struct StrataLoadCodec: LoadCodec {
    let name = "strata"
    var nextID: UInt32 = 1
    var tiers: UInt8 = 0
    var writeBehind = false
    var namespace: [UInt8] = []
    let decoder = FrameDecoder(magic: Wire.responseMagic, maxBody: 64 << 20)

    mutating func appendGet(_ key: [UInt8], into out: inout [UInt8]) {
        Request.get(GetRequest(key: key, namespace: namespace, tiers: tiers)).frame(id: nextID).encode(into: &out)
        nextID &+= 1
    }
    mutating func appendSet(_ key: [UInt8], _ value: [UInt8], into out: inout [UInt8]) {
        var s = SetRequest(key: key, value: value, namespace: namespace)
        s.tiers = tiers
        s.writeBehind = writeBehind
        Request.set(s).frame(id: nextID).encode(into: &out)
        nextID &+= 1
    }
    func parse(_ buffer: UnsafeRawBufferPointer) -> (Reply, Int)? {
        let r: (frame: Frame, consumed: Int)?
        do { r = try decoder.decode(buffer) } catch { return (.error("undecodable frame: \(error)"), buffer.count) }
        guard let (f, used) = r else { return nil }
        switch f.statusCode {
        case .ok: return (f.op == .get ? .hit : .stored, used)
        case .notFound: return (.miss, used)
        default: return (.error(f.statusCode.description), used)
        }
    }
}

/// memcached's text protocol (get / set).
struct MemcachedLoadCodec: LoadCodec {
    let name = "memcached"
    mutating func appendGet(_ key: [UInt8], into out: inout [UInt8]) {
        out += Array("get ".utf8); out += key; out += [13, 10]
    }
    mutating func appendSet(_ key: [UInt8], _ value: [UInt8], into out: inout [UInt8]) {
        out += Array("set ".utf8); out += key; out += Array(" 0 0 \(value.count)\r\n".utf8); out += value; out += [13, 10]
    }
    func parse(_ b: UnsafeRawBufferPointer) -> (Reply, Int)? {
        guard let eol = lineEnd(b, from: 0) else { return nil }
        let line = String(decoding: UnsafeRawBufferPointer(rebasing: b[0..<eol]), as: UTF8.self)
        if line == "END" { return (.miss, eol + 2) }
        if line == "STORED" { return (.stored, eol + 2) }
        if line.hasPrefix("VALUE ") {
            guard let n = line.split(separator: " ").last.flatMap({ Int($0) }) else { return (.error(line), eol + 2) }
            let dataEnd = eol + 2 + n + 2
            guard b.count >= dataEnd, let end = lineEnd(b, from: dataEnd) else { return nil }
            return (.hit, end + 2)
        }
        return (.error(line), eol + 2)
    }
}

/// Redis's RESP (GET / SET).
struct RedisLoadCodec: LoadCodec {
    let name = "redis"
    mutating func appendGet(_ key: [UInt8], into out: inout [UInt8]) {
        out += Array("*2\r\n$3\r\nGET\r\n$\(key.count)\r\n".utf8); out += key; out += [13, 10]
    }
    mutating func appendSet(_ key: [UInt8], _ value: [UInt8], into out: inout [UInt8]) {
        out += Array("*3\r\n$3\r\nSET\r\n$\(key.count)\r\n".utf8); out += key
        out += Array("\r\n$\(value.count)\r\n".utf8); out += value; out += [13, 10]
    }
    func parse(_ b: UnsafeRawBufferPointer) -> (Reply, Int)? {
        guard let eol = lineEnd(b, from: 0), eol >= 1 else { return nil }
        switch b[0] {
        case UInt8(ascii: "+"): return (.stored, eol + 2)
        case UInt8(ascii: "-"): return (.error(String(decoding: UnsafeRawBufferPointer(rebasing: b[1..<eol]), as: UTF8.self)), eol + 2)
        case UInt8(ascii: "$"):
            guard let n = Int(String(decoding: UnsafeRawBufferPointer(rebasing: b[1..<eol]), as: UTF8.self)) else { return (.error("bad bulk length"), eol + 2) }
            if n < 0 { return (.miss, eol + 2) }
            let end = eol + 2 + n + 2
            return b.count >= end ? (.hit, end) : nil
        default:
            return (.error("unexpected reply"), eol + 2)
        }
    }
}

/// Index of the "\r" of the first "\r\n" at or after `from`.
func lineEnd(_ b: UnsafeRawBufferPointer, from: Int) -> Int? {
    var i = from
    while i + 1 < b.count {
        if b[i] == 13 && b[i + 1] == 10 { return i }
        i += 1
    }
    return nil
}
