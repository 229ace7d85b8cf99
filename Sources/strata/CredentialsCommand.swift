import Foundation
import StrataCore
import StrataServer

let credentialsUsage = """
usage: strata credentials hash [TOKEN]     print the SHA-256 (hex) of TOKEN, or of stdin when
                                           TOKEN is left out (one line; trailing CR and LF dropped)
       strata credentials check FILE.json  parse a credentials file and list its users

`hash` prints the value of a user's "token_sha256" in a --credentials file (docs/OPERATING.md
"Credentials"). Reading the token from stdin keeps it out of the shell's history and the
process list: `openssl rand -hex 32 | tee app1.token | strata credentials hash`.
`check` exits 0 when the file would load (and prints `NAME ROLE NAMESPACES` per user), 2 when
not (with the reason), so a file can be checked before a SIGHUP.
"""

/// `strata credentials hash|check`.
func credentialsCommand(_ args: [String]) throws -> Int32 {
    let o = try ParsedOptions(args, valued: [], switches: ["--help"], maxPositionals: 2)
    if o.switches.contains("--help") || o.positionals.isEmpty {
        printOut(credentialsUsage)
        return o.positionals.isEmpty && !o.switches.contains("--help") ? 2 : 0
    }
    switch o.positionals[0] {
    case "hash":
        let fromArgument = o.positionals.count == 2
        var token = fromArgument ? Array(o.positionals[1].utf8) : [UInt8](FileHandle.standardInput.readDataToEndOfFile())
        // The same rule for TOKEN and stdin (an outside review, ver31: a TOKEN ending in a
        // newline was hashed with it, a hash no client's token ever matches): trailing CR and
        // LF dropped, one line, as a token file must be (`readToken`) — hashing a second
        // line's first made a user whose token file neither the node nor the client reads (nu5 F7).
        while let last = token.last, last == 10 || last == 13 { token.removeLast() }
        guard !token.contains(10) && !token.contains(13) else {
            throw UsageError(message: (fromArgument ? "TOKEN" : "standard input") + " holds more than one line: a token is one line")
        }
        guard !token.isEmpty else { throw UsageError(message: "the token is empty") }
        printOut(SHA256.hex(token))
        return 0
    case "check":
        guard o.positionals.count == 2 else { throw UsageError(message: "check needs the file") }
        let c: Credentials
        do { c = try Credentials.load(path: o.positionals[1]) } catch {
            printErr("strata credentials: \(error.description)")
            return 2
        }
        for u in c.users {
            let ns = u.role == .admin ? ["*"] : u.scope.exact.map { String(decoding: $0, as: UTF8.self) }.sorted().map { $0.isEmpty ? "\"\"" : $0 }
                + u.scope.prefixes.map { String(decoding: $0, as: UTF8.self) + "*" }.sorted()
            printOut("\(u.name) \(u.role.rawValue) \(ns.joined(separator: ","))")
        }
        return 0
    default:
        throw UsageError(message: "unknown credentials command '\(o.positionals[0])' (hash or check)")
    }
}
