#if canImport(Glibc)
import Glibc
#endif
import StrataClient
import StrataCore
import Synchronization

/// Re-reads a `--cluster` list whose members can change while the node runs (`dns:` names,
/// `file:` lists; `NodeAddress.listCanChange`) every `interval` seconds, on a thread of its own
/// (`strata-members`: name resolution blocks), and hands each successful read to `apply`
/// (`Node.applyMembership`, which ignores a list with the same members). A read that fails
/// keeps the members the node has and is logged once per distinct error
/// (`cluster_refresh_failed`), and once when reads work again (`cluster_refresh_recovered`).
///
/// Cost: one read of the list (a DNS lookup or a small file) per interval.
final class MembershipRefresh: @unchecked Sendable {
    let interval: Double
    let read: @Sendable () throws -> [NodeAddress]
    let apply: @Sendable ([NodeAddress]) -> Void
    let log: Logger
    private let stopFlag = Atomic<Bool>(false)
    private let finished = Completion<Void>()
    /// The last failure logged (the refresh thread only).
    private var failing: String? = nil

    init(interval: Double, log: Logger, read: @escaping @Sendable () throws -> [NodeAddress],
         apply: @escaping @Sendable ([NodeAddress]) -> Void) {
        self.interval = interval; self.log = log; self.read = read; self.apply = apply
    }

    func start() {
        _ = startThread(name: "strata-members") { [self] in
            while !stopFlag.load(ordering: .relaxed) {
                sleep(upTo: interval) { stopFlag.load(ordering: .relaxed) }
                if stopFlag.load(ordering: .relaxed) { break }
                refreshOnce()
            }
            finished.fulfil(())
        }
    }

    /// One read and, when it worked, `apply` (the thread's body; tests call it directly).
    func refreshOnce() {
        do {
            let members = try read()
            if failing != nil { log.info("cluster_refresh_recovered", []) }
            failing = nil
            apply(members)
        } catch {
            let message = (error as? ClientError)?.message ?? "\(error)"
            if failing != message { log.warn("cluster_refresh_failed", [("error", message)]) }
            failing = message
        }
    }

    func stop() {
        stopFlag.store(true, ordering: .relaxed)
        finished.wait()
    }
}
