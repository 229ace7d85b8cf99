// A child process for the read-through tests: N threads call `getOrLoad` on one key at the
// same moment. The loader appends a line to a marker file (so the test counts loader runs
// across processes), sleeps, and returns a value naming this process. Prints one line per
// call: "ORIGIN VALUE". Usage:
//   strata-load-racer NODES KEY THREADS MARKER_FILE DELAY_SECONDS [START_AT_UNIX_SECONDS]
#if canImport(Glibc)
import Glibc
#endif
import Foundation
import StrataClient
import StrataCore

let args = CommandLine.arguments
guard args.count >= 6, let threads = Int(args[3]), let delay = Double(args[5]) else {
    FileHandle.standardError.write(Data("usage: strata-load-racer NODES KEY THREADS MARKER DELAY [START_AT]\n".utf8))
    exit(2)
}
let nodes = args[1].split(separator: ",").compactMap { NodeAddress.parse(String($0)) }
var config = ClusterConfiguration(nodes: nodes)
config.replicas = min(3, nodes.count)
config.timeout = 5
let client = try ClusterClient(configuration: config)
let key = Array(args[2].utf8)
let marker = args[4]
// All processes start together: wait for the agreed moment.
if args.count > 6, let startAt = Double(args[6]) {
    let wait = startAt - Date().timeIntervalSince1970
    if wait > 0 { usleep(UInt32(wait * 1e6)) }
}
final class Lines: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) { lock.lock(); items.append(s); lock.unlock() }
    var all: [String] { lock.lock(); defer { lock.unlock() }; return items }
}
let lines = Lines()
let done = DispatchGroup()
for _ in 0..<threads {
    done.enter()
    Thread.detachNewThread {
        defer { done.leave() }
        do {
            let v = try client.getOrLoad(key, ttl: .seconds(600)) {
                let fd = open(marker, O_WRONLY | O_APPEND | O_CREAT, 0o644)
                let line = "loaded by \(getpid())\n"
                _ = line.withCString { write(fd, $0, strlen($0)) }
                close(fd)
                usleep(UInt32(delay * 1e6))
                return Array("value-from-\(getpid())".utf8)
            }
            lines.add("\(v.origin.rawValue) \(String(decoding: v.value, as: UTF8.self))")
        } catch {
            lines.add("error \(error)")
        }
    }
}
done.wait()
print(lines.all.joined(separator: "\n"))
