// Node-to-node anti-entropy and hinted handoff (PROTOCOL.md §7.19): SYNC_DIGEST, SYNC_KEYS
// and SYNC_CHECK. Pure codecs.

/// A SYNC_DIGEST or SYNC_KEYS request: the requester's node name (its ring name), how many
/// buckets the key space is cut into (2^bits, by the top bits of a key's ring position), the
/// newest version to compare (newer items are left out on both sides), and for SYNC_KEYS the
/// buckets wanted.
public struct SyncRequest: Equatable, Sendable {
    public var requester: [UInt8]
    public var bucketBits: UInt8
    public var maxVersion: UInt64
    /// SYNC_KEYS only: the buckets whose entries are wanted, in the order they are answered.
    public var buckets: [UInt32]
    /// The requester's member-list digest (§7.19 "Member lists"), or nil when it sent none
    /// (the extras' optional last field): a node whose own differs refuses the request.
    public var members: UInt64?
    /// SYNC_DIGEST only: the requester's member list as text (§7.19 "Member lists"), sent when
    /// the peer answered that the lists differ; empty when not sent. Needs `members`.
    public var memberList: [UInt8]
    public init(requester: [UInt8], bucketBits: UInt8, maxVersion: UInt64, buckets: [UInt32] = [], members: UInt64? = nil,
                memberList: [UInt8] = []) {
        self.requester = requester; self.bucketBits = bucketBits; self.maxVersion = maxVersion; self.buckets = buckets
        self.members = members; self.memberList = memberList
    }

    public static let minBits: UInt8 = 4
    public static let maxBits: UInt8 = 16
    /// The most buckets one SYNC_KEYS names.
    public static let maxBuckets = 4096
}

/// One entry of a SYNC_KEYS answer.
public struct SyncKeyEntry: Equatable, Sendable {
    public var namespace: [UInt8]
    public var key: [UInt8]
    public var version: UInt64
    public var tombstone: Bool
    public init(namespace: [UInt8], key: [UInt8], version: UInt64, tombstone: Bool) {
        self.namespace = namespace; self.key = key; self.version = version; self.tombstone = tombstone
    }
    /// The entry's size in a SYNC_KEYS answer.
    public var encodedSize: Int { 1 + namespace.count + 2 + key.count + 9 }
}

extension SyncRequest {
    static func parse(_ f: Frame, keys: Bool) throws(WireError) -> SyncRequest {
        let name = keys ? "sync_keys" : "sync_digest"
        var r = ExtrasReader(f.extras, name)
        // Each field is checked as it is read (PROTOCOL.md §2.2), then the size.
        let bits = try r.u8()
        guard bits >= minBits && bits <= maxBits else {
            throw WireError(.invalidArgument, "\(name): bucket bits \(bits) is out of range \(minBits)…\(maxBits)")
        }
        let maxVersion = try r.u64()
        let members: UInt64? = f.extras.count > 9 ? try r.u64() : nil
        try r.end()
        guard !f.key.isEmpty else { throw WireError(.invalidArgument, "\(name): the key must be the requester's node name") }
        var s = SyncRequest(requester: f.key, bucketBits: bits, maxVersion: maxVersion, members: members)
        if keys {
            guard f.value.count % 4 == 0, !f.value.isEmpty, f.value.count / 4 <= maxBuckets else {
                throw WireError(.invalidArgument, "sync_keys: the value must be 1…\(maxBuckets) u32 bucket numbers")
            }
            var v = ExtrasReader(f.value, "sync_keys buckets", part: "value")
            for _ in 0..<(f.value.count / 4) {
                let b = try v.u32()
                guard b < UInt32(1) << UInt32(bits) else { throw WireError(.invalidArgument, "sync_keys: bucket \(b) is out of range for \(bits) bits") }
                s.buckets.append(b)
            }
        } else if !f.value.isEmpty {
            guard members != nil else { throw WireError(.invalidArgument, "sync_digest: a member list (the value) needs the members digest in the extras") }
            s.memberList = f.value
        }
        return s
    }

    func encode(into f: inout Frame) {
        f.key = requester
        f.extras.append(bucketBits)
        f.extras.appendBE(maxVersion)
        if let m = members { f.extras.appendBE(m) }
        for b in buckets { f.value.appendBE(b) }
        f.value += memberList
    }
}

extension Responses {
    /// SYNC_DIGEST: extras `u32 entries` (how many items the digests cover); value: one u64
    /// digest per bucket, in bucket order.
    /// `memberList`: the answering node's own member list (§7.19 "Member lists"), after the
    /// digests, when the request carried the requester's.
    public static func syncDigest(to req: Frame, digests: [UInt64], entries: Int, memberList: [UInt8] = []) -> Frame {
        var f = Frame.response(to: req)
        f.extras.appendBE(UInt32(clamping: entries))
        f.value.reserveCapacity(digests.count * 8 + memberList.count)
        for d in digests { f.value.appendBE(d) }
        f.value += memberList
        return f
    }

    /// The digests of a SYNC_DIGEST answer (exactly 2^bits of them, or 2^bits and the
    /// answering node's member list when `withList`).
    public static func parseSyncDigest(_ f: Frame, bits: UInt8, withList: Bool = false) throws(WireError) -> [UInt64] {
        let n = 1 << Int(bits)
        guard f.value.count == n * 8 || (withList && f.value.count > n * 8) else {
            throw WireError(.malformed, "sync_digest answer holds \(f.value.count) bytes, not \(n * 8)")
        }
        var r = ExtrasReader(f.value, "sync_digest", part: "value")
        var out: [UInt64] = []
        out.reserveCapacity(n)
        for _ in 0..<n { out.append(try r.u64()) }
        return out
    }

    /// The answering node's member list after the digests (empty when none).
    public static func syncDigestMemberList(_ f: Frame, bits: UInt8) -> [UInt8] {
        let n = (1 << Int(bits)) * 8
        return f.value.count > n ? Array(f.value[n...]) : []
    }

    /// Member lists one after another (§7.19 "Member lists": a SYNC_DIGEST answer may carry
    /// several): each list's text, joined by `\n`.
    public static func joinMemberLists(_ lists: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        for l in lists {
            if !out.isEmpty { out.append(0x0A) }
            out += l
        }
        return out
    }

    /// The member lists in `bytes` (`joinMemberLists`): each ends at its `replicas=R` line.
    /// Bytes after the last such line are not a list and are left out.
    public static func splitMemberLists(_ bytes: [UInt8]) -> [[UInt8]] {
        var lists: [[UInt8]] = []
        var start = 0, lineStart = 0
        let marker = Array("replicas=".utf8)
        var i = 0
        while i <= bytes.count {
            if i == bytes.count || bytes[i] == 0x0A {
                if bytes[lineStart..<i].starts(with: marker) {
                    lists.append(Array(bytes[start..<i]))
                    start = i + 1
                }
                lineStart = i + 1
            }
            i += 1
        }
        return lists
    }

    /// SYNC_KEYS: extras `u32 count, u32 buckets covered` (the first that many of the requested
    /// buckets are complete; ask again for the rest); value: `count` entries of `u8 ns length |
    /// ns | u16 key length | key | u64 version | u8 tombstone (0/1)`.
    public static func syncKeys(to req: Frame, entries: [SyncKeyEntry], bucketsCovered: Int) -> Frame {
        var f = Frame.response(to: req)
        f.extras.appendBE(UInt32(entries.count))
        f.extras.appendBE(UInt32(bucketsCovered))
        for e in entries { e.write(into: &f.value) }
        return f
    }

    public static func parseSyncKeys(_ f: Frame) throws(WireError) -> (entries: [SyncKeyEntry], bucketsCovered: Int) {
        var r = ExtrasReader(f.extras, "sync_keys answer")
        let n = Int(try r.u32()), covered = Int(try r.u32())
        try r.end()
        var v = ExtrasReader(f.value, "sync_keys entries", part: "value")
        var out: [SyncKeyEntry] = []
        for _ in 0..<n { out.append(try SyncKeyEntry.read(&v, "sync_keys")) }
        try v.end()
        return (out, covered)
    }
}

/// A SYNC_CHECK request (hinted handoff, §7.19): the requester's node name and writes it
/// accepted — (namespace, key, version, tombstone) — that the answering node also replicates.
/// The answer names the ones the answering node lacks (it holds nothing, or an older version).
public struct SyncCheck: Equatable, Sendable {
    public var requester: [UInt8]
    public var entries: [SyncKeyEntry]
    public init(requester: [UInt8], entries: [SyncKeyEntry]) { self.requester = requester; self.entries = entries }

    /// The most entries one SYNC_CHECK carries.
    public static let maxEntries = 4096

    static func parse(_ f: Frame) throws(WireError) -> SyncCheck {
        var r = ExtrasReader(f.extras, "sync_check")
        let n = Int(try r.u32())
        guard n >= 1 && n <= maxEntries else { throw WireError(.invalidArgument, "sync_check: \(n) entries; 1…\(maxEntries) are allowed") }
        try r.end()
        guard !f.key.isEmpty else { throw WireError(.invalidArgument, "sync_check: the key must be the requester's node name") }
        var v = ExtrasReader(f.value, "sync_check entries", part: "value")
        var out: [SyncKeyEntry] = []
        out.reserveCapacity(n)
        for i in 0..<n {
            let e = try SyncKeyEntry.read(&v, "sync_check")
            // A write's key and namespace, as SET takes them (checked here, whatever the version).
            guard !e.key.isEmpty && e.key.count <= Wire.maxKey && e.namespace.count <= Wire.maxNamespace else {
                throw WireError(.invalidArgument, "sync_check: entry \(i) has a key of \(e.key.count) bytes (1…\(Wire.maxKey)) or a namespace of \(e.namespace.count) (≤ \(Wire.maxNamespace))")
            }
            out.append(e)
        }
        try v.end()
        return SyncCheck(requester: f.key, entries: out)
    }

    func encode(into f: inout Frame) {
        f.key = requester
        f.extras.appendBE(UInt32(entries.count))
        for e in entries { e.write(into: &f.value) }
    }
}

extension SyncKeyEntry {
    /// `u8 ns length | ns | u16 key length | key | u64 version | u8 tombstone (0/1)`.
    func write(into b: inout [UInt8]) {
        b.append(UInt8(namespace.count)); b.append(contentsOf: namespace)
        b.appendBE(UInt16(key.count)); b.append(contentsOf: key)
        b.appendBE(version); b.append(tombstone ? 1 : 0)
    }

    static func read(_ v: inout ExtrasReader, _ what: String) throws(WireError) -> SyncKeyEntry {
        let ns = Array(try v.take(Int(try v.u8())))
        let key = Array(try v.take(Int(try v.u16())))
        let version = try v.u64()
        let t = try v.u8()
        guard t <= 1 else { throw WireError(.malformed, "\(what): tombstone byte \(t) is not 0 or 1") }
        return SyncKeyEntry(namespace: ns, key: key, version: version, tombstone: t == 1)
    }
}

extension Responses {
    /// SYNC_CHECK: extras `u32 count`; value: `count` u32 indices (ascending, 0-based) of the
    /// request's entries this node lacks.
    public static func syncCheck(to req: Frame, lacking: [Int]) -> Frame {
        var f = Frame.response(to: req)
        f.extras.appendBE(UInt32(lacking.count))
        f.value.reserveCapacity(lacking.count * 4)
        for i in lacking { f.value.appendBE(UInt32(i)) }
        return f
    }

    /// The indices of a SYNC_CHECK answer; each below `entries` (the request's count).
    public static func parseSyncCheck(_ f: Frame, entries: Int) throws(WireError) -> [Int] {
        var r = ExtrasReader(f.extras, "sync_check answer")
        let n = Int(try r.u32())
        try r.end()
        guard f.value.count == n * 4 else { throw WireError(.malformed, "sync_check answer holds \(f.value.count) bytes for \(n) indices") }
        var v = ExtrasReader(f.value, "sync_check indices", part: "value")
        var out: [Int] = []
        for _ in 0..<n {
            let i = Int(try v.u32())
            guard i < entries else { throw WireError(.malformed, "sync_check answer names entry \(i) of \(entries)") }
            out.append(i)
        }
        return out
    }
}
