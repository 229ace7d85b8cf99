/// Which storage tiers an operation touches, as in YYImageCacheType.
///
/// Reads with `.all` look in memory first, then disk, and promote a disk hit into memory.
/// Writes with `.disk` only are how replicas are written.
public struct Tiers: OptionSet, Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let memory = Tiers(rawValue: 1)
    public static let disk = Tiers(rawValue: 2)
    public static let all: Tiers = [.memory, .disk]

    public var description: String {
        switch self {
        case .memory: return "memory"
        case .disk: return "disk"
        case .all: return "all"
        case []: return "none"
        default: return "tiers(\(rawValue))"
        }
    }

    /// Parses `memory`, `disk` or `all`.
    public init?(name: String) {
        switch name {
        case "memory": self = .memory
        case "disk": self = .disk
        case "all": self = .all
        default: return nil
        }
    }
}
