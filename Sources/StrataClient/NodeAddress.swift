import StrataCore

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
        guard !host.isEmpty else { return nil }
        return NodeAddress(host: host, port: port, name: s)
    }
    public var description: String { name }

    /// Parses a member list — `HOST:PORT,HOST:PORT,…`, where an entry `dns:NAME:PORT` stands
    /// for every address NAME resolves to (a Kubernetes headless service) — as the CLI's
    /// `--nodes` and the node's `--cluster` take it. Throws a message naming the bad entry.
    public static func parseList(_ list: String, option: String) throws -> [NodeAddress] {
        var nodes: [NodeAddress] = []
        for part in list.split(separator: ",") {
            let item = part.trimmedOfBlanks()
            if item.hasPrefix("dns:") {
                guard let a = NodeAddress.parse(String(item.dropFirst(4))) else {
                    throw ClientError(.protocolViolation, "\(option) entry '\(item)' must be dns:NAME:PORT")
                }
                do { nodes += try NodeAddress.resolve(a.host, port: a.port) } catch {
                    throw ClientError(.connection, "\(error)")
                }
                continue
            }
            guard let a = NodeAddress.parse(item) else {
                throw ClientError(.protocolViolation, "\(option) must be HOST:PORT,HOST:PORT,… or dns:NAME:PORT; '\(part)' is not")
            }
            nodes.append(a)
        }
        return nodes
    }
}

private extension Substring {
    func trimmedOfBlanks() -> String {
        var s = self[...]
        while let c = s.first, c == " " || c == "\t" { s = s.dropFirst() }
        while let c = s.last, c == " " || c == "\t" { s = s.dropLast() }
        return String(s)
    }
}
