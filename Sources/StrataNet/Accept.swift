#if canImport(Glibc)
import Glibc
#endif

/// What one `accept` on a listening socket gave.
public enum AcceptResult: Equatable {
    /// A connection (non-blocking, close-on-exec).
    case connection(Int32)
    /// Nothing is waiting.
    case none
    /// The process (EMFILE) or the system (ENFILE) is out of descriptors: a connection may be
    /// waiting that cannot be taken.
    case outOfDescriptors(SystemError)
    /// Any other failure (ENOBUFS, ENOMEM, EPERM from a firewall…). ECONNABORTED, a peer
    /// that left before it was taken, is retried and never returned.
    case failed(SystemError)
}

extension Sys {
    /// Accepts one connection and sorts the outcome (see `AcceptResult`).
    public static func acceptOne(_ listener: Int32) -> AcceptResult {
        while true {
            do {
                guard let c = try accept(listener) else { return .none }
                return .connection(c)
            } catch {
                if error.errno == ECONNABORTED { continue }
                return error.errno == EMFILE || error.errno == ENFILE ? .outOfDescriptors(error) : .failed(error)
            }
        }
    }
}

/// One descriptor held in reserve (`/dev/null`), so that a process at its descriptor limit can
/// still take a waiting connection off a listen queue, tell it why, and close it — instead of
/// leaving it queued, where a level-triggered listener wakes its loop again at once, forever.
///
/// `refuseOne` frees the spare, accepts into its slot, hands the connection to the caller,
/// closes it and takes the slot back. Another thread that opens a file in that instant can win
/// the slot; the spare is then missing (`isHeld` false) until a later `refuseOne` can reopen
/// it. Not thread-safe: one per event loop. Costs one descriptor while held.
public final class SpareDescriptor {
    private var fd: Int32

    public init() { fd = Self.open() }
    deinit { if fd >= 0 { Glibc.close(fd) } }

    public var isHeld: Bool { fd >= 0 }

    public enum Outcome: Equatable {
        /// A connection was taken, handed to `refuse`, and closed.
        case refused
        /// Nothing was waiting (or the one waiting had left).
        case noneWaiting
        /// The spare is not held and could not be reopened: nothing was accepted.
        case noSpare
    }

    /// Frees the spare, accepts one waiting connection into its slot, passes it to `refuse`
    /// (which must only write to it: it is closed right after) and reopens the spare.
    public func refuseOne(from listener: Int32, _ refuse: (Int32) -> Void) -> Outcome {
        if fd < 0 { fd = Self.open() }
        guard fd >= 0 else { return .noSpare }
        Glibc.close(fd)
        fd = -1
        let outcome: Outcome
        switch Sys.acceptOne(listener) {
        case .connection(let c):
            refuse(c)
            Glibc.close(c)
            outcome = .refused
        case .none, .failed: outcome = .noneWaiting
        case .outOfDescriptors: outcome = .noSpare // another thread took the slot
        }
        fd = Self.open()
        return outcome
    }

    private static func open() -> Int32 { Glibc.open("/dev/null", O_RDONLY | O_CLOEXEC) }
}
