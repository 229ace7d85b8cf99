/// A protocol error: the status to answer with, a message, and whether the stream can go on.
public struct WireError: Error, Sendable, Equatable, CustomStringConvertible {
    public let status: Status
    public let message: String
    /// True when the connection must be closed after answering (the stream is out of step).
    public let fatal: Bool
    /// The offending frame's request id and opcode when its header could be read, else 0.
    public var requestID: UInt32 = 0
    public var opcode: UInt8 = 0

    public init(_ status: Status, _ message: String, fatal: Bool = false, requestID: UInt32 = 0, opcode: UInt8 = 0) {
        self.status = status
        self.message = message
        self.fatal = fatal
        self.requestID = requestID
        self.opcode = opcode
    }

    public var description: String { "\(status): \(message)" }
}
