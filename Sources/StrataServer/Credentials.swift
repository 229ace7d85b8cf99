import Foundation
import StrataCore
import StrataWire

/// What a user may do (docs/OPERATING.md "Credentials", PROTOCOL.md §4.1).
public enum Role: String, Sendable, CaseIterable {
    /// Every operation on every namespace: FLUSH with ALL, STATS of every namespace.
    case admin
    /// Reads and writes (SET, DELETE, TOUCH, INCR/DECR, INVALIDATE, leases, FLUSH) of its namespaces.
    case readwrite
    /// Reads (GET without touch or lease, MGET, EXISTS, META, SCAN, IMAGE_INFO, IMAGE_VARIANT,
    /// STATS) of its namespaces.
    case readonly
}

/// The namespaces a user may use: exact names and prefixes. In the file a name ending in `*`
/// is a prefix (`"tenant-*"`, and `"*"` alone is every namespace); `""` is the default
/// (empty) namespace. Matching is by bytes (UTF-8), case-sensitive.
public struct NamespaceScope: Sendable, Equatable {
    public var exact: Set<[UInt8]> = []
    public var prefixes: [[UInt8]] = []

    public init(exact: Set<[UInt8]> = [], prefixes: [[UInt8]] = []) { self.exact = exact; self.prefixes = prefixes }

    /// Every namespace (`"*"`).
    public static let all = NamespaceScope(prefixes: [[]])

    /// Parses the file's patterns (see the type's doc).
    public init(patterns: [String]) {
        for p in patterns {
            var b = Array(p.utf8)
            if b.last == UInt8(ascii: "*") { b.removeLast(); prefixes.append(b) } else { exact.insert(b) }
        }
    }

    public func contains(_ namespace: [UInt8]) -> Bool {
        if exact.contains(namespace) { return true }
        for p in prefixes where namespace.starts(with: p) { return true }
        return false
    }
}

/// One named user: its token's SHA-256, its role and its namespaces. Immutable; a class so a
/// connection holds it with one reference (read on every request).
public final class User: Sendable {
    public let name: String
    /// SHA-256 of the token (32 bytes). The node never holds the token of a file user.
    let tokenHash: [UInt8]
    public let role: Role
    public let scope: NamespaceScope

    public init(name: String, tokenHash: [UInt8], role: Role, scope: NamespaceScope) {
        self.name = name; self.tokenHash = tokenHash; self.role = role
        self.scope = role == .admin ? .all : scope
    }

    /// The user of every connection to a node without credentials: anything goes.
    static let open = User(name: "-", tokenHash: [], role: .admin, scope: .all)

    /// The name `--auth-token-file`'s token authenticates as (an admin).
    public static let tokenUserName = "token"

    /// What an operation needs of its user.
    enum Need: Equatable {
        case nothing
        case read([UInt8])
        case write([UInt8])
        case admin
    }

    /// The permission table of PROTOCOL.md §4.1, per request.
    static func need(_ r: Request) -> Need {
        switch r {
        case .hello, .ping, .quit, .stats, .namespaceStats(.top): return .nothing // `namespaces` is filtered instead
        case .namespaceStats(.one(let ns)): return .read(ns)
        // A GET that touches changes the item; one that asks for a lease is a promise to fill it.
        case .get(let g): return g.touch != nil || g.lease ? .write(g.namespace) : .read(g.namespace)
        case .mget(let ns, _, _), .exists(let ns, _, _), .meta(let ns, _, _), .scan(let ns, _, _), .imageInfo(let ns, _):
            return .read(ns)
        case .imageVariant(let v): return .read(v.namespace) // a read whose result the node may cache
        case .set(let s): return .write(s.namespace)
        case .counter(let c): return .write(c.namespace)
        case .delete(let ns, _, _, _, _), .touch(let ns, _, _, _, _, _), .invalidate(let ns, _, _, _), .release(let ns, _, _):
            return .write(ns)
        case .flush(let ns, let all, _, _): return all ? .admin : .write(ns)
        // Node-to-node repair reads and writes every namespace (anti-entropy, §7.19).
        case .syncDigest, .syncKeys, .syncCheck: return .admin
        }
    }

    func may(_ need: Need) -> Bool {
        switch need {
        case .nothing: return true
        case .admin: return role == .admin
        case .read(let ns): return role == .admin || scope.contains(ns)
        case .write(let ns): return role == .admin || (role == .readwrite && scope.contains(ns))
        }
    }

    /// Whether this user may read `namespace` (SCAN, STATS groups).
    public func mayRead(_ namespace: [UInt8]) -> Bool { may(.read(namespace)) }
    /// Whether this user may write `namespace`.
    public func mayWrite(_ namespace: [UInt8]) -> Bool { may(.write(namespace)) }

    /// nil when the user may run `r`; otherwise the FORBIDDEN message.
    func refusal(_ r: Request, opcode: UInt8) -> String? {
        let n = Self.need(r)
        if may(n) { return nil }
        let op = (Opcode(rawValue: opcode)?.name ?? "this operation").uppercased()
        switch n {
        case .admin where op.hasPrefix("SYNC"): return "user '\(name)' (\(role.rawValue)) may not \(op): admin only"
        case .admin: return "user '\(name)' (\(role.rawValue)) may not \(op) ALL: admin only"
        case .read(let ns), .write(let ns):
            let what = role == .readonly && scope.contains(ns) ? "may only read" : "may not use"
            return "user '\(name)' (\(role.rawValue)) \(what) namespace '\(printableName(ns))' (\(op))"
        case .nothing: return nil
        }
    }
}

public struct CredentialsError: Error, CustomStringConvertible {
    public let description: String
    init(_ d: String) { description = d }
}

/// The users a node knows: those of `--credentials FILE`, plus the admin user `token` when
/// `--auth-token-file` is set.
///
/// File format (JSON; docs/OPERATING.md "Credentials"):
/// `{"users": [{"name": "app1", "token_sha256": "<64 hex>", "role": "readwrite",
/// "namespaces": ["app1", "tenant-*", ""]}, …]}`. Names and token hashes are unique, so the
/// token alone identifies its user. Guarantees: `authenticate` hashes the token once and
/// compares the digest with every user's in constant time (no early exit, whichever user
/// matches), so its time tells nothing of which user or how much matched. Costs: one SHA-256
/// and 32 bytes compared per user per HELLO.
public struct Credentials: Sendable {
    public let users: [User]
    private let byName: [String: Int]

    public init(users: [User]) throws(CredentialsError) {
        var byName: [String: Int] = [:]
        var hashes = Set<[UInt8]>()
        for (i, u) in users.enumerated() {
            guard byName[u.name] == nil else { throw CredentialsError("user '\(u.name)' appears twice") }
            guard hashes.insert(u.tokenHash).inserted else {
                throw CredentialsError("user '\(u.name)' has the same token as another user: each user needs its own token")
            }
            byName[u.name] = i
        }
        self.users = users
        self.byName = byName
    }

    /// The user whose token this is, or nil. Looks at every user whatever matches.
    public func authenticate(_ token: [UInt8]) -> User? {
        let digest = SHA256.hash(token)
        var found = -1
        for i in users.indices {
            let match = constantTimeEqual(digest, users[i].tokenHash)
            found = match ? i : found
        }
        return found >= 0 ? users[found] : nil
    }

    /// The user named `name` if it still has the token `hash` (a connection's user after a reload).
    func current(_ name: String, hash: [UInt8]) -> User? {
        guard let i = byName[name], users[i].tokenHash == hash else { return nil }
        return users[i]
    }

    /// The users of a credentials file's bytes, plus `token`'s admin user when given.
    public static func parse(_ bytes: [UInt8], legacyToken: [UInt8]? = nil) throws(CredentialsError) -> Credentials {
        let obj: Any
        do { obj = try JSONSerialization.jsonObject(with: Data(bytes)) } catch {
            throw CredentialsError("not JSON: \(jsonErrorReason(error, in: bytes))")
        }
        if let d = jsonDuplicateKey(in: bytes) {
            throw CredentialsError("the key '\(d.key)' appears twice in one object (line \(d.line)): which one holds would be ambiguous")
        }
        guard let top = obj as? [String: Any], let list = top["users"] as? [Any] else {
            throw CredentialsError("expected an object {\"users\": [...]}")
        }
        if let unknown = top.keys.first(where: { $0 != "users" }) { throw CredentialsError("unknown key '\(unknown)' (only \"users\")") }
        var users: [User] = []
        for (i, any) in list.enumerated() {
            guard let u = any as? [String: Any] else { throw CredentialsError("users[\(i)] is not an object") }
            let known: Set<String> = ["name", "token_sha256", "role", "namespaces"]
            if let k = u.keys.first(where: { !known.contains($0) }) {
                throw CredentialsError("users[\(i)]: unknown key '\(k)' (name, token_sha256, role, namespaces)")
            }
            guard let name = u["name"] as? String, !name.isEmpty, name.utf8.count <= 64,
                  name.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") }) else {
                throw CredentialsError("users[\(i)]: name must be 1–64 printable ASCII characters without spaces or quotes")
            }
            if name == User.tokenUserName && legacyToken != nil {
                throw CredentialsError("user '\(name)' is the name of --auth-token-file's admin user: pick another name")
            }
            guard let hex = u["token_sha256"] as? String, let hash = parseHex(hex), hash.count == 32 else {
                throw CredentialsError("user '\(name)': token_sha256 must be 64 hex digits (strata credentials hash prints it)")
            }
            guard hash != SHA256.hash([]) else {
                throw CredentialsError("user '\(name)': token_sha256 is the hash of an empty token")
            }
            guard let r = u["role"] as? String, let role = Role(rawValue: r) else {
                throw CredentialsError("user '\(name)': role must be admin, readwrite or readonly")
            }
            var patterns: [String] = []
            if let ns = u["namespaces"] {
                guard let list = ns as? [Any], let strings = list as? [String] else {
                    throw CredentialsError("user '\(name)': namespaces must be a list of strings")
                }
                patterns = strings
            }
            for p in patterns where Array(p.utf8).count > Wire.maxNamespace + 1 {
                throw CredentialsError("user '\(name)': namespace '\(p)' is over \(Wire.maxNamespace) bytes")
            }
            // A `*` anywhere but at the end was read as a literal name (an outside review, nu3:
            // "tenant-*-prod" gave a user that could reach nothing meant), as --memory-compression refuses it.
            for p in patterns where p.dropLast().contains("*") {
                throw CredentialsError("user '\(name)': namespace pattern '\(p)': * only ends a pattern (a prefix: \"tenant-*\"; every namespace: \"*\")")
            }
            if role == .admin && !(patterns.isEmpty || patterns == ["*"]) {
                throw CredentialsError("user '\(name)': an admin has every namespace; leave namespaces out (or [\"*\"])")
            }
            if role != .admin && patterns.isEmpty {
                throw CredentialsError("user '\(name)': namespaces is missing or empty (use \"\" for the default namespace, \"*\" for all)")
            }
            users.append(User(name: name, tokenHash: hash, role: role, scope: NamespaceScope(patterns: patterns)))
        }
        if let t = legacyToken { users.append(User(name: User.tokenUserName, tokenHash: SHA256.hash(t), role: .admin, scope: .all)) }
        guard !users.isEmpty else { throw CredentialsError("no users") }
        return try Credentials(users: users)
    }

    /// Reads and parses `path` (see `parse`).
    public static func load(path: String, legacyToken: [UInt8]? = nil) throws(CredentialsError) -> Credentials {
        guard let data = FileManager.default.contents(atPath: path) else {
            var isDirectory: ObjCBool = false
            let why = !FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) ? "no such file"
                : isDirectory.boolValue ? "it is a directory" : FileManager.default.isReadableFile(atPath: path) ? "it could not be read" : "permission denied"
            throw CredentialsError("cannot read '\(path)': \(why)")
        }
        do { return try parse([UInt8](data), legacyToken: legacyToken) } catch {
            throw CredentialsError("'\(path)': \(error.description)")
        }
    }

    static func parseHex(_ s: String) -> [UInt8]? {
        let b = Array(s.utf8)
        guard b.count % 2 == 0 else { return nil }
        func nibble(_ c: UInt8) -> UInt8? {
            switch c {
            case 0x30...0x39: return c - 0x30
            case 0x61...0x66: return c - 0x61 + 10
            case 0x41...0x46: return c - 0x41 + 10
            default: return nil
            }
        }
        var out: [UInt8] = []
        var i = 0
        while i < b.count {
            guard let h = nibble(b[i]), let l = nibble(b[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }
}

/// The node's current credentials, swapped whole by a reload (SIGHUP). Thread-safe: a lock
/// around one reference; `generation` (a relaxed atomic) tells connections, on each request,
/// that their user must be looked up again.
final class CredentialStore: @unchecked Sendable {
    private let lock = Lock()
    private var value: Credentials?
    private let gen = Counter()

    /// nil: the node has no credentials (no token, no file): every connection is `User.open`.
    init(_ c: Credentials?) { value = c }

    var enabled: Bool { lock.withLock { value != nil } }
    var current: Credentials? { lock.withLock { value } }
    var generation: Int { gen.load() }

    func replace(_ c: Credentials) {
        lock.withLock { value = c }
        gen.add(1)
    }
}
