#if canImport(Glibc)
import Glibc
#endif
import CLinux

private final class ThreadBody {
    let name: String
    let body: () -> Void
    init(_ name: String, _ body: @escaping () -> Void) { self.name = name; self.body = body }
}

/// Starts a detached OS thread running `body`. `name` becomes the thread's name (its first 15
/// bytes: what `top -H`, `perf report --sort comm` and /proc/PID/task/*/comm show).
/// False when the system refused a thread (a resource limit); `body` then never runs.
@discardableResult
public func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(ThreadBody(name, body)).toOpaque()
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    var tid = pthread_t()
    let rc = pthread_create(&tid, &attr, { arg in
        let b = Unmanaged<ThreadBody>.fromOpaque(arg!).takeRetainedValue()
        _ = strata_set_thread_name(b.name)
        b.body()
        return nil
    }, box)
    pthread_attr_destroy(&attr)
    if rc == 0 { return true }
    Unmanaged<ThreadBody>.fromOpaque(box).release()
    return false
}

/// Cores this process may run on (at least 1), read once.
public let processorCount: Int = max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))

/// Sleeps up to `seconds` in steps of 50 ms, returning early once `wake()` holds (checked
/// before each step): how background threads wait out an interval and still stop, or act,
/// within 50 ms.
public func sleep(upTo seconds: Double, unless wake: () -> Bool) {
    var left = seconds
    while left > 0 && !wake() {
        usleep(UInt32(min(left, 0.05) * 1e6))
        left -= 0.05
    }
}

/// Told when a thread that works for it is about to wait for something other than the CPU
/// (a `Completion`, a `ByteGate`), and when the wait ends: a pool of threads can start another
/// on its queue meanwhile instead of waking threads by guesswork. See `Waits`.
public protocol WaitObserver: AnyObject, Sendable {
    func willWait()
    func didWait()
}

/// The calling thread's `WaitObserver`, if a pool set one (thread-local; nil elsewhere). Cost
/// of a wait that is reported: one `pthread_getspecific` and the observer's two calls; of a
/// wait on a thread without an observer: one `pthread_getspecific`.
public enum Waits {
    private static let key: pthread_key_t = {
        var k = pthread_key_t()
        precondition(pthread_key_create(&k, nil) == 0, "no thread-local key left")
        return k
    }()

    /// Makes `observer` the calling thread's (it must outlive the thread's use of it: pools
    /// set themselves on their own threads, which hold them).
    public static func observe(_ observer: WaitObserver?) {
        pthread_setspecific(key, observer.map { UnsafeRawPointer(Unmanaged.passUnretained($0 as AnyObject).toOpaque()) })
    }

    /// Runs `wait` (something that blocks) between the calling thread's observer's `willWait`
    /// and `didWait`.
    @inline(__always)
    public static func reported<T>(_ wait: () -> T) -> T {
        guard let p = pthread_getspecific(key) else { return wait() }
        let o = Unmanaged<AnyObject>.fromOpaque(p).takeUnretainedValue() as! WaitObserver
        o.willWait()
        defer { o.didWait() }
        return wait()
    }
}
