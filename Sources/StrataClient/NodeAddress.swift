import StrataCore
import StrataNet

/// A node of a cluster: where to connect and its name on the ring (default `host:port`).
public struct NodeAddress: Hashable, Sendable, CustomStringConvertible {
    public let host: String
    public let port: UInt16
    public let name: String
    public init(host: String, port: UInt16, name: String? = nil) {
        self.host = host; self.port = port; self.name = name ?? "\(host):\(port)"
    }
    /// Parses `HOST:PORT` (`[::1]:7400` for IPv6).
    public static func parse(_ s: String) -> NodeAddress? {
        guard let colon = s.lastIndex(of: ":"), let port = UInt16(s[s.index(after: colon)...]) else { return nil }
        var host = String(s[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        // A comma or a space is no host's: `a:1,b:2` passed as one address (a list is
        // `parseList`'s) would otherwise fail only at the first connection, as a name that
        // does not resolve (an outside review, api1).
        guard !host.isEmpty, !host.contains(where: { $0 == "," || $0.isWhitespace }) else { return nil }
        return NodeAddress(host: host, port: port, name: s)
    }
    public var description: String { name }

    /// Parses a member list — `HOST:PORT,HOST:PORT,…`, where an entry `dns:NAME:PORT` stands
    /// for every address NAME resolves to (a Kubernetes headless service) and an entry
    /// `file:PATH` for the entries in that file (separated by commas or lines; blank lines and
    /// `#` comments skipped; no `file:` inside) — as the CLI's `--nodes` and the node's
    /// `--cluster` take it. Throws a message naming the bad entry (`.connection` when a name
    /// does not resolve or a file cannot be read, `.protocolViolation` for bad syntax).
    /// Port 0 is refused, and so is a member named twice (`sameMember`): `vm:7400,VM:7400` or
    /// `[::1]:7400,[0:0::1]:7400` would be two ring members that are one node.
    public static func parseList(_ list: String, option: String) throws -> [NodeAddress] {
        let nodes = try parseList(list, option: option, inFile: nil)
        var seen: [String: String] = [:]
        for n in nodes {
            guard n.port != 0 else { throw ClientError(.protocolViolation, "\(option) entry '\(n.name)': port 0 is not a member's port") }
            let key = n.sameMember
            if let first = seen[key] {
                throw ClientError(.protocolViolation, "\(option) names one member twice: '\(first)' and '\(n.name)' (host names are compared without case or a trailing dot, IP addresses by their value; localhost is 127.0.0.1)")
            }
            seen[key] = n.name
        }
        return nodes
    }

    /// What two spellings of one member have in common: an IP address (or `localhost`) in its
    /// canonical text, a host name lower-cased without a trailing dot, and the port.
    /// (`LOCALHOST`, `localhost.` and `127.0.0.1` are one member: an outside review got one
    /// node in the ring twice from `LOCALHOST:1,localhost:1`.)
    public var sameMember: String {
        var h = host.lowercased()
        while h.hasSuffix(".") && h.count > 1 { h.removeLast() }
        if let a = SocketAddress(host: h, port: port) { return "\(a.canonicalHost)|\(port)" }
        return "\(h)|\(port)"
    }

    /// Whether `list` has entries (`dns:`, `file:`) whose members can change while the same
    /// list is in force: a node re-reads such a list (`--cluster-refresh`).
    public static func listCanChange(_ list: String) -> Bool {
        list.split(whereSeparator: { $0 == "," || $0.isNewline }).contains { p in
            let item = p.trimmedOfBlanks()
            return item.hasPrefix("dns:") || item.hasPrefix("file:")
        }
    }

    private static func parseList(_ list: String, option: String, inFile: String?) throws -> [NodeAddress] {
        var nodes: [NodeAddress] = []
        let from = inFile.map { " (in \($0))" } ?? ""
        // In a file, `#` starts a comment that runs to the end of its line.
        let text = inFile == nil ? list : list.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
            .map { $0.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? "" }
            .joined(separator: "\n")
        for part in text.split(whereSeparator: { $0 == "," || $0.isNewline }) {
            let item = part.trimmedOfBlanks()
            if inFile != nil && item.isEmpty { continue }
            if item.hasPrefix("file:") {
                let path = String(item.dropFirst(5))
                guard inFile == nil else {
                    throw ClientError(.protocolViolation, "\(option) entry '\(item)'\(from): a member file cannot name another file")
                }
                guard !path.isEmpty else { throw ClientError(.protocolViolation, "\(option) entry '\(item)' must be file:PATH") }
                guard let text = readSmallFile(path).map({ String(decoding: $0, as: UTF8.self) }) else {
                    // A missing or unreadable list is a setting to fix (exit 2), as for the other files.
                    throw ClientError(.protocolViolation, "\(option) entry '\(item)': cannot read \(path)")
                }
                nodes += try parseList(text, option: option, inFile: path)
                continue
            }
            if item.hasPrefix("dns:") {
                guard let a = NodeAddress.parse(String(item.dropFirst(4))) else {
                    throw ClientError(.protocolViolation, "\(option) entry '\(item)'\(from) must be dns:NAME:PORT")
                }
                do { nodes += try NodeAddress.resolve(a.host, port: a.port) } catch {
                    throw ClientError(.connection, "\(error)")
                }
                continue
            }
            guard let a = NodeAddress.parse(item) else {
                throw ClientError(.protocolViolation, "\(option) must be HOST:PORT,HOST:PORT,…, dns:NAME:PORT or file:PATH; '\(part)'\(from) is not")
            }
            nodes.append(a)
        }
        return nodes
    }
}

private extension Substring {
    func trimmedOfBlanks() -> String {
        var s = self[...]
        while let c = s.first, c == " " || c == "\t" || c == "\r" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" || c == "\r" { s = s.dropLast() }
        return String(s)
    }
}
