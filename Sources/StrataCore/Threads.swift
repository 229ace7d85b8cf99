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

/// One `Int` per thread (a pthread key, 0 until the thread sets it): for a mode a thread sets
/// around work it does itself (`PrechargedOutput`, `InlineDiskRead`). Costs one
/// `pthread_getspecific` per read. Keep instances for the process's life (the key is never freed).
public final class ThreadLocalInt: @unchecked Sendable {
    private var key = pthread_key_t()
    public init() { pthread_key_create(&key, nil) }
    public var value: Int {
        get { Int(bitPattern: pthread_getspecific(key)) }
        set { pthread_setspecific(key, UnsafeRawPointer(bitPattern: newValue)) }
    }
}
