import StrataCore
import StrataNet

// Credentials, their reload, the brute-force throttle's answers and the audit log
// (docs/OPERATING.md "Credentials", PROTOCOL.md §4).
extension Node {
    /// The users a configuration names: the credentials file's, plus the admin user `token`
    /// for `--auth-token-file`; nil when neither is set (no authentication).
    static func loadCredentials(_ config: NodeConfiguration) throws -> Credentials? {
        do {
            if let path = config.credentialsFile { return try Credentials.load(path: path, legacyToken: config.authToken) }
            if let t = config.authToken {
                return try Credentials(users: [User(name: User.tokenUserName, tokenHash: SHA256.hash(t), role: .admin, scope: .all)])
            }
            return nil
        } catch {
            throw NodeError(exitCode: 2, "--credentials: \(error.description)")
        }
    }

    /// Whether connections must authenticate (a token or a credentials file is set).
    var authEnabled: Bool { credentials.enabled }

    var authMode: String {
        config.credentialsFile != nil ? "credentials" : config.authToken != nil ? "token" : "off"
    }

    /// SIGHUP: reads the credentials file again. A file that cannot be read or parsed changes
    /// nothing (the old users stay) and logs `credentials_reload_failed` with the reason.
    /// Connections whose user was removed, or whose token changed, are refused at their next
    /// request (`Connection.currentUser`). Returns whether the new users took effect.
    @discardableResult
    public func reload() -> Bool {
        guard let path = config.credentialsFile else {
            log.info("reload", [("credentials", "none: nothing to reload")])
            return false
        }
        do {
            let c = try Credentials.load(path: path, legacyToken: config.authToken)
            credentials.replace(c)
            stats.credentialsReloads.add(1, ordering: .relaxed)
            log.audit("credentials_reload", user: "-", peer: "signal", [("file", path), ("users", String(c.users.count))])
            return true
        } catch {
            stats.credentialsReloadFailures.add(1, ordering: .relaxed)
            log.error("credentials_reload_failed", [("file", path), ("reason", error.description),
                                                    ("kept_users", String(credentials.current?.users.count ?? 0))])
            return false
        }
    }

    /// Records an admin operation: `level=audit event=audit action=… user=… peer=…` plus
    /// `fields`. Written whatever `--log-level` says.
    /// How far ahead of this node's clock a version a user other than admin names may be.
    /// Versions order every write and a node's clock never falls behind one it took, so a
    /// tenant's far-future version would re-stamp every other tenant's writes and stretch
    /// `--max-age` (an outside review moved a cluster's clocks 23.9 h ahead with one SET):
    /// only admin — the cluster's own peers, a single-token node — keeps the store's 24 h.
    static let userVersionSkewMicros: UInt64 = 5_000_000

    /// Why a caller version from a user other than admin is refused, or nil.
    func versionRefusal(_ v: UInt64?) -> String? {
        guard let v else { return nil }
        let limit = UInt64(max(0, store.clock.nowMicros())) &+ Self.userVersionSkewMicros
        guard v > limit else { return nil }
        return "version \(v) is more than \(Self.userVersionSkewMicros / 1_000_000) s ahead of this node's wall clock (users other than admin may not name a later one)"
    }

    func audit(_ action: String, user: String, peer: String, _ fields: [(String, String)] = []) {
        let (write, suppressed) = auditBudget.take(user, second: Int64(monotonicSeconds()))
        if suppressed > 0 { log.audit("audit_suppressed", user: user, peer: peer, [("count", String(suppressed))]) }
        if write { log.audit(action, user: user, peer: peer, fields) }
    }


    /// A failed authentication from `peer`: counted, logged at most once per address per 10 s,
    /// and the seconds to wait before answering it (0: at once).
    func authenticationFailed(peer: String, connection: Int, protocol proto: String) -> Double {
        stats.authFailures.add(1, ordering: .relaxed)
        let d = authThrottle.failed(peer)
        if d.delay > 0 { stats.authDelayed.add(1, ordering: .relaxed) }
        if d.log {
            log.warn("auth_failed", [("peer", peer), ("conn", String(connection)), ("protocol", proto),
                                     ("failures_last_minute", String(d.failures)), ("delay_ms", String(Int(d.delay * 1000))),
                                     ("not_logged_since", String(d.suppressed))])
        }
        return d.delay
    }
}

/// A namespace (any bytes) as a log field: printable ASCII as is, anything else as `\xNN`, so a
/// name cannot forge a log line or field.
func logSafe(_ bytes: [UInt8]) -> String {
    var s = ""
    for b in bytes {
        if b >= 0x21 && b < 0x7F && b != UInt8(ascii: "\\") && b != UInt8(ascii: "\"") && b != UInt8(ascii: "=") {
            s.unicodeScalars.append(Unicode.Scalar(b))
        } else {
            let h = String(b, radix: 16)
            s += "\\x" + (h.count == 1 ? "0" + h : h)
        }
    }
    return s
}
