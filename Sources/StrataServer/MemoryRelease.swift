import Foundation
import StrataCore
import Synchronization

/// Trims the heap (`trimHeap`) after heavy traffic: once clients have sent `traffic` bytes
/// since the last trim and the node's transient memory — bytes buffered by connections plus
/// unsent output — is under `calm`, at most once per `spacing` seconds, on a background queue.
/// Large values pass through several buffers (the frame, the log record, the memory tier's
/// copy), and glibc keeps what they freed in its per-thread arenas. Driven by loop 0's 0.1 s
/// tick (`Node.tick`); costs a few loads and comparisons per tick otherwise.
final class MemoryRelease: @unchecked Sendable {
    static let traffic = 64 << 20, calm = 8 << 20
    static let spacing: Double = 5
    private var bytesInAtLast = 0
    private var last = 0.0
    private let running = Atomic<Bool>(false)
    /// Trims done (STATS `heap_trims`).
    let trims = Atomic<Int>(0)

    /// One tick (loop 0 only): `bytesIn` is the node's bytes read from clients so far,
    /// `transient` its buffered plus unsent bytes now.
    func tick(bytesIn: Int, transient: Int, now: Double) {
        guard bytesIn - bytesInAtLast >= Self.traffic, transient < Self.calm, now - last >= Self.spacing,
              !running.exchange(true, ordering: .acquiring) else { return }
        bytesInAtLast = bytesIn
        last = now
        DispatchQueue.global(qos: .utility).async { [self] in
            trimHeap()
            trims.add(1, ordering: .relaxed)
            running.store(false, ordering: .releasing)
        }
    }
}
