import StrataCore

// MemoryShard's record layout (the caller holds the shard's lock, as for every call).
//
// A record is a 30-byte fixed header, the optional fields its `oLayout` bits name (in this
// order, unaligned), then key, extended data and value:
//
//   0  version   UInt64   the write's version (its time in µs)
//   8  prev      UInt32   queue link (newer neighbour), 0 = none
//  12  next      UInt32   queue link (older neighbour), 0 = none
//  16  hash      UInt32   the key's 32-bit index hash
//  20  lens      UInt32   key length (bits 0–10) | value length (bits 11–31) unless `longValue`
//  24  policy    UInt8    S3-FIFO state (MemoryShard+Policy.swift)
//  25  access    24 bits  last access, seconds mod 2^24 (read as the UInt32 at 24, shifted)
//  28  layout    UInt8    bits 0–4 which optional fields follow, bits 5–7 the `ItemMarks`
//  29  tag       UInt8    the namespace tag when < 255; 255 = `wideTag` holds it
//  30  optional: wide tag UInt32, flags UInt32, expiry Int64, extended length UInt16,
//      value length UInt32 — each only when its layout bit is set (flags ≠ 0, expiry ≠ 0,
//      extended data present, value ≥ 2 MiB, tag ≥ 255)
//
// The record's size class is not stored: pages hold one class each (`pageClass`).
extension MemoryShard {
    static let oVersion = 0, oPrev = 8, oNext = 12, oHash = 16, oLens = 20, oPolicy = 24, oAccess = 24
    static let oLayout = 28, oTag = 29
    /// The fixed header; optional fields and the key follow.
    static let headerSize = 30
    static let lWideTag: UInt8 = 1, lFlags: UInt8 = 2, lExpiry: UInt8 = 4, lExtended: UInt8 = 8, lLongValue: UInt8 = 16
    static let layoutFieldMask: UInt8 = 31
    static let marksShift: UInt8 = 5
    static let keyLenBits: UInt32 = 11
    static let maxKeyLen = (1 << 11) - 1
    static let maxInlineValueLen = (1 << 21) - 1
    static let accessMask: UInt32 = 0xFF_FFFF
    /// Bytes of the optional fields named by layout bits 0–4.
    static let optionalSize: [Int] = (0..<32).map { b in
        (b & 1 != 0 ? 4 : 0) + (b & 2 != 0 ? 4 : 0) + (b & 4 != 0 ? 8 : 0) + (b & 8 != 0 ? 2 : 0) + (b & 16 != 0 ? 4 : 0)
    }

    /// The layout byte of a record holding `item` in namespace `tag`, and the bytes of its
    /// header and optional fields.
    static func headerLayout(tag: UInt32, item: ItemState) -> (layout: UInt8, size: Int) {
        var l: UInt8 = 0
        if tag >= 255 { l |= lWideTag }
        if item.flags != 0 { l |= lFlags }
        if item.expiry != 0 { l |= lExpiry }
        if !item.extended.isEmpty { l |= lExtended }
        if item.value.count > maxInlineValueLen { l |= lLongValue }
        return (l, headerSize + optionalSize[Int(l)])
    }

    @inline(__always) func layout(_ p: UnsafeMutableRawPointer) -> UInt8 { p.load(fromByteOffset: Self.oLayout, as: UInt8.self) }
    /// Offset of the optional field `bit` (which must be set) in a record with layout `l`.
    @inline(__always) func fieldOffset(_ l: UInt8, _ bit: UInt8) -> Int { Self.headerSize + Self.optionalSize[Int(l & (bit &- 1))] }
    @inline(__always) func keyOffset(_ l: UInt8) -> Int { Self.headerSize + Self.optionalSize[Int(l & Self.layoutFieldMask)] }
    /// The first byte of the record's key.
    @inline(__always) func keyStart(_ p: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer { p + keyOffset(layout(p)) }

    @inline(__always) func keyLen(_ p: UnsafeMutableRawPointer) -> Int {
        Int(p.load(fromByteOffset: Self.oLens, as: UInt32.self) & ((1 << Self.keyLenBits) - 1))
    }
    @inline(__always) func valueLen(_ p: UnsafeMutableRawPointer) -> Int {
        let l = layout(p)
        if l & Self.lLongValue != 0 { return Int(p.loadUnaligned(fromByteOffset: fieldOffset(l, Self.lLongValue), as: UInt32.self)) }
        return Int(p.load(fromByteOffset: Self.oLens, as: UInt32.self) >> Self.keyLenBits)
    }
    @inline(__always) func extLen(_ p: UnsafeMutableRawPointer) -> Int {
        let l = layout(p)
        return l & Self.lExtended == 0 ? 0 : Int(p.loadUnaligned(fromByteOffset: fieldOffset(l, Self.lExtended), as: UInt16.self))
    }
    @inline(__always) func recordTag(_ p: UnsafeMutableRawPointer) -> UInt32 {
        let t = p.load(fromByteOffset: Self.oTag, as: UInt8.self)
        return t != 255 ? UInt32(t) : p.loadUnaligned(fromByteOffset: Self.headerSize, as: UInt32.self)
    }
    @inline(__always) func tagMatches(_ p: UnsafeMutableRawPointer, _ tag: UInt32) -> Bool {
        let t = p.load(fromByteOffset: Self.oTag, as: UInt8.self)
        return t != 255 ? UInt32(t) == tag : p.loadUnaligned(fromByteOffset: Self.headerSize, as: UInt32.self) == tag
    }
    @inline(__always) func flags(_ p: UnsafeMutableRawPointer) -> UInt32 {
        let l = layout(p)
        return l & Self.lFlags == 0 ? 0 : p.loadUnaligned(fromByteOffset: fieldOffset(l, Self.lFlags), as: UInt32.self)
    }
    @inline(__always) func expiry(_ p: UnsafeMutableRawPointer) -> Int64 {
        let l = layout(p)
        return l & Self.lExpiry == 0 ? 0 : p.loadUnaligned(fromByteOffset: fieldOffset(l, Self.lExpiry), as: Int64.self)
    }
    @inline(__always) func version(_ p: UnsafeMutableRawPointer) -> UInt64 { p.load(fromByteOffset: Self.oVersion, as: UInt64.self) }
    @inline(__always) func marks(_ p: UnsafeMutableRawPointer) -> UInt8 { layout(p) >> Self.marksShift }
    @inline(__always) func isTombstone(_ p: UnsafeMutableRawPointer) -> Bool { marks(p) & Self.bitTombstone != 0 }

    /// Seconds since the record's last access, from `nowSeconds` (mod 2^24: exact below 194 days).
    /// Seconds since the live item under the key was last served, or nil (absent, expired, a
    /// tombstone). Counts no access.
    func idleSeconds(tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32, now: Int64) -> Int64? {
        let (r, _) = find(tag: tag, key: key, hash: hash)
        guard r != 0 else { return nil }
        let p = ptr(r)
        guard !isExpired(p, now: now), !isTombstone(p) else { return nil }
        return idleSeconds(p, nowSeconds: now / 1_000_000)
    }

    @inline(__always) func idleSeconds(_ p: UnsafeMutableRawPointer, nowSeconds: Int64) -> Int64 {
        let a = p.load(fromByteOffset: Self.oAccess, as: UInt32.self) >> 8
        return Int64((UInt32(truncatingIfNeeded: nowSeconds) &- a) & Self.accessMask)
    }
    /// Records an access at `now` (µs), keeping the policy byte.
    @inline(__always) func touch(_ p: UnsafeMutableRawPointer, now: Int64, policy: UInt8) {
        let s = UInt32(truncatingIfNeeded: now / 1_000_000) & Self.accessMask
        p.storeBytes(of: s << 8 | UInt32(policy), toByteOffset: Self.oAccess, as: UInt32.self)
    }

    /// Size of the record's header, optional fields, key, extended data and value.
    func recordSize(_ p: UnsafeMutableRawPointer) -> Int { keyOffset(layout(p)) + keyLen(p) + extLen(p) + valueLen(p) }

    /// Writes the header, optional fields, key, extended data and value of a new record.
    func writeRecord(_ p: UnsafeMutableRawPointer, tag: UInt32, key: UnsafeRawBufferPointer, hash: UInt32,
                     item: ItemState, layout l: UInt8, policy: UInt8, now: Int64) {
        p.storeBytes(of: item.version, toByteOffset: Self.oVersion, as: UInt64.self)
        p.storeBytes(of: hash, toByteOffset: Self.oHash, as: UInt32.self)
        let inlineValue = l & Self.lLongValue != 0 ? 0 : UInt32(item.value.count)
        p.storeBytes(of: UInt32(key.count) | inlineValue << Self.keyLenBits, toByteOffset: Self.oLens, as: UInt32.self)
        touch(p, now: now, policy: policy)
        assert(item.marks < 8, "the layout byte keeps 3 bits of ItemMarks")
        p.storeBytes(of: l | (item.marks << Self.marksShift), toByteOffset: Self.oLayout, as: UInt8.self)
        p.storeBytes(of: UInt8(min(tag, 255)), toByteOffset: Self.oTag, as: UInt8.self)
        if l & Self.lWideTag != 0 { p.storeBytes(of: tag, toByteOffset: fieldOffset(l, Self.lWideTag), as: UInt32.self) }
        if l & Self.lFlags != 0 { p.storeBytes(of: item.flags, toByteOffset: fieldOffset(l, Self.lFlags), as: UInt32.self) }
        if l & Self.lExpiry != 0 { p.storeBytes(of: item.expiry, toByteOffset: fieldOffset(l, Self.lExpiry), as: Int64.self) }
        if l & Self.lExtended != 0 {
            p.storeBytes(of: UInt16(item.extended.count), toByteOffset: fieldOffset(l, Self.lExtended), as: UInt16.self)
        }
        if l & Self.lLongValue != 0 {
            p.storeBytes(of: UInt32(item.value.count), toByteOffset: fieldOffset(l, Self.lLongValue), as: UInt32.self)
        }
        let data = p + keyOffset(l)
        if key.count > 0 { data.copyMemory(from: key.baseAddress!, byteCount: key.count) }
        item.extended.withUnsafeBytes { if $0.count > 0 { (data + key.count).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
        item.value.withUnsafeBytes { if $0.count > 0 { (data + key.count + item.extended.count).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
    }

    /// The record as an item, its value expanded when stored compressed; nil only when a
    /// compressed value cannot be expanded (never for frames this shard wrote).
    func state(_ p: UnsafeMutableRawPointer) -> ItemState? {
        let k = keyLen(p), e = extLen(p)
        let data = keyStart(p)
        let ext = e == 0 ? [] : [UInt8](UnsafeRawBufferPointer(start: data + k, count: e))
        let stored = storedValue(p)
        var value: [UInt8]
        if isCompressed(p) {
            guard let (n, d) = frameParts(stored) else { return nil }
            var ok = false
            value = [UInt8](unsafeUninitializedCapacity: max(n, 1)) { buf, count in
                ok = expander().decompress(stored, dictionary: d, into: UnsafeMutableRawBufferPointer(start: buf.baseAddress, count: n))
                count = ok ? n : 0
            }
            guard ok else { return nil }
        } else {
            value = [UInt8](stored)
        }
        return ItemState(value: value, flags: flags(p), extended: ext, expiry: expiry(p), version: version(p), marks: marks(p))
    }

    /// Metadata without copying the value (the value is left empty); `valueLen` is the
    /// value's real size, compressed or not.
    func header(_ p: UnsafeMutableRawPointer) -> (state: ItemState, valueLen: Int) {
        (ItemState(value: [], flags: flags(p), extended: [], expiry: expiry(p), version: version(p), marks: marks(p)), realValueLen(p))
    }

    // MARK: Compressed values

    @inline(__always) func isCompressed(_ p: UnsafeMutableRawPointer) -> Bool {
        p.load(fromByteOffset: Self.oPolicy, as: UInt8.self) & Self.policyCompressed != 0
    }

    /// The value's bytes as stored (a zstd frame when `isCompressed`).
    @inline(__always) func storedValue(_ p: UnsafeMutableRawPointer) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(start: keyStart(p) + keyLen(p) + extLen(p), count: valueLen(p))
    }

    /// The value's size as written by the client.
    func realValueLen(_ p: UnsafeMutableRawPointer) -> Int {
        guard isCompressed(p) else { return valueLen(p) }
        return Zstd.frameInfo(storedValue(p))?.contentSize ?? 0
    }

    /// A compressed value's expanded size and its dictionary (nil when either is unknown or
    /// the size is over what the store compresses).
    private func frameParts(_ frame: UnsafeRawBufferPointer) -> (Int, ZstdDictionary)? {
        guard let info = Zstd.frameInfo(frame), info.contentSize <= MemoryCompression.maxValue,
              let d = compression?.dictionary(id: info.dictionaryID) else { return nil }
        return (info.contentSize, d)
    }

    private func expander() -> ZstdDecoder {
        if let d = decoder { return d }
        let d = ZstdDecoder()
        decoder = d
        return d
    }

    /// The record's value for a reader in place: the stored bytes, or a compressed value
    /// expanded into the shard's buffer (valid until the shard's next expansion: use it under
    /// the lock). Nil when a compressed value cannot be expanded.
    @inline(__always)
    func valueView(_ p: UnsafeMutableRawPointer) -> UnsafeRawBufferPointer? {
        let stored = storedValue(p)
        guard isCompressed(p) else { return stored }
        guard let (n, d) = frameParts(stored) else { return nil }
        if expandBuffer == nil { expandBuffer = .allocate(byteCount: MemoryCompression.maxValue, alignment: 16) }
        let out = UnsafeMutableRawBufferPointer(start: expandBuffer, count: n)
        return expander().decompress(stored, dictionary: d, into: out) ? UnsafeRawBufferPointer(out) : nil
    }
}
