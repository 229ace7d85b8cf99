/// Every error the store reports: a code a caller can switch on and a message a person can read.
///
/// A struct wrapping a code rather than an enum with payloads, so codes can be added later
/// without breaking callers (postgres-nio's PSQLError pattern).
public struct StoreError: Error, CustomStringConvertible, Sendable, Equatable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let raw: String
        public var description: String { raw }
        public static let invalidKey = Code(raw: "invalid_key")
        public static let invalidNamespace = Code(raw: "invalid_namespace")
        public static let valueTooLarge = Code(raw: "value_too_large")
        public static let extendedTooLarge = Code(raw: "extended_data_too_large")
        public static let notANumber = Code(raw: "not_a_number")
        public static let counterOverflow = Code(raw: "counter_overflow")
        public static let directory = Code(raw: "data_directory")
        public static let locked = Code(raw: "data_directory_locked")
        public static let schemaTooNew = Code(raw: "schema_too_new")
        public static let diskFull = Code(raw: "disk_full")
        public static let io = Code(raw: "io_error")
        public static let corrupt = Code(raw: "corrupt")
        public static let closed = Code(raw: "closed")
        public static let invalidArgument = Code(raw: "invalid_argument")
        /// A write to a new namespace past `StoreConfiguration.maxNamespaces` (nothing done).
        public static let tooManyNamespaces = Code(raw: "too_many_namespaces")
        /// Held back by a capacity bound for too long (nothing done): retry later.
        public static let busy = Code(raw: "busy")
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }
}
