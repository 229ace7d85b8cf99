// PROTOCOL.md §5 (opcodes) and §6 (status codes). Plain values, not internal errors.

/// Operation codes (PROTOCOL.md §5).
public enum Opcode: UInt8, Sendable, CaseIterable {
    case hello = 0x01
    case ping = 0x02
    case quit = 0x03
    case get = 0x10
    case mget = 0x11
    case set = 0x12
    case delete = 0x13
    case touch = 0x14
    case exists = 0x15
    case incr = 0x16
    case decr = 0x17
    case meta = 0x18
    case scan = 0x19
    case flush = 0x1A
    case stats = 0x1B
    case invalidate = 0x20
    case release = 0x21
    case imageInfo = 0x30
    case imageVariant = 0x31
    case syncDigest = 0x40
    case syncKeys = 0x41
    case syncCheck = 0x42

    public var name: String {
        switch self {
        case .hello: "hello"
        case .ping: "ping"
        case .quit: "quit"
        case .get: "get"
        case .mget: "mget"
        case .set: "set"
        case .delete: "delete"
        case .touch: "touch"
        case .exists: "exists"
        case .incr: "incr"
        case .decr: "decr"
        case .meta: "meta"
        case .scan: "scan"
        case .flush: "flush"
        case .stats: "stats"
        case .invalidate: "invalidate"
        case .release: "release"
        case .imageInfo: "image_info"
        case .imageVariant: "image_variant"
        case .syncDigest: "sync_digest"
        case .syncKeys: "sync_keys"
        case .syncCheck: "sync_check"
        }
    }
}

/// Response status (PROTOCOL.md §6).
public struct Status: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let ok = Status(rawValue: 0x0000)
    public static let notFound = Status(rawValue: 0x0001)
    public static let exists = Status(rawValue: 0x0002)
    public static let casMismatch = Status(rawValue: 0x0003)
    public static let superseded = Status(rawValue: 0x0004)
    public static let notANumber = Status(rawValue: 0x0005)
    /// GET found a negative entry ("this key failed to load"); the value is its message.
    public static let negative = Status(rawValue: 0x0006)
    /// SET with a lease token that no longer holds the key's lease: not stored.
    public static let leaseLost = Status(rawValue: 0x0007)
    public static let invalidArgument = Status(rawValue: 0x0010)
    public static let tooLarge = Status(rawValue: 0x0011)
    public static let unknownOpcode = Status(rawValue: 0x0012)
    public static let malformed = Status(rawValue: 0x0013)
    public static let authRequired = Status(rawValue: 0x0014)
    public static let authFailed = Status(rawValue: 0x0015)
    public static let unsupportedVersion = Status(rawValue: 0x0016)
    /// The connection's user may not run this operation on this namespace (PROTOCOL.md §4.1).
    public static let forbidden = Status(rawValue: 0x0017)
    public static let busy = Status(rawValue: 0x0020)
    public static let diskFull = Status(rawValue: 0x0021)
    public static let serverError = Status(rawValue: 0x0022)
    public static let shuttingDown = Status(rawValue: 0x0023)
    public static let tooManyConnections = Status(rawValue: 0x0024)
    public static let invalidImage = Status(rawValue: 0x0025)
    /// INCR/DECR/TOUCH/SET with flag VERIFIED_ONLY on a `--cluster` node that has not caught up
    /// with the key's other replicas (PROTOCOL.md §7.19): nothing was done; decide elsewhere.
    public static let unverified = Status(rawValue: 0x0026)

    public var description: String {
        switch self {
        case .ok: "OK"
        case .notFound: "NOT_FOUND"
        case .exists: "EXISTS"
        case .casMismatch: "CAS_MISMATCH"
        case .superseded: "SUPERSEDED"
        case .notANumber: "NOT_A_NUMBER"
        case .negative: "NEGATIVE"
        case .leaseLost: "LEASE_LOST"
        case .invalidArgument: "INVALID_ARGUMENT"
        case .tooLarge: "TOO_LARGE"
        case .unknownOpcode: "UNKNOWN_OPCODE"
        case .malformed: "MALFORMED"
        case .authRequired: "AUTH_REQUIRED"
        case .authFailed: "AUTH_FAILED"
        case .unsupportedVersion: "UNSUPPORTED_VERSION"
        case .forbidden: "FORBIDDEN"
        case .busy: "BUSY"
        case .diskFull: "DISK_FULL"
        case .serverError: "SERVER_ERROR"
        case .shuttingDown: "SHUTTING_DOWN"
        case .tooManyConnections: "TOO_MANY_CONNECTIONS"
        case .invalidImage: "INVALID_IMAGE"
        case .unverified: "UNVERIFIED"
        default: "STATUS_0x" + String(rawValue, radix: 16)
        }
    }
}

/// Request flags (PROTOCOL.md §2.1).
public struct RequestFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    public static let quiet = RequestFlags(rawValue: 0x01)
    public static let writeBehind = RequestFlags(rawValue: 0x02)
    public static let wantMeta = RequestFlags(rawValue: 0x04)
    public static let all = RequestFlags(rawValue: 0x08)
    public static let validateImage = RequestFlags(rawValue: 0x10)
    /// GET: ask for the key's lease on a miss, a stale hit, or a hit inside the refresh-ahead window.
    public static let lease = RequestFlags(rawValue: 0x20)
    /// SET: store a negative entry (the value is the failure's message).
    public static let negative = RequestFlags(rawValue: 0x40)
    /// SET: store the item already marked stale (replication and repair).
    public static let stale = RequestFlags(rawValue: 0x80)
    /// INCR/DECR/TOUCH and SET (bit 3, ALL's bit for FLUSH): decide only on a node that has
    /// verified the key with its other replicas; else the node answers UNVERIFIED and does
    /// nothing (§7.9, §7.19).
    public static let verifiedOnly = RequestFlags(rawValue: 0x08)
    public static let known: RequestFlags = [.quiet, .writeBehind, .wantMeta, .all, .validateImage, .lease, .negative, .stale]

    /// The flags an operation takes (PROTOCOL.md §2.1); any other bit is refused, so a bit can
    /// later mean something for an operation that has no use for it today.
    public static func allowed(for op: Opcode) -> RequestFlags {
        switch op {
        case .get: return [.quiet, .wantMeta, .lease]
        case .set: return [.quiet, .writeBehind, .validateImage, .negative, .stale, .verifiedOnly]
        case .delete: return [.quiet, .writeBehind]
        case .flush: return [.quiet, .all]
        case .incr, .decr, .touch: return [.quiet, .verifiedOnly]
        default: return [.quiet]
        }
    }
}

/// Response flags: the header's last word in responses (PROTOCOL.md §2.3); 0 in requests.
public struct ResponseFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// The value is stale (invalidated); a refresh is due.
    public static let stale = ResponseFlags(rawValue: 0x1)
    /// The caller now holds the key's lease; the response's key field is the 8-byte token.
    public static let lease = ResponseFlags(rawValue: 0x2)
    /// Another client holds the key's lease and is filling it.
    public static let filling = ResponseFlags(rawValue: 0x4)
    /// GET/MGET: the node may have missed writes to this key (a restart, pause, partition,
    /// lost disk or membership change) and has not caught up with the key's other replicas
    /// yet; compare with them before trusting the answer (PROTOCOL.md §7.19).
    public static let unverified = ResponseFlags(rawValue: 0x8)
}

/// Protocol constants.
public enum Wire {
    public static let requestMagic: UInt8 = 0x53
    public static let responseMagic: UInt8 = 0x73
    public static let version: UInt8 = 1
    public static let headerSize = 32
    public static let maxNamespace = 64
    public static let maxKey = 1024
    public static let maxExtended = 4096
    public static let maxMGetKeys = 1024
    public static let maxScanLimit = 10_000
    public static let defaultPort: UInt16 = 7400
}
