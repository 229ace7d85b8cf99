import StrataCore

/// The memory tier's copy of a key before a write changed it (`LoggedWrite.memoryBefore`).
enum MemorySnapshot: Sendable {
    case absent
    case item(ItemState)
}

/// One write on its way through the log to SQLite, in log order.
struct LoggedWrite: Sendable {
    enum Kind: Sendable {
        /// The item as the write left it, with its value as the disk tier stores it.
        case put(ItemKey, ItemState, ValueEncoding, [UInt8])
        /// The row goes (an unversioned remove).
        case delete(ItemKey)
        case flushNamespace([UInt8])
        case flushAll
    }
    let position: UInt64
    /// The position after this record.
    let end: UInt64
    let kind: Kind
    /// The item's index entry (its LRU time: when it was written, or last read while pending).
    var entry: PendingIndex.Entry? = nil
    /// A flush of the disk tier alone: applying it leaves the memory tier's tags (not in the
    /// record: a replay at open, with memory empty, flushes both).
    var keepsMemory = false
    /// Its writer was answered before the record was written (write-behind): a failed write
    /// of it is retried, never undone (see `writeBatchLocked`).
    var answered = false
    /// What the memory tier held for the key before this write changed it, so a failed write
    /// is undone exactly (nil: not taken — a write-behind write, or one that left memory alone).
    /// Dropped once the record is written.
    var memoryBefore: MemorySnapshot? = nil

    var item: ItemKey? {
        switch kind {
        case .put(let id, _, _, _), .delete(let id): return id
        default: return nil
        }
    }

    /// The write `record` (at `position`, ending at `end`) holds, a put's value decoded with
    /// `decode`; nil when that value cannot be decoded. The replay at open and the refill of a
    /// quarantined file (`DiskTier.refillFromLog`) both read records this way.
    static func reading(_ record: LogRecord, position: UInt64, end: UInt64,
                        decode: (ValueEncoding, [UInt8], Int) -> [UInt8]?) -> LoggedWrite? {
        switch record {
        case .put(let p):
            guard let encoding = ValueEncoding(rawValue: p.encoding), let value = decode(encoding, p.stored, Int(p.rawSize)) else { return nil }
            let state = ItemState(value: value, flags: p.flags, extended: p.extended, expiry: p.expiry, version: p.version, marks: p.marks)
            return LoggedWrite(position: position, end: end, kind: .put(ItemKey(namespace: p.namespace, key: p.key), state, encoding, p.stored))
        case let .delete(ns, key): return LoggedWrite(position: position, end: end, kind: .delete(ItemKey(namespace: ns, key: key)))
        case .flushNamespace(let ns): return LoggedWrite(position: position, end: end, kind: .flushNamespace(ns))
        case .flushAll: return LoggedWrite(position: position, end: end, kind: .flushAll)
        }
    }
}
