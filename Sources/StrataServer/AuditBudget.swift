import StrataCore

/// At most `perSecond` audit lines per user per second: a readwrite user's FLUSH of its own
/// namespaces wrote one line each, ~18,000 a second whatever --log-level said (an outside
/// review). The lines past the bound are counted, and the user's next line that passes is
/// preceded by one `action=audit_suppressed count=N`. Costs a lock and a dictionary probe per
/// audit line; one small entry per user that audited (users are few: the credentials file).
final class AuditBudget: @unchecked Sendable {
    static let perSecond = 100
    private let lock = Lock()
    private var users: [String: (second: Int64, lines: Int, suppressed: Int)] = [:]

    /// Whether `user`'s line in `second` is written, and the lines suppressed before it that
    /// are to be reported now (0: none).
    func take(_ user: String, second: Int64) -> (write: Bool, report: Int) {
        lock.withLock {
            var e = users[user] ?? (second, 0, 0)
            var report = 0
            if e.second != second {
                report = e.suppressed
                e = (second, 0, 0)
            }
            let write = e.lines < Self.perSecond
            if write { e.lines += 1 } else { e.suppressed += 1 }
            users[user] = e
            return (write, write ? report : 0)
        }
    }
}
