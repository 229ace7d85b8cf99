/// The identity of an item inside one process: its namespace and key, as exact bytes.
///
/// Guarantees: two `ItemKey`s are equal exactly when both the namespace bytes and the key
/// bytes are equal; the hash covers both arrays with their lengths (Swift's `Array` hashes
/// its count before its elements), so no two different pairs can be confused by where the
/// namespace ends, by a lossy text decoding or by unpadded hex. Every in-process map and
/// single flight that is keyed by an item (leases, per-connection ordering, read-through and
/// variant flights, client hints) uses this type.
///
/// Cost: two array references (retained, not copied); hashing reads every byte of both.
public struct ItemKey: Hashable, Sendable, CustomStringConvertible {
    public let namespace: [UInt8]
    public let key: [UInt8]

    @inlinable public init(namespace: [UInt8], key: [UInt8]) {
        self.namespace = namespace
        self.key = key
    }

    /// Hex of both parts, for logs: `ns/key` (the empty namespace prints as nothing).
    public var description: String { namespace.hexString + "/" + key.hexString }
}
