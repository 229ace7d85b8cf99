/// The identity of an item inside one process: its namespace and key, as exact bytes.
///
/// Guarantees: two `ItemKey`s are equal exactly when both the namespace bytes and the key
/// bytes are equal; the hash covers both arrays with their lengths (Swift's `Array` hashes
/// its count before its elements), so no two different pairs can be confused by where the
/// namespace ends, by a lossy text decoding or by unpadded hex. Every in-process map and
/// single flight that is keyed by an item (leases, per-connection ordering, read-through and
/// variant flights, client hints) uses this type.
///
/// Cost: two array references (retained, not copied); hashing reads every byte of both, in
/// bulk (`Hasher.combine(bytes:)`: the derived hash fed the hasher one byte per call, ~12 % of
/// the log applier's CPU).
public struct ItemKey: Hashable, Sendable, CustomStringConvertible {
    public let namespace: [UInt8]
    public let key: [UInt8]

    @inlinable public init(namespace: [UInt8], key: [UInt8]) {
        self.namespace = namespace
        self.key = key
    }

    /// Both parts as `ByteKey`s: each length, then its bytes (the lengths keep the split).
    @inlinable public func hash(into hasher: inout Hasher) {
        hasher.combine(ByteKey(namespace))
        hasher.combine(ByteKey(key))
    }

    /// Hex of both parts, for logs: `ns/key` (the empty namespace prints as nothing).
    public var description: String { namespace.hexString + "/" + key.hexString }
}

/// A byte string as a dictionary key, hashed in bulk (`Array<UInt8>`'s own hash feeds the
/// hasher one byte per call). Equal exactly when the bytes are equal.
public struct ByteKey: Hashable, Sendable {
    public let bytes: [UInt8]
    @inlinable public init(_ bytes: [UInt8]) { self.bytes = bytes }
    @inlinable public func hash(into hasher: inout Hasher) {
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
    }
}
