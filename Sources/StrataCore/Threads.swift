#if canImport(Glibc)
import Glibc
#endif

private final class ThreadBody {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}

/// Starts a detached OS thread running `body`. `name` is for the reader of the call site.
/// False when the system refused a thread (a resource limit); `body` then never runs.
@discardableResult
public func startThread(name: String, _ body: @escaping @Sendable () -> Void) -> Bool {
    let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    var tid = pthread_t()
    let rc = pthread_create(&tid, &attr, { arg in
        let b = Unmanaged<ThreadBody>.fromOpaque(arg!).takeRetainedValue()
        b.body()
        return nil
    }, box)
    pthread_attr_destroy(&attr)
    if rc == 0 { return true }
    Unmanaged<ThreadBody>.fromOpaque(box).release()
    return false
}
