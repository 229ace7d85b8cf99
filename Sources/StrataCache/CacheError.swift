import StrataClient
import StrataCore
import StrataImage
import StrataStore
import StrataWire

// Status and Tiers are re-exported (only these two of their modules): a user who imports
// StrataCache alone can name their members (`.tooLarge`, `.memory`) also with Swift's
// MemberImportVisibility on — StrataWire is not a product they could import (an outside
// review, api1). strata-example builds with that feature to keep it so.
@_exported import struct StrataWire.Status

/// A protocol status (PROTOCOL.md §6), as `CacheError.status` carries it.
public typealias CacheStatus = StrataWire.Status

/// Every failure of the facade: a code to switch on, the protocol's status where there is one,
/// and a message a person can read. Misses are not errors (they are `nil`).
///
/// One type for both backends: `ClusterError`, `ClientError`, `LoadFailure` (cluster) and
/// `StoreError` (embedded) are mapped into it in one place (`CacheError.mapping(_:)`), so
/// code written against a cluster handles the embedded store's failures the same way.
/// A struct wrapping a code rather than an enum, so codes can be added without breaking
/// callers (postgres-nio's `PSQLError`).
public struct CacheError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, in terms a caller can act on.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let raw: String
        /// The code's name (`too_large`).
        public var description: String { raw }
        /// No node could be reached, or too few answered for the acknowledgement policy.
        public static let unavailable = Code(raw: "unavailable")
        /// A key, namespace, option or expiry the protocol refuses (status INVALID_ARGUMENT).
        public static let invalidArgument = Code(raw: "invalid_argument")
        /// A value or extended data over the limit (TOO_LARGE).
        public static let tooLarge = Code(raw: "too_large")
        /// `WriteMode.add` on a key that is present (EXISTS).
        public static let exists = Code(raw: "exists")
        /// `WriteMode.replace`/`.cas` on an absent key, or an image's original gone (NOT_FOUND).
        public static let notFound = Code(raw: "not_found")
        /// `WriteMode.cas` with a version that is not the stored one (CAS_MISMATCH).
        public static let casMismatch = Code(raw: "cas_mismatch")
        /// A counter on a value that is not a decimal number (NOT_A_NUMBER).
        public static let notANumber = Code(raw: "not_a_number")
        /// A node or store out of disk space for new values (DISK_FULL).
        public static let diskFull = Code(raw: "disk_full")
        /// A node too busy to take the request (BUSY, TOO_MANY_CONNECTIONS); try again later.
        public static let busy = Code(raw: "busy")
        /// The value is not an image the node can read, or one it cannot resize (INVALID_IMAGE):
        /// variants are made of PNG and WebP originals only, a GIF's or JPEG's facts are read.
        public static let invalidImage = Code(raw: "invalid_image")
        /// The value could not be encoded with the cache's coder.
        public static let encoding = Code(raw: "encoding")
        /// The stored bytes could not be decoded as the type asked for.
        public static let decoding = Code(raw: "decoding")
        /// A read-through loader failed (`underlying` is its error when it ran in this
        /// process), or a remembered failure was served (`cached` in the message).
        public static let loadFailed = Code(raw: "load_failed")
        /// The calling task was cancelled while it waited.
        public static let cancelled = Code(raw: "cancelled")
        /// The cache was closed (`StrataCache.close()`), or the node is shutting down.
        public static let closed = Code(raw: "closed")
        /// The backend cannot do this (see the option's documentation).
        public static let unsupported = Code(raw: "unsupported")
        /// Authentication was required or refused (AUTH_REQUIRED, AUTH_FAILED).
        public static let unauthorized = Code(raw: "unauthorized")
        /// The embedded store's data directory is in use — by another process, or by another
        /// store open in this one (one directory, one store at a time).
        public static let locked = Code(raw: "locked")
        /// Anything else the node or store reported (SERVER_ERROR, I/O, corruption, a bad response).
        public static let internalError = Code(raw: "internal")
    }

    /// What went wrong.
    public let code: Code
    /// The protocol status behind the failure, when a node answered with one (or the embedded
    /// store's error has a protocol equivalent); nil for connection failures, coding errors
    /// and cancellation.
    public let status: CacheStatus?
    /// What went wrong, for a person (node names and their reasons on a cluster).
    public let message: String
    /// The error this one was made from (the loader's own error for `.loadFailed`).
    public let underlying: (any Error)?

    /// An error with a code, the status behind it (if any), a message and its cause.
    public init(_ code: Code, status: CacheStatus? = nil, _ message: String, underlying: (any Error)? = nil) {
        self.code = code; self.status = status; self.message = message; self.underlying = underlying
    }

    /// `code (STATUS): message`.
    public var description: String {
        "\(code)" + (status.map { " (\($0))" } ?? "") + ": " + message
    }

    static let cancelledError = CacheError(.cancelled, "the task was cancelled while it waited")
}

// MARK: Mapping (the one place that knows the other layers' errors)

extension CacheError {
    /// The facade's error for anything a backend threw. `CacheError` passes through;
    /// `CancellationError` becomes `.cancelled`.
    static func mapping(_ error: any Error) -> CacheError {
        switch error {
        case let e as CacheError:
            return e
        case is CancellationError:
            return cancelledError
        case let e as StoreError:
            return fromStore(e)
        case let e as ClientError:
            switch e.kind {
            case .server: return from(status: e.status ?? .serverError, e.message, e)
            case .connection: return CacheError(.unavailable, e.message, underlying: e)
            case .protocolViolation: return CacheError(.internalError, e.message, underlying: e)
            }
        case let e as ClusterError:
            // Each node's reason is the text of its error: a status answer reads "STATUS: …"
            // (`NodeConnection.check`, `ClusterClient.replicate`). The first node that answered
            // with a status decides; a cluster where none did is unavailable.
            for (_, reason) in e.failures {
                if let s = leadingStatus(reason) { return from(status: s, e.description, e) }
            }
            return CacheError(.unavailable, e.description, underlying: e)
        case let e as LoadFailure:
            return CacheError(.loadFailed, status: e.cached ? .negative : nil, e.description, underlying: e)
        case let e as LoaderError:
            return CacheError(.loadFailed, "the loader failed: \(e.error)", underlying: e.error)
        case let e as WireError:
            return from(status: e.status, e.message, e)
        case let e as ImageError:
            return CacheError(e.kind == .tooManyPixels ? .tooLarge : .invalidImage, status: .invalidImage, e.message, underlying: e)
        default:
            return CacheError(.internalError, "\(error)", underlying: error)
        }
    }

    /// The code for a protocol status.
    static func from(status: CacheStatus, _ message: String, _ underlying: (any Error)? = nil) -> CacheError {
        let code: Code
        switch status {
        case .invalidArgument, .malformed, .unknownOpcode, .unsupportedVersion: code = .invalidArgument
        case .tooLarge: code = .tooLarge
        case .exists: code = .exists
        case .notFound: code = .notFound
        case .casMismatch: code = .casMismatch
        case .notANumber: code = .notANumber
        case .diskFull: code = .diskFull
        case .busy, .tooManyConnections: code = .busy
        case .invalidImage: code = .invalidImage
        case .shuttingDown: code = .closed
        case .authRequired, .authFailed, .forbidden: code = .unauthorized
        case .negative: code = .loadFailed
        default: code = .internalError
        }
        return CacheError(code, status: status, message, underlying: underlying)
    }

    static func fromStore(_ e: StoreError) -> CacheError {
        switch e.code {
        case .invalidKey, .invalidNamespace, .invalidArgument, .counterOverflow:
            return CacheError(.invalidArgument, status: .invalidArgument, e.message, underlying: e)
        case .valueTooLarge, .extendedTooLarge:
            return CacheError(.tooLarge, status: .tooLarge, e.message, underlying: e)
        case .notANumber:
            return CacheError(.notANumber, status: .notANumber, e.message, underlying: e)
        case .diskFull:
            return CacheError(.diskFull, status: .diskFull, e.message, underlying: e)
        case .closed:
            return CacheError(.closed, status: .shuttingDown, e.message, underlying: e)
        case .locked:
            return CacheError(.locked, e.message, underlying: e)
        default:
            return CacheError(.internalError, status: .serverError, e.description, underlying: e)
        }
    }

    /// The status a reason text starts with (`TOO_LARGE: value is …`), if any.
    static func leadingStatus(_ reason: String) -> CacheStatus? {
        let name = reason.prefix { $0 == "_" || ($0.isLetter && $0.isUppercase) }
        guard !name.isEmpty else { return nil }
        return knownStatuses.first { $0.description == name }
    }

    private static let knownStatuses: [CacheStatus] = [
        .notFound, .exists, .casMismatch, .superseded, .notANumber, .negative, .leaseLost, .invalidArgument,
        .tooLarge, .unknownOpcode, .malformed, .authRequired, .authFailed, .unsupportedVersion, .forbidden, .busy,
        .diskFull, .serverError, .shuttingDown, .tooManyConnections, .invalidImage,
    ]
}
