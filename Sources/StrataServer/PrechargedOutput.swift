#if canImport(Glibc)
import Glibc
#endif
import StrataCore

/// Output counted ahead of its answer, per thread (`OutputBudget`).
///
/// A large value read from disk is counted as unsent output the moment it is read — before the
/// disk tier's large-read gate lets the next one start (`StoreConfiguration.largeReadDone`) —
/// and the worker that made the answer hands the charge back once it has counted the answer
/// itself. Without it, a worker kept off the CPU between finishing its read and counting its
/// answer let one more value past `--max-output-bytes`. Only threads that opted in
/// (`begin`, the request workers) are charged: a large read anywhere else (anti-entropy,
/// handoff) charges nothing, so nothing can be left charged. Costs two thread-local accesses
/// per worker job.
enum PrechargedOutput {
    /// The thread's slot: 0 = not collecting; n ≥ 1 = collecting, n − 1 bytes charged.
    private static let thread = ThreadLocalInt()
    private static var slot: Int {
        get { thread.value }
        set { thread.value = newValue }
    }

    /// This thread's large reads are charged from now until `end`.
    static func begin() { slot = 1 }

    /// Charges `bytes` to this thread when it collects; false when it does not.
    static func charge(_ bytes: Int) -> Bool {
        let s = slot
        guard s > 0 else { return false }
        slot = s + bytes
        return true
    }

    /// The bytes charged since `begin`; stops collecting.
    static func end() -> Int {
        let s = slot
        if s != 0 { slot = 0 }
        return max(0, s - 1)
    }
}
