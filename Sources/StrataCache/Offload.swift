import StrataCore

/// Runs the backends' blocking calls for async callers, and makes cancellation end the wait.
///
/// The call runs on a `BlockingPool` thread (never a Dispatch or concurrency-pool thread it
/// could starve). The caller's task waits on a continuation that is resumed exactly once: by
/// the call's result, or by the task's cancellation — whichever comes first. A cancelled
/// caller gets `CacheError.Code.cancelled` at once; the blocking call itself cannot be
/// interrupted, so it runs to its end (bounded by the client's per-node timeout, or the
/// store's own work) and its result is dropped. A write may therefore still land after its
/// caller was cancelled. A task already cancelled when it calls starts nothing.
///
/// Cost: one pool thread hand-off and one continuation per call (a few µs), plus a thread
/// start when no pool thread is idle.
enum Offload {
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        if Task.isCancelled { throw CacheError.cancelledError }
        let once = ResumeOnce<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<T, any Error>) in
                guard once.install(c) else { return } // cancelled before it started
                BlockingPool.shared.run {
                    once.finish(Result { try body() }.mapError { CacheError.mapping($0) })
                }
            }
        } onCancel: {
            once.finish(.failure(CacheError.cancelledError))
        }
    }
}

/// A continuation resumed exactly once, by whichever of the result and the cancellation
/// arrives first; a cancellation that arrives before the continuation exists is kept and
/// answers it as soon as it is installed.
private final class ResumeOnce<T: Sendable>: @unchecked Sendable {
    private let lock = Lock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var early: Result<T, any Error>?
    private var done = false

    /// Installs the continuation; false (and the continuation already resumed) when the
    /// result — a cancellation — came first.
    func install(_ c: CheckedContinuation<T, any Error>) -> Bool {
        let pending: Result<T, any Error>? = lock.withLock {
            if let e = early { early = nil; return e }
            continuation = c
            return nil
        }
        if let p = pending { c.resume(with: p); return false }
        return true
    }

    func finish(_ r: Result<T, any Error>) {
        let c: CheckedContinuation<T, any Error>? = lock.withLock {
            if done { return nil }
            done = true
            if let c = continuation { continuation = nil; return c }
            early = r
            return nil
        }
        c?.resume(with: r)
    }
}

/// The caller's async loader, run from a backend's blocking read-through: the loader runs as
/// a task of its own (not a child of the caller, so a cancelled caller does not cancel a load
/// that other callers share), and the blocking thread waits for it. Its error is kept, so the
/// facade can hand the loader's own error back even where the cluster client only passed on
/// its text.
final class LoaderRun: @unchecked Sendable {
    private let lock = Lock()
    private var error: (any Error)?

    var loaderError: (any Error)? { lock.withLock { error } }

    func blocking(_ loader: @escaping @Sendable () async throws -> [UInt8]) -> @Sendable () throws -> [UInt8] {
        { [self] in
            let done = Completion<Result<[UInt8], any Error>>()
            Task {
                do { done.fulfil(.success(try await loader())) } catch { done.fulfil(.failure(error)) }
            }
            do { return try done.wait().get() } catch {
                lock.withLock { self.error = error }
                throw LoaderError(error: error)
            }
        }
    }
}

/// A loader's error on its way through a backend (its text is the loader error's text).
struct LoaderError: Error, CustomStringConvertible {
    let error: any Error
    var description: String { "\(error)" }
}
